"""The end-of-turn update is retried, idempotently (issue 26, item 5).

``pg_terminate_backend`` during ``UPDATE sessions`` used to fail the command (exit 9). The
run's status and the counters are now written in one transaction guarded by the run still
being ``running``, retried once on a lost connection: a retry after a lost answer adds
nothing twice.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, event
from sqlalchemy.exc import OperationalError

from hango.compaction.record import RunState
from hango.core.messages import Usage
from hango.core.price import Price
from hango.cost.meter import UsageTotals
from hango.providers.scripted import text_reply
from hango.store import Store
from tests.agent_support import build

PRICE = Price(base_input=3.0, cache_write_5m=3.75, cache_read=0.3, output=15.0)


def _store(tmp_path: Path) -> Store:
    store = Store.from_url(f"sqlite:///{tmp_path / 'c.db'}")
    store.migrate()
    store.ensure_session("s1", "m")
    return store


def _usage() -> UsageTotals:
    return UsageTotals().plus(Usage(input_tokens=100, output_tokens=10), PRICE)


@contextmanager
def _connection_killed_under(engine: Engine, times: int = 1) -> Iterator[list[str]]:
    """The next ``times`` ``UPDATE sessions`` fail as a terminated backend does."""
    killed: list[str] = []

    def kill(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith("UPDATE SESSIONS") and len(killed) < times:
            killed.append(statement)
            raise OperationalError(
                statement, {}, Exception("terminating connection"), connection_invalidated=True
            )

    event.listen(engine, "before_cursor_execute", kill)
    try:
        yield killed
    finally:
        event.remove(engine, "before_cursor_execute", kill)


def test_closing_a_turn_twice_counts_its_usage_once(tmp_path: Path) -> None:
    store = _store(tmp_path)
    run_id = store.start_run("s1", 1, RunState())
    close = {"status": "completed", "last_input_tokens": 7, "compactions": 0, "usage": _usage()}
    assert store.close_turn(run_id, "s1", **close) is True
    assert store.close_turn(run_id, "s1", **close) is False  # a retry after a lost answer
    info = store.session("s1")
    assert info is not None and info.usage.output_tokens == 10 and info.last_input_tokens == 7
    run = store.latest_run("s1")
    assert run is not None and run.status == "completed"


def test_a_connection_lost_under_the_update_is_retried_once(tmp_path: Path) -> None:
    store = _store(tmp_path)
    run_id = store.start_run("s1", 1, RunState())
    with _connection_killed_under(store.engine) as killed:
        store.close_turn(
            run_id, "s1", status="completed", last_input_tokens=5, compactions=1, usage=_usage()
        )
    assert len(killed) == 1
    info = store.session("s1")
    assert info is not None and info.usage.output_tokens == 10 and info.compactions == 1


def test_a_turn_survives_a_backend_terminated_at_its_end(tmp_path: Path) -> None:
    agent, provider = build(tmp_path)
    provider.push(text_reply("first"))
    agent.loop.run_turn("s", "hello")
    provider.push(text_reply("second"))
    with _connection_killed_under(agent.store.engine) as killed:
        result = agent.loop.run_turn("s", "again")
    assert killed and result.response is not None
    runs = agent.store.runs("s")
    assert [r.status for r in runs] == ["completed", "completed"]
