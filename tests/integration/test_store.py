"""The store on the real PostgreSQL: the shared contract plus what only PostgreSQL shows."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import text

from shared.core.messages import Message
from shared.store import Store
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
            assert list(stored_text) == [json.dumps(m.to_api()) for _, m in conversation]

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
