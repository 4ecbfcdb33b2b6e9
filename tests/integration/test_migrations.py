"""The Alembic revisions on the real PostgreSQL, through the API and the command line."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from sqlalchemy import inspect

from hango.store.repository import engine_from_url
from hango.store.tables import metadata
from tests.unit.store.test_store_sqlite import (
    HEAD_REVISION,
    REPO_ROOT,
    MigrationsContract,
    columns,
    current_revision,
)

pytestmark = pytest.mark.integration


class TestMigrationsOnPostgres(MigrationsContract):
    @pytest.fixture
    def empty_url(self, fresh_pg_url: str) -> str:
        return fresh_pg_url


def alembic_cli(url: str, *arguments: str) -> None:
    environment = {**os.environ, "HANGO_DATABASE_URL": url}
    subprocess.run(
        [sys.executable, "-m", "alembic", *arguments],
        cwd=REPO_ROOT,
        env=environment,
        check=True,
        capture_output=True,
        timeout=120,
    )


def test_command_line_uses_hango_database_url(fresh_pg_url: str) -> None:
    engine = engine_from_url(fresh_pg_url)
    try:
        alembic_cli(fresh_pg_url, "upgrade", "head")
        assert set(inspect(engine).get_table_names()) == {*metadata.tables, "alembic_version"}

        alembic_cli(fresh_pg_url, "downgrade", "-1")
        assert "session_branches" not in inspect(engine).get_table_names()
        assert current_revision(engine) == "0006_message_estimates"

        alembic_cli(fresh_pg_url, "downgrade", "-1")
        assert "estimated_tokens" not in columns(engine, "messages")
        assert current_revision(engine) == "0005_session_cache_usage"

        alembic_cli(fresh_pg_url, "downgrade", "-1")
        assert "cache_read_tokens" not in columns(engine, "sessions")
        assert "compactions" in columns(engine, "sessions")
        assert current_revision(engine) == "0004_turn_leases"

        alembic_cli(fresh_pg_url, "downgrade", "-1")
        assert "session_leases" not in inspect(engine).get_table_names()
        assert current_revision(engine) == "0003_session_counters"

        alembic_cli(fresh_pg_url, "downgrade", "-1")
        assert "compactions" not in columns(engine, "sessions")
        assert current_revision(engine) == "0002_history"
    finally:
        engine.dispose()


def test_concurrent_migrations_take_turns(fresh_pg_url: str) -> None:
    # Separate processes, as at a pool's start-up (Alembic's own context is per process).
    script = "import sys; from hango.store import Store; Store.from_url(sys.argv[1]).migrate()"
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", script, fresh_pg_url],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(3)
    ]
    outcomes = [(process.wait(timeout=120), process.communicate()[1]) for process in processes]

    assert [code for code, _ in outcomes] == [0, 0, 0], [err.decode()[-500:] for _, err in outcomes]
    engine = engine_from_url(fresh_pg_url)
    try:
        assert current_revision(engine) == HEAD_REVISION
    finally:
        engine.dispose()
