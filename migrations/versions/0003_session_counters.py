"""Session counters: last_input_tokens and compactions, written once per turn.

Their own revision, and the last one, so ``alembic downgrade -1`` drops exactly these two
columns and nothing else: compaction keeps its authoritative record in the run state and
the history file, so removing the counters needs no data repair.

Revision ID: 0003_session_counters
Revises: 0002_history
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003_session_counters"
down_revision: str | None = "0002_history"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.add_column(
            sa.Column(
                "last_input_tokens", sa.Integer(), nullable=False, server_default=sa.text("0")
            )
        )
        batch.add_column(
            sa.Column("compactions", sa.Integer(), nullable=False, server_default=sa.text("0"))
        )


def downgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("compactions")
        batch.drop_column("last_input_tokens")
