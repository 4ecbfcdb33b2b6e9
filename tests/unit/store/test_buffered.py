"""The replay's buffered store: the store contract, the plain store's answers turn by turn
and the same rows in the end, and the statements a turn no longer runs."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, event, select

from hango.compaction.record import RunState
from hango.core.errors import UnknownSessionError
from hango.core.messages import Message, Usage
from hango.core.price import Price
from hango.cost.meter import UsageTotals
from hango.store import MessageEstimate, Store
from hango.store.buffered import FLUSH_ROWS, FLUSHED_FIRST, BufferedStore
from hango.store.repository import engine_from_url
from hango.store.tables import messages, runs, sessions
from tests.unit.store.test_store_sqlite import StoreContract, compaction, recorded_statements

PRICE = Price(base_input=3.0, cache_write_5m=3.75, cache_read=0.3, output=15.0)


def _fresh(path: Path) -> BufferedStore:
    return BufferedStore.fresh(engine_from_url(f"sqlite:///{path}"))


class TestBufferedStore(StoreContract):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[Store]:
        created = _fresh(tmp_path / "buffered.db")
        yield created
        created.engine.dispose()


def _turn(store: Store, session_id: str, number: int) -> list[Any]:
    """One turn as the loop makes it (with a compaction every 7th), and what it read."""
    info = store.session(session_id)
    if info is None:
        store.ensure_session(session_id, "m")
    turn = store.last_turn(session_id) + 1
    state = store.latest_state(session_id).next_turn()
    run_id = store.start_run(session_id, turn, state)
    # The time of day aside: the two stores create their sessions moments apart.
    timeless = None if info is None else replace(info, created_at=datetime.min)
    read = [
        timeless,
        turn,
        state,
        store.messages(session_id, from_seq=store.last_seq(session_id) + 1),
    ]
    estimate = MessageEstimate("est/1", number)
    read.append(
        store.append_messages(
            session_id, turn, [(Message(role="user", content=f"u{number}"), estimate)]
        )
    )
    if number % 7 == 0:
        state = state.with_compaction(compaction(turn, max(1, 2 * number - 3)))
        store.save_run_state(run_id, state)
    read.append(
        store.append_messages(
            session_id, turn, [(Message(role="assistant", content=f"a{number}"), None)]
        )
    )
    usage = UsageTotals().plus(
        Usage(input_tokens=number, output_tokens=3, cache_read_input_tokens=7), PRICE
    )
    closed = store.close_turn(
        run_id,
        session_id,
        status="failed" if number % 5 == 0 else "completed",
        error="boom" if number % 5 == 0 else None,
        last_input_tokens=10 * number,
        compactions=state.compaction_count,
        usage=usage if number % 3 else None,
    )
    return [
        *read,
        closed,
        store.close_turn(
            run_id, session_id, status="completed", last_input_tokens=1, compactions=0
        ),
    ]


def _rows(engine: Engine) -> dict[str, list[tuple[Any, ...]]]:
    """Every table's rows the replay writes, without the times of day."""
    timeless = {
        "sessions": [c for c in sessions.c if c.name != "created_at"],
        "messages": [c for c in messages.c if c.name != "created_at"],
        "runs": [c for c in runs.c if c.name not in ("started_at", "finished_at")],
    }
    with engine.connect() as conn:
        return {
            name: [tuple(row) for row in conn.execute(select(*columns).order_by(*columns[:2]))]
            for name, columns in timeless.items()
        }


def test_the_turns_read_and_write_what_the_plain_store_does(tmp_path: Path) -> None:
    plain = Store.from_url(f"sqlite:///{tmp_path / 'plain.db'}")
    plain.migrate()
    buffered = _fresh(tmp_path / "buffered.db")
    turns = FLUSH_ROWS // 2 + 40  # past one flush, with rows still pending at the end
    for number in range(1, turns + 1):
        for session_id in ("s1", "s2"):
            assert _turn(buffered, session_id, number) == _turn(plain, session_id, number)
    for store in (plain, buffered):  # the reads that go to the database, pending rows first
        assert store.messages("s1", from_seq=3, to_seq=6) == plain.messages("s1", 3, 6)
    assert [r.state for r in buffered.runs("s2")] == [r.state for r in plain.runs("s2")]
    assert buffered.message_estimates("s1", "est/1") == plain.message_estimates("s1", "est/1")
    buffered.flush()
    assert _rows(buffered.engine) == _rows(plain.engine)
    assert len(_rows(plain.engine)["messages"]) == 4 * turns


def test_a_turn_runs_no_statement_until_a_flush_writes_a_batch_of_turns(tmp_path: Path) -> None:
    store = _fresh(tmp_path / "buffered.db")
    store.ensure_session("s1", "m")
    turns = FLUSH_ROWS // 2
    with recorded_statements(store.engine) as seen:
        for number in range(1, turns):
            _turn(store, "s1", number)
        assert seen == []  # the plain store runs ~17 statements a turn
        _turn(store, "s1", turns)
    # One transaction: the runs, their states, the messages and the session's counters.
    assert [statement.split()[0:3] for statement in seen] == [
        ["INSERT", "INTO", "runs"],
        ["INSERT", "INTO", "messages"],
        ["UPDATE", "sessions", "SET"],
    ]


def test_a_store_over_a_database_that_holds_sessions_is_refused(tmp_path: Path) -> None:
    plain = Store.from_url(f"sqlite:///{tmp_path / 'kept.db'}")
    plain.migrate()
    plain.ensure_session("s1", "m")
    with pytest.raises(ValueError, match="empty database"):
        _fresh(tmp_path / "kept.db")


def test_an_earlier_turn_and_an_unknown_run_fall_back_to_the_database(tmp_path: Path) -> None:
    store = _fresh(tmp_path / "buffered.db")
    store.ensure_session("s1", "m")
    first = store.start_run("s1", 1, RunState())
    second = store.start_run("s1", 2, RunState())
    assert store.start_run("s1", 1, RunState()) == first  # the existing run, unchanged
    store.flush()  # memory holds the latest run only: the first is the database's now
    usage = UsageTotals().plus(Usage(input_tokens=5, output_tokens=2), PRICE)
    closing = {"status": "completed", "last_input_tokens": 5, "compactions": 0, "usage": usage}
    assert store.close_turn(first, "s1", **closing) is True
    assert store.close_turn(first, "s1", **closing) is False
    in_memory = store.session("s1")
    store.flush()
    assert in_memory == Store.session(store, "s1")  # the database's own row
    assert in_memory is not None and in_memory.usage.output_tokens == 2
    assert store.start_run("s1", 3, RunState()) == second + 1
    with pytest.raises(UnknownSessionError):
        store.start_run("nobody", 1, RunState())
    with pytest.raises(LookupError, match="999"):
        store.save_run_state(999, RunState())


def test_every_store_method_is_answered_from_memory_or_after_a_flush() -> None:
    # A method added to Store later would otherwise read a database behind this store.
    asked = {
        name
        for name, member in vars(Store).items()
        if callable(member) and not name.startswith("__") and name != "flush"
    }
    # Schema steps, and helpers reached only through a method that answered or flushed.
    unbuffered = {
        "migrate",
        "require_schema",
        "from_url",
        "append_message",
        "_write_counters",
        "_append_surviving_a_disconnect",
        "_append_once",
    }
    answered = {name for name in vars(BufferedStore) if not name.startswith("__")}
    assert asked - answered - unbuffered == set()
    assert set(FLUSHED_FIRST) <= answered


def test_rows_of_a_failed_flush_stay_pending_for_the_next(tmp_path: Path) -> None:
    store = _fresh(tmp_path / "buffered.db")
    _turn(store, "s1", 1)

    def refuse(*args: Any) -> None:
        raise RuntimeError("disk full")

    event.listen(store.engine, "before_cursor_execute", refuse)
    with pytest.raises(RuntimeError, match="disk full"):
        store.flush()
    event.remove(store.engine, "before_cursor_execute", refuse)
    store.flush()
    assert [m.message.content for m in store.messages("s1")] == ["u1", "a1"]
    assert [(r.turn, r.status) for r in store.runs("s1")] == [(1, "completed")]
