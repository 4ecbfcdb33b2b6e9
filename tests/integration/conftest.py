"""Fixtures for tests against the real PostgreSQL at 127.0.0.1:5432 (user ``postgres``).

- ``pg_url``: a fresh database ``hango_test_<random>`` for the whole test session,
  migrated to head, dropped at the end.
- ``pg_engine`` / ``pg_store``: that database with every product table emptied before
  the test (one ``TRUNCATE``), so tests stay independent and fast.
- ``fresh_pg_url``: a database of its own, not migrated, for tests that move the schema
  (migrations); dropped after the test.

Set ``HANGO_TEST_PG_ADMIN_URL`` to point the tests at another server.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

from hango.store import Store
from hango.store.tables import metadata

ADMIN_URL = os.environ.get(
    "HANGO_TEST_PG_ADMIN_URL", "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres"
)


def create_database() -> str:
    """Create an empty database with a random name; its URL."""
    name = f"hango_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    finally:
        admin.dispose()
    return make_url(ADMIN_URL).set(database=name).render_as_string(hide_password=False)


def drop_database(url: str) -> None:
    name = make_url(url).database
    admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    url = create_database()
    try:
        store = Store.from_url(url)
        store.migrate()
        store.engine.dispose()
        yield url
    finally:
        drop_database(url)


@pytest.fixture(scope="session")
def _pg_session_engine(pg_url: str) -> Iterator[Engine]:
    engine = Store.from_url(pg_url).engine
    yield engine
    engine.dispose()


@pytest.fixture
def pg_engine(_pg_session_engine: Engine) -> Engine:
    """The session database's engine, every product table empty."""
    tables = ", ".join(f'"{table.name}"' for table in metadata.sorted_tables)
    with _pg_session_engine.begin() as conn:
        conn.execute(text(f"TRUNCATE {tables} RESTART IDENTITY CASCADE"))
    return _pg_session_engine


@pytest.fixture
def pg_store(pg_engine: Engine) -> Store:
    """A migrated store on PostgreSQL with no data in it."""
    return Store(pg_engine)


@pytest.fixture
def fresh_pg_url() -> Iterator[str]:
    """A brand-new empty database (no schema), dropped after the test."""
    url = create_database()
    try:
        yield url
    finally:
        drop_database(url)
