"""The PostgreSQL history backend: the shared backend contract on the real database."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, func, select

from hango.core.settings import load_settings
from hango.history.paths import conversation_history_path
from hango.history.postgres import PostgresHistory
from hango.store.tables import history_sections
from hango.wiring.history import history_from_settings
from tests.unit.history.test_local import HistoryContract, race_one_key

pytestmark = pytest.mark.integration


class TestPostgresHistory(HistoryContract):
    @pytest.fixture
    def history(self, pg_engine: Engine) -> PostgresHistory:
        return PostgresHistory(pg_engine)

    def test_a_duplicate_race_leaves_one_section_row(self, history: PostgresHistory) -> None:
        path = conversation_history_path("s1")
        race_one_key(history, path, threads=20)
        with history.engine.connect() as conn:
            rows = conn.execute(select(func.count()).select_from(history_sections)).scalar_one()
        assert rows == 1


def test_factory_builds_the_database_backend_on_the_given_engine(
    pg_url: str, pg_engine: Engine
) -> None:
    settings = load_settings(history_backend="postgres", database_url=pg_url)
    history = history_from_settings(settings, engine=pg_engine)
    history.write("/x.md", "y")

    assert isinstance(history, PostgresHistory)
    assert history.engine is pg_engine
    assert PostgresHistory(pg_engine).read("/x.md") == "y"


def test_a_nul_in_evicted_text_does_not_fail_the_offload(pg_engine: Engine) -> None:
    history = PostgresHistory(pg_engine)
    path = conversation_history_path("s-nul")
    assert history.append_section(path, "turn-1-seq-1-2", "binary output: a\x00b")
    history.write("/work/raw.txt", "x\x00y")
    assert "a\ufffdb" in history.read(path)
    assert history.read("/work/raw.txt") == "x\ufffdy"
