"""Turn leases: one turn at a time per session, across processes and hosts.

A row per session that has ever run a turn: who holds the session (a random token), the
fencing number of that holding (incremented by every new holder) and when the holding
expires unless heartbeated. Appends check the fence in the same transaction, so a holder
whose lease expired and was taken over can no longer write. ``alembic downgrade -1``
drops the table and nothing else: a lease is only meaningful while a turn runs.

Revision ID: 0004_turn_leases
Revises: 0003_session_counters
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004_turn_leases"
down_revision: str | None = "0003_session_counters"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "session_leases",
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("holder", sa.Text(), nullable=False),
        sa.Column("fence", sa.Integer(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"], ["sessions.id"], name="fk_session_leases_session_id_sessions"
        ),
        sa.PrimaryKeyConstraint("session_id", name="pk_session_leases"),
    )


def downgrade() -> None:
    op.drop_table("session_leases")
