"""History tables for the PostgreSQL history backend: files and their appended sections.

Revision ID: 0002_history
Revises: 0001_core
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002_history"
down_revision: str | None = "0001_core"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "history_files",
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("path", name="pk_history_files"),
    )
    # One row per (file, section key) ever appended: the primary key is what makes a
    # concurrent duplicate append a no-op.
    op.create_table(
        "history_sections",
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("path", "key", name="pk_history_sections"),
    )


def downgrade() -> None:
    op.drop_table("history_sections")
    op.drop_table("history_files")
