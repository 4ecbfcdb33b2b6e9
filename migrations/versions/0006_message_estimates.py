"""Message estimates: each message's token estimate, stored when it is appended.

Two nullable columns on ``messages``: ``estimated_tokens`` (the estimator's figure for the
message, framing included) and ``estimator`` (the estimator's signature: its name and the
version of its rules). A restarted process seeds its estimator with the figures whose
signature matches its own, so rebuilding a long session's budget does not tokenize the
whole history again; a figure from another estimator, or a row without one (appended
before this revision), is simply estimated again. The columns are written with the row
and never updated, so messages stay append-only. ``alembic downgrade -1`` drops the two
columns and nothing else: they are a cache, never the truth.

Revision ID: 0006_message_estimates
Revises: 0005_session_cache_usage
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006_message_estimates"
down_revision: str | None = "0005_session_cache_usage"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("messages") as batch:
        batch.add_column(sa.Column("estimated_tokens", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("estimator", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("messages") as batch:
        batch.drop_column("estimator")
        batch.drop_column("estimated_tokens")
