"""Session branches: a session that continues another from where their histories diverged.

The gateway (``hango serve``) receives the client's whole history on every call. When it
no longer extends what a session stored (the client edited or rewound it, or compacted it
on its own), the request continues as a new session, a branch, and nothing stored is
rewritten. This table says so: the branch, the session it diverged from and the first
message (as the client numbers them, from 0) that differs. A row is written once, when the
branch starts. ``alembic downgrade -1`` drops the table and nothing else.

Revision ID: 0007_session_branches
Revises: 0006_message_estimates
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007_session_branches"
down_revision: str | None = "0006_message_estimates"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "session_branches",
        sa.Column("session_id", sa.Text(), sa.ForeignKey("sessions.id"), primary_key=True),
        sa.Column("parent_id", sa.Text(), sa.ForeignKey("sessions.id"), nullable=False),
        sa.Column("diverged_at", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("session_branches")
