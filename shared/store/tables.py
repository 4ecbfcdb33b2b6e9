"""The SQLAlchemy table definitions, matching the head Alembic revision exactly.

The migrations under ``migrations/versions`` are the source of truth for the schema;
these tables mirror them (a test compares the two), so the repository's queries and the
database never drift. Constraint names follow one naming convention so a migration can
name any constraint it touches.

``messages`` is append-only (invariant 1): nothing in the product updates or deletes its
rows. ``content`` is ``json`` rather than ``jsonb`` so PostgreSQL keeps the message's
JSON text as written.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import Insert as PgInsert
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import Insert as SqliteInsert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s_%(column_1_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)

sessions = Table(
    "sessions",
    metadata,
    Column("id", Text, primary_key=True),
    Column("model", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("last_input_tokens", Integer, nullable=False, server_default=text("0")),
    Column("compactions", Integer, nullable=False, server_default=text("0")),
    # Real usage summed over every model call (revision 0005).
    Column("cache_read_tokens", BigInteger, nullable=False, server_default=text("0")),
    Column("cache_write_tokens", BigInteger, nullable=False, server_default=text("0")),
    Column("uncached_input_tokens", BigInteger, nullable=False, server_default=text("0")),
    Column("output_tokens", BigInteger, nullable=False, server_default=text("0")),
    Column("input_cost_usd", Float, nullable=False, server_default=text("0")),
)

messages = Table(
    "messages",
    metadata,
    Column("session_id", Text, ForeignKey("sessions.id"), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("turn", Integer, nullable=False),
    Column("role", Text, nullable=False),
    Column("content", JSON, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    # The estimator's figure for the message when it was appended, and that estimator's
    # signature: a cache for a restarted process (revision 0004), never the truth.
    Column("estimated_tokens", Integer, nullable=True),
    Column("estimator", Text, nullable=True),
    PrimaryKeyConstraint("session_id", "seq"),
)

runs = Table(
    "runs",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("session_id", Text, ForeignKey("sessions.id"), nullable=False),
    Column("turn", Integer, nullable=False),
    Column("status", Text, nullable=False),
    Column("state", JSON, nullable=False),
    Column("started_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True), nullable=True),
    Column("error", Text, nullable=True),
    UniqueConstraint("session_id", "turn"),
)

session_leases = Table(
    "session_leases",
    metadata,
    Column("session_id", Text, ForeignKey("sessions.id"), primary_key=True),
    Column("holder", Text, nullable=False),
    Column("fence", Integer, nullable=False),
    Column("expires_at", Float, nullable=False),
)

# A session that continues another one from where their histories diverged (the gateway's
# branches: a client edited, rewound or compacted its history). Written once, never updated.
session_branches = Table(
    "session_branches",
    metadata,
    Column("session_id", Text, ForeignKey("sessions.id"), primary_key=True),
    Column("parent_id", Text, ForeignKey("sessions.id"), nullable=False),
    # The first message (0-based, as the client sent its history) that differs.
    Column("diverged_at", Integer, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

history_files = Table(
    "history_files",
    metadata,
    Column("path", Text, primary_key=True),
    Column("content", Text, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

history_sections = Table(
    "history_sections",
    metadata,
    Column("path", Text, nullable=False),
    Column("key", Text, nullable=False),
    PrimaryKeyConstraint("path", "key"),
)


def conflict_insert(dialect_name: str, table: Table) -> PgInsert | SqliteInsert:
    """An INSERT for ``table`` that supports ``on_conflict_do_nothing``/``_do_update``.

    Both supported databases spell "insert unless it exists" natively, which is what makes
    idempotent inserts race-free without a read first.
    """
    if dialect_name == "postgresql":
        return pg_insert(table)
    if dialect_name == "sqlite":
        return sqlite_insert(table)
    raise NotImplementedError(
        f"database dialect {dialect_name!r} is not supported: use PostgreSQL or SQLite"
    )
