"""Session usage counters: real cache reads, cache writes, uncached input, output and cost.

Summed from the provider's ``usage`` of every model call and added once per turn, in the
same ``UPDATE sessions`` as the other counters, so ``hango sessions show`` can print the
session's real cache read ratio and input cost. Their own revision, so ``alembic
downgrade`` of it drops exactly these columns: they are figures about past calls that
nothing else depends on, and removing them needs no data repair.

Revision ID: 0005_session_cache_usage
Revises: 0004_turn_leases
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005_session_cache_usage"
down_revision: str | None = "0004_turn_leases"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TOKEN_COLUMNS = (
    "cache_read_tokens",
    "cache_write_tokens",
    "uncached_input_tokens",
    "output_tokens",
)


def upgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        for name in TOKEN_COLUMNS:
            batch.add_column(
                sa.Column(name, sa.BigInteger(), nullable=False, server_default=sa.text("0"))
            )
        batch.add_column(
            sa.Column(
                "input_cost_usd", sa.Float(), nullable=False, server_default=sa.text("0")
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("input_cost_usd")
        for name in reversed(TOKEN_COLUMNS):
            batch.drop_column(name)
