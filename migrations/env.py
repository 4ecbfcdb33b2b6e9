"""Alembic environment: runs the revisions on a handed-over connection or on the settings' URL.

``Store.migrate`` and the tests hand their own connection over in
``config.attributes["connection"]``; the ``alembic`` command line gets none and opens one
on ``HANGO_DATABASE_URL`` (through ``hango.core.settings.load_settings``, the one place that
reads the environment).

On PostgreSQL the whole upgrade holds a transaction-level advisory lock, so two processes
migrating at start-up run one after the other instead of racing on the same DDL. On
SQLite, foreign-key enforcement is switched off for the run: batch operations rebuild a
table by copy-and-rename, which the ``sessions`` foreign keys would otherwise refuse.
"""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context
from sqlalchemy import Connection, text

from hango.core.settings import load_settings
from hango.store.repository import engine_from_url
from hango.store.tables import metadata

config = context.config
# Any fixed number works; it only has to be the same for every process migrating.
MIGRATION_LOCK_ID = 0x68616E67


def run_migrations_offline() -> None:
    context.configure(
        url=load_settings().database_url,
        target_metadata=metadata,
        literal_binds=True,
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    handed_over = config.attributes.get("connection")
    if isinstance(handed_over, Connection):
        _run_on(handed_over)
        return
    if config.config_file_name is not None:
        # Keep loggers configured by whoever embeds us (pytest's capture, the product's).
        fileConfig(config.config_file_name, disable_existing_loggers=False)
    engine = engine_from_url(load_settings().database_url)
    try:
        with engine.connect() as connection:
            _run_on(connection)
            connection.commit()
    finally:
        engine.dispose()


def _run_on(connection: Connection) -> None:
    if connection.dialect.name == "sqlite":
        connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
    context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
    with context.begin_transaction():
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": MIGRATION_LOCK_ID})
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
