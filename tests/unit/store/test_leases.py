"""One turn at a time per session: the session lease on SQLite, and the loop that holds it."""

from __future__ import annotations

from pathlib import Path

import pytest

from hango.core.errors import SessionBusyError, TurnLeaseLostError
from hango.core.messages import Message
from hango.providers.scripted import text_reply
from hango.store import Store
from hango.store.leases import LeasePolicy, SessionLeases
from hango.wiring.agent import open_store
from tests.agent_support import build, make_settings
from tests.lease_checks import assert_turns_serialized, run_processes


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def store(tmp_path: Path) -> Store:
    store = open_store(make_settings(tmp_path))
    store.ensure_session("s1", "m")
    return store


def test_one_holder_at_a_time_and_every_new_holder_a_higher_fence(store: Store) -> None:
    leases = SessionLeases(store.engine)
    first = leases.try_acquire("s1", ttl=30)
    assert first is not None and first.fence == 1
    assert leases.try_acquire("s1", ttl=30) is None

    leases.release(first)
    second = leases.try_acquire("s1", ttl=30)

    assert second is not None and second.fence == 2 and second.holder != first.holder


def test_a_crashed_holders_lease_expires_and_its_late_appends_are_refused(store: Store) -> None:
    clock = Clock()
    leases = SessionLeases(store.engine, clock=clock)
    crashed = leases.try_acquire("s1", ttl=5)
    assert crashed is not None
    clock.now += 4.9
    assert leases.try_acquire("s1", ttl=5) is None  # still held
    clock.now += 0.2

    taker = leases.try_acquire("s1", ttl=5)

    assert taker is not None and taker.fence == crashed.fence + 1
    hello = Message(role="user", content="hello")
    store.append_message("s1", 1, hello, taker)
    with pytest.raises(TurnLeaseLostError, match="lost its lease"):
        store.append_message("s1", 1, Message(role="user", content="late"), crashed)
    assert [m.message.text() for m in store.messages("s1")] == ["hello"]
    assert not leases.extend(crashed, ttl=5)  # the heartbeat of the old holder learns it


def test_a_second_turn_on_a_busy_session_waits_then_fails_clearly(tmp_path: Path) -> None:
    agent, _ = build(tmp_path, session_busy_timeout=0.3, session_lease_ttl=30)
    agent.store.ensure_session("s1", "m")
    other = SessionLeases(agent.store.engine).try_acquire("s1", ttl=30)  # another process
    assert other is not None

    with pytest.raises(SessionBusyError, match="running a turn in another process") as caught:
        agent.loop.run_turn("s1", "hello")

    assert caught.value.waited >= 0.3  # type: ignore[attr-defined]
    assert "HANGO_SESSION_BUSY_TIMEOUT" in str(caught.value)
    assert agent.store.messages("s1") == [] and agent.store.runs("s1") == []


def test_the_turn_waits_for_the_holder_and_then_runs(tmp_path: Path) -> None:
    agent, _ = build(tmp_path, [text_reply("hi")], session_busy_timeout=10)
    agent.store.ensure_session("s1", "m")
    leases = SessionLeases(agent.store.engine)
    other = leases.try_acquire("s1", ttl=0.4)  # a crashed holder: nobody heartbeats it
    assert other is not None

    result = agent.loop.run_turn("s1", "hello")

    assert result.turn == 1 and len(agent.store.messages("s1")) == 2


def test_a_finished_turn_frees_the_session_at_once(tmp_path: Path) -> None:
    agent, _ = build(tmp_path, [text_reply("hi")])
    agent.loop.run_turn("s1", "hello")
    assert SessionLeases(agent.store.engine).try_acquire("s1", ttl=30) is not None


def test_eight_processes_on_one_sqlite_session_take_turns(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'hango.db'}"
    open_store(make_settings(tmp_path, database_url=url)).engine.dispose()

    ran = run_processes(url, "busy", processes=8, turns=3, home=tmp_path / "home")

    assert sorted(ran) == list(range(1, 25))  # unique and consecutive
    assert_turns_serialized(Store.from_url(url), "busy", turns=24)


def test_the_policy_defaults_come_from_the_settings(tmp_path: Path) -> None:
    agent, _ = build(tmp_path, session_busy_timeout=7, session_lease_ttl=9)
    assert agent.loop.lease_policy == LeasePolicy(ttl=9, wait=7)
