"""The store on the real PostgreSQL: the shared contract plus what only PostgreSQL shows."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Engine, event, text

from hango.compaction.record import RunState
from hango.core.messages import Message, message_json
from hango.store import Store
from tests.unit.store.test_store_sqlite import StoreContract, run_threads, tool_batch_conversation

pytestmark = pytest.mark.integration


class TestStoreOnPostgres(StoreContract):
    @pytest.fixture
    def store(self, pg_store: Store) -> Store:
        return pg_store

    def test_message_json_text_is_kept_as_written(self, store: Store) -> None:
        store.ensure_session("s1", "m")
        conversation = tool_batch_conversation()
        for turn, message in conversation:
            store.append_message("s1", turn, message)

        with store.engine.connect() as conn:
            column_type = conn.execute(
                text(
                    "SELECT data_type FROM information_schema.columns "
                    "WHERE table_name = 'messages' AND column_name = 'content'"
                )
            ).scalar_one()
            stored_text = conn.execute(
                text("SELECT content::text FROM messages ORDER BY seq")
            ).scalars()
            assert column_type == "json"
            # The message's compact JSON, byte for byte what a request body carries for it.
            assert [b"," + t.encode() for t in stored_text] == [
                message_json(m) for _, m in conversation
            ]

    def test_many_writers_across_sessions(self, store: Store) -> None:
        for sid in ("a", "b"):
            store.ensure_session(sid, "m")

        def append(worker: int) -> None:
            sid = "ab"[worker % 2]
            for index in range(5):
                store.append_message(sid, 1, Message(role="user", content=f"{worker}:{index}"))

        run_threads(20, append)

        for sid in ("a", "b"):
            assert [m.seq for m in store.messages(sid)] == list(range(1, 51))


# -- a connection terminated mid-statement (issue 14, defect 17) ---------------------------


class Terminator:
    """Terminates the store's own backend right before the next statement matching ``word``."""

    def __init__(self, store: Store, killer: Engine) -> None:
        self.killer = killer
        self.armed: str | None = None
        self.kills = 0
        event.listen(store.engine, "before_cursor_execute", self._before)

    def arm(self, word: str) -> None:
        self.armed = word

    def _before(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if self.armed is None or self.armed not in statement:
            return
        self.armed = None
        pid = conn.connection.dbapi_connection.get_backend_pid()
        with self.killer.connect() as other:
            other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        self.kills += 1


@pytest.mark.parametrize("word", ["SELECT", "INSERT INTO messages", "UPDATE runs"])
def test_a_terminated_connection_costs_one_retry_of_the_idempotent_step(
    pg_engine: Engine, pg_url: str, word: str
) -> None:
    store = Store.from_url(pg_url)
    terminator = Terminator(store, pg_engine)
    store.ensure_session("s-term", "m")
    run_id = store.start_run("s-term", 1, RunState())
    terminator.arm(word)
    stored = store.append_message("s-term", 1, Message(role="user", content="hello"))
    store.save_run_state(run_id, RunState(compaction_count=1))
    assert terminator.kills == 1
    assert [m.seq for m in store.messages("s-term")] == [stored.seq] == [1]
    assert store.latest_state("s-term").compaction_count == 1
    store.engine.dispose()
