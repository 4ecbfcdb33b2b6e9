"""Deleting a session's rows and finding idle sessions, on a real SQLite store."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select, update

from hango.compaction.record import RunState
from hango.core.errors import SessionBusyError
from hango.core.messages import Message
from hango.store import Store
from hango.store.leases import LeasePolicy, SessionLeases
from hango.store.retention import delete_session, idle_sessions
from hango.store.tables import messages, runs, session_leases, sessions

POLICY = LeasePolicy(ttl=30.0, wait=0.5)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    created = Store.from_url(f"sqlite:///{tmp_path / 'hango.db'}")
    created.migrate()
    yield created
    created.engine.dispose()


def seed(store: Store, session_id: str) -> None:
    store.ensure_session(session_id, "m")
    store.append_message(session_id, 1, Message(role="user", content="hello"))
    store.append_message(session_id, 1, Message(role="assistant", content="hi"))
    store.finish_run(store.start_run(session_id, 1, RunState()), "completed")


def rows(store: Store, session_id: str) -> dict[str, int]:
    counted = {}
    with store.engine.connect() as conn:
        for table, column in (
            (sessions, sessions.c.id),
            (messages, messages.c.session_id),
            (runs, runs.c.session_id),
            (session_leases, session_leases.c.session_id),
        ):
            query = select(func.count()).select_from(table).where(column == session_id)
            counted[table.name] = conn.execute(query).scalar_one()
    return counted


def test_delete_removes_every_row_of_the_session_and_only_those(store: Store) -> None:
    seed(store, "gone")
    seed(store, "kept")
    leases = SessionLeases(store.engine)
    leases.release(leases.acquire("gone", policy=POLICY))  # a released lease row stays
    assert rows(store, "gone")["session_leases"] == 1
    assert delete_session(store, "gone")
    assert set(rows(store, "gone").values()) == {0}
    assert rows(store, "kept") == {"sessions": 1, "messages": 2, "runs": 1, "session_leases": 0}
    assert not delete_session(store, "gone")


def test_a_session_with_a_live_lease_is_refused_and_left_whole(store: Store) -> None:
    seed(store, "busy")
    SessionLeases(store.engine).acquire("busy", policy=POLICY)
    with pytest.raises(SessionBusyError, match="running a turn in another process"):
        delete_session(store, "busy")
    assert rows(store, "busy") == {"sessions": 1, "messages": 2, "runs": 1, "session_leases": 1}
    # Once the lease has expired (its process died), the session can go.
    assert delete_session(store, "busy", now=1e12)


def test_idle_sessions_are_judged_by_their_last_message(store: Store) -> None:
    for session_id in ("old", "recent", "empty-old", "empty-new"):
        store.ensure_session(session_id, "m")
    store.append_message("old", 1, Message(role="user", content="long ago"))
    store.append_message("recent", 1, Message(role="user", content="long ago"))
    store.append_message("recent", 1, Message(role="assistant", content="just now"))
    now = datetime.now(UTC)
    with store.engine.begin() as conn:
        long_ago = now - timedelta(days=40)
        conn.execute(
            update(messages).where(messages.c.session_id == "old").values(created_at=long_ago)
        )
        conn.execute(
            update(messages)
            .where((messages.c.session_id == "recent") & (messages.c.seq == 1))
            .values(created_at=long_ago)
        )
        conn.execute(
            update(sessions).where(sessions.c.id != "empty-new").values(created_at=long_ago)
        )
    assert idle_sessions(store, now - timedelta(days=30)) == ["empty-old", "old"]
    assert idle_sessions(store, now - timedelta(days=50)) == []
