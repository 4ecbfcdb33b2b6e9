"""The store's contract, run here on SQLite (the embedded default).

``StoreContract`` and ``MigrationsContract`` hold the checks; the integration tests run
the same classes against PostgreSQL, which is the proof that the real path works.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from sqlalchemy import Engine, Text, cast, event, inspect, select, text, update
from sqlalchemy.dialects import postgresql, sqlite

from hango.compaction.record import CompactionRecord, RunState
from hango.core.errors import (
    ConfigError,
    InvalidInputError,
    InvalidSessionIdError,
    TurnLeaseLostError,
    UnknownSessionError,
)
from hango.core.messages import Message, Usage, message_json
from hango.core.price import Price
from hango.cost.meter import UsageTotals
from hango.store import MessageEstimate, RunInfo, Store
from hango.store.leases import SessionLeases
from hango.store.repository import _INSERT_MESSAGES, engine_from_url
from hango.store.tables import messages, metadata

REPO_ROOT = Path(__file__).resolve().parents[3]


def tool_batch_conversation() -> list[tuple[int, Message]]:
    """Two turns with parallel tool calls, an error result, images, thinking, extras."""
    raw: list[tuple[int, dict[str, Any]]] = [
        (1, {"role": "user", "content": "List the repo and read the README."}),
        (
            1,
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Two calls at once.", "signature": "c2ln"},
                    {"type": "text", "text": "Looking."},
                    {"type": "tool_use", "id": "toolu_01", "name": "ls", "input": {"path": "/"}},
                    {
                        "type": "tool_use",
                        "id": "toolu_02",
                        "name": "read_file",
                        "input": {"path": "/README.md", "limit": 200, "nested": {"a": [1, 2]}},
                    },
                ],
            },
        ),
        (
            1,
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_01",
                        "content": "README.md\nsrc/",
                    },
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_02",
                        "content": [
                            {"type": "text", "text": "# hango ünïcödé ✓"},
                            {
                                "type": "image",
                                "source": {
                                    "type": "base64",
                                    "media_type": "image/png",
                                    "data": "iV",
                                },
                            },
                        ],
                    },
                ],
            },
        ),
        (1, {"role": "assistant", "content": [{"type": "text", "text": "Done.", "zeta": 1}]}),
        (2, {"role": "user", "content": [{"type": "text", "text": "Delete /tmp.", "a_key": None}]}),
        (
            2,
            {
                "role": "assistant",
                "content": [
                    {"type": "redacted_thinking", "data": "ZW5j"},
                    {"type": "server_tool_use", "id": "srv_1", "name": "web", "input": {}},
                    {"type": "tool_use", "id": "toolu_03", "name": "rm", "input": {"path": "/tmp"}},
                ],
            },
        ),
        (
            2,
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_03",
                        "content": "refused",
                        "is_error": True,
                        "cache_control": {"type": "ephemeral"},
                    }
                ],
            },
        ),
    ]
    return [(turn, Message.model_validate(body)) for turn, body in raw]


@contextmanager
def recorded_statements(engine: Engine) -> Iterator[list[str]]:
    """Every SQL statement the engine sends while the block runs."""
    seen: list[str] = []

    def record(*args: Any) -> None:
        seen.append(" ".join(str(args[2]).split()))

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


def message_rows(engine: Engine, session_id: str) -> list[tuple[Any, ...]]:
    query = select(messages).where(messages.c.session_id == session_id).order_by(messages.c.seq)
    with engine.connect() as conn:
        return [tuple(row) for row in conn.execute(query)]


def compaction(at_turn: int, kept_from_seq: int) -> CompactionRecord:
    return CompactionRecord(
        at_turn=at_turn,
        reason="threshold",
        kept_from_seq=kept_from_seq,
        summary=f"summary up to {kept_from_seq}",
        offload_path="/conversation_history/s1.md",
        tokens_before=170_000,
        tokens_after=12_000,
        evicted_messages=kept_from_seq - 1,
        summarizer="queued",
    )


class StoreContract:
    """Checks every store must pass; subclasses provide the ``store`` fixture.

    A check that reads the tables through ``store.engine`` calls ``store.flush()`` first
    (a no-op but for a buffered store, which writes its pending rows then).
    """

    def test_tool_batches_round_trip_exactly(self, store: Store) -> None:
        store.ensure_session("s1", "claude-sonnet-4-5")
        conversation = tool_batch_conversation()
        appended = [store.append_message("s1", turn, message) for turn, message in conversation]

        loaded = store.messages("s1")

        assert [m.seq for m in appended] == list(range(1, len(conversation) + 1))
        assert loaded == appended
        for (turn, original), stored in zip(conversation, loaded, strict=True):
            assert stored.turn == turn
            # Order-sensitive: the JSON comes back key for key, as it was written.
            assert json.dumps(stored.message.to_api()) == json.dumps(original.to_api())
        store.flush()
        with store.engine.connect() as conn:
            raw = conn.execute(select(messages.c.role, messages.c.content)).all()
        assert [row.content for row in raw] == [m.to_api() for _, m in conversation]
        assert [row.role for row in raw] == [m.role for _, m in conversation]

    def test_a_row_holds_the_messages_part_of_a_body_and_a_read_carries_it(
        self, store: Store
    ) -> None:
        store.ensure_session("s1", "m")
        conversation = tool_batch_conversation()
        appended = [store.append_message("s1", turn, message) for turn, message in conversation]
        store.flush()
        with store.engine.connect() as conn:
            query = select(cast(messages.c.content, Text)).order_by(messages.c.seq)
            raw = conn.execute(query).scalars().all()

        parts = [message_json(message) for _, message in conversation]
        assert [b"," + content.encode() for content in raw] == parts
        assert [stored.json_part for stored in appended] == parts
        loaded = store.messages("s1")
        assert [stored.json_part for stored in loaded] == parts
        # A copy of one with another message does not carry the first one's JSON.
        other = dataclasses.replace(loaded[0], message=Message(role="user", content="other"))
        assert other.json_part is None
        assert dataclasses.replace(loaded[0]).json_part is None

    def test_a_row_an_older_version_wrote_spaced_is_read_without_a_part(self, store: Store) -> None:
        store.ensure_session("s1", "m")
        message = Message(role="user", content="written before the rows were compact")
        store.append_message("s1", 1, message)
        store.flush()
        with store.engine.begin() as conn:
            # The JSON type's own dump, as the rows were written then: spaced.
            conn.execute(update(messages).values(content=message.to_api()))

        (loaded,) = store.messages("s1")

        assert loaded.message == message
        assert loaded.json_part is None  # serialized again where sent, never sent spaced

    def test_a_message_that_cannot_be_json_is_refused_and_nothing_of_its_batch_stored(
        self, store: Store
    ) -> None:
        store.ensure_session("s1", "m")
        kept = store.append_message("s1", 1, Message(role="user", content="fine"))
        # A lone surrogate, as json.loads makes of a client's "\ud83d" escape.
        broken = Message(role="assistant", content="half an emoji: \ud83d")

        with pytest.raises(InvalidInputError, match="message 2 of the batch cannot be sent"):
            store.append_messages(
                "s1", 2, [(Message(role="assistant", content="ok"), None), (broken, None)]
            )

        assert store.messages("s1") == [kept]

    def test_messages_bounds_are_inclusive_and_ordered(self, store: Store) -> None:
        store.ensure_session("s1", "m")
        for index in range(6):
            store.append_message("s1", 1, Message(role="user", content=f"m{index}"))

        assert [m.seq for m in store.messages("s1", from_seq=2, to_seq=4)] == [2, 3, 4]
        assert [m.seq for m in store.messages("s1", from_seq=5)] == [5, 6]
        assert [m.message.content for m in store.messages("s1", to_seq=2)] == ["m0", "m1"]
        assert store.messages("s1", from_seq=7) == []
        assert store.messages("missing") == []

    def test_seq_counts_per_session(self, store: Store) -> None:
        store.ensure_session("a", "m")
        store.ensure_session("b", "m")
        seqs = [
            store.append_message(sid, 1, Message(role="user", content=sid)).seq
            for sid in ("a", "b", "a", "a", "b")
        ]
        assert seqs == [1, 1, 2, 3, 2]

    def test_concurrent_appends_get_unique_consecutive_seqs(self, store: Store) -> None:
        store.ensure_session("s1", "m")
        threads, per_thread = 8, 10
        start = threading.Barrier(threads)

        def append_many(worker: int) -> None:
            start.wait()
            for index in range(per_thread):
                text_ = f"{worker}:{index}"
                store.append_message("s1", 1, Message(role="user", content=text_))

        run_threads(threads, append_many)

        stored = store.messages("s1")
        assert [m.seq for m in stored] == list(range(1, threads * per_thread + 1))
        for worker in range(threads):
            mine = [
                m.message.content for m in stored if str(m.message.content).startswith(f"{worker}:")
            ]
            assert mine == [f"{worker}:{index}" for index in range(per_thread)]

    def test_a_batch_takes_the_next_seqs_in_order_with_its_estimates(self, store: Store) -> None:
        store.ensure_session("s1", "m")
        store.append_message("s1", 1, Message(role="user", content="before"))
        batch = [
            (Message(role="assistant", content=f"a{i}"), MessageEstimate("est/1", 10 + i))
            for i in range(3)
        ]
        batch.append((Message(role="user", content="no estimate"), None))

        appended = store.append_messages("s1", 2, batch)

        assert [(m.seq, m.turn) for m in appended] == [(2, 2), (3, 2), (4, 2), (5, 2)]
        assert store.messages("s1")[1:] == appended
        assert [m.message for m in appended] == [message for message, _ in batch]
        assert store.message_estimates("s1", "est/1") == {2: 10, 3: 11, 4: 12}
        # Each stored message carries its estimate, appended and read back alike.
        figures = [None, ("est/1", 10), ("est/1", 11), ("est/1", 12), None]
        assert [m.estimate for m in appended] == figures[1:]
        assert [m.estimate for m in store.messages("s1")] == figures
        assert dataclasses.replace(appended[0]).estimate is None  # as json_part: not copied
        assert store.append_messages("s1", 2, []) == []
        assert [m.seq for m in store.messages("s1")] == [1, 2, 3, 4, 5]

    def test_concurrent_batches_land_whole_and_in_order(self, store: Store) -> None:
        store.ensure_session("s1", "m")
        threads, batches, size = 6, 4, 5
        start = threading.Barrier(threads)

        def append_batches(worker: int) -> None:
            start.wait()
            for index in range(batches):
                batch = [
                    (Message(role="user", content=f"{worker}:{index}:{k}"), None)
                    for k in range(size)
                ]
                store.append_messages("s1", 1, batch)

        run_threads(threads, append_batches)

        stored = store.messages("s1")
        assert [m.seq for m in stored] == list(range(1, threads * batches * size + 1))
        texts = [str(m.message.content) for m in stored]
        for first in range(0, len(texts), size):  # no batch is split by another writer's
            prefix = texts[first].rsplit(":", 1)[0]
            assert texts[first : first + size] == [f"{prefix}:{k}" for k in range(size)]

    def test_a_batch_under_a_lost_lease_stores_nothing(self, store: Store) -> None:
        store.ensure_session("s1", "m")
        leases = SessionLeases(store.engine)
        stale = leases.try_acquire("s1", ttl=30)
        assert stale is not None
        leases.release(stale)
        current = leases.try_acquire("s1", ttl=30)
        assert current is not None
        batch = [(Message(role="user", content=f"m{i}"), None) for i in range(3)]

        with pytest.raises(TurnLeaseLostError, match="lost its lease"):
            store.append_messages("s1", 1, batch, stale)

        assert store.messages("s1") == []
        assert [m.seq for m in store.append_messages("s1", 1, batch, current)] == [1, 2, 3]

    def test_append_to_unknown_session_is_refused(self, store: Store) -> None:
        with pytest.raises(UnknownSessionError, match="nobody"):
            store.append_message("nobody", 1, Message(role="user", content="hi"))

    def test_ensure_session_is_idempotent_and_validates(self, store: Store) -> None:
        store.ensure_session("s-1.a_b", "model-a")
        first = store.session("s-1.a_b")
        store.ensure_session("s-1.a_b", "model-b")

        assert store.session("s-1.a_b") == first
        assert first is not None
        assert (first.model, first.last_input_tokens, first.compactions) == ("model-a", 0, 0)
        assert first.created_at.tzinfo is not None
        assert store.session("other") is None
        for hostile in ("../../etc/passwd", "a/b", "a\x00", "x" * 10_000, ""):
            with pytest.raises(InvalidSessionIdError):
                store.ensure_session(hostile, "m")
        assert [s.id for s in store.sessions()] == ["s-1.a_b"]

    def test_last_turn_covers_messages_and_runs(self, store: Store) -> None:
        store.ensure_session("s1", "m")
        assert store.last_turn("s1") == 0
        store.append_message("s1", 2, Message(role="user", content="hi"))
        assert store.last_turn("s1") == 2
        store.start_run("s1", 3, RunState())
        assert store.last_turn("s1") == 3

    def test_runs_and_state_round_trip(self, store: Store) -> None:
        store.ensure_session("s1", "m")
        assert store.latest_state("s1") == RunState()
        first = store.start_run("s1", 1, RunState())
        state = RunState().with_compaction(compaction(1, 5))
        state = state.model_copy(update={"force_compaction": "overflow"})
        store.save_run_state(first, state)
        store.finish_run(first, "completed")
        second = store.start_run("s1", 2, state)
        later = state.with_compaction(compaction(2, 9))
        store.save_run_state(second, later)
        store.finish_run(second, "failed", error="ContextOverflowError: too long")

        assert store.run("s1", 1) == RunInfo(first, "s1", 1, "completed", state, None)
        assert store.run("s1", 2) == RunInfo(
            second, "s1", 2, "failed", later, "ContextOverflowError: too long"
        )
        assert store.latest_state("s1") == later
        assert [r.turn for r in store.runs("s1")] == [1, 2]
        assert store.run("s1", 3) is None

    def test_resumed_turn_gets_the_existing_run_unchanged(self, store: Store) -> None:
        store.ensure_session("s1", "m")
        state = RunState().with_compaction(compaction(1, 3))
        run_id = store.start_run("s1", 1, state)

        assert store.start_run("s1", 1, RunState()) == run_id
        found = store.run("s1", 1)
        assert found is not None
        assert (found.state, found.status) == (state, "running")
        assert len(store.runs("s1")) == 1

    def test_run_errors_name_the_bad_input(self, store: Store) -> None:
        store.ensure_session("s1", "m")
        run_id = store.start_run("s1", 1, RunState())
        with pytest.raises(ValueError, match="'done'"):
            store.finish_run(run_id, "done")
        with pytest.raises(LookupError, match="999"):
            store.save_run_state(999, RunState())
        with pytest.raises(UnknownSessionError):
            store.start_run("nobody", 1, RunState())

    def test_write_session_counters_is_one_update(self, store: Store) -> None:
        store.ensure_session("s1", "m")
        with recorded_statements(store.engine) as seen:
            store.write_session_counters("s1", last_input_tokens=123_456, compactions=2)
            store.flush()

        updates = [s for s in seen if s.upper().startswith("UPDATE")]
        assert len(updates) == 1
        assert updates[0].upper().startswith("UPDATE SESSIONS")
        info = store.session("s1")
        assert info is not None
        assert (info.last_input_tokens, info.compactions) == (123_456, 2)
        with pytest.raises(UnknownSessionError):
            store.write_session_counters("nobody", last_input_tokens=1, compactions=0)

    def test_usage_is_added_in_the_same_single_update(self, store: Store) -> None:
        store.ensure_session("s1", "m")
        price = Price(base_input=3.0, cache_write_5m=3.75, cache_read=0.3, output=15.0)
        turn = UsageTotals().plus(
            Usage(
                input_tokens=7,
                output_tokens=40,
                cache_read_input_tokens=900,
                cache_creation_input_tokens=100,
            ),
            price,
        )
        store.write_session_counters("s1", last_input_tokens=1007, compactions=0, usage=turn)
        store.flush()
        with recorded_statements(store.engine) as seen:
            store.write_session_counters("s1", last_input_tokens=1010, compactions=1, usage=turn)
            store.flush()

        assert [s.upper()[:15] for s in seen if s.upper().startswith("UPDATE")] == [
            "UPDATE SESSIONS"
        ]
        info = store.session("s1")
        assert info is not None
        assert (info.last_input_tokens, info.compactions) == (1010, 1)
        usage = info.usage
        assert (usage.read_tokens, usage.write_tokens, usage.uncached_tokens) == (1800, 200, 14)
        assert usage.output_tokens == 80
        assert usage.input_cost_usd == pytest.approx(2 * price.input_cost(900, 100, 7))

    def test_messages_are_never_updated_or_deleted(self, store: Store) -> None:
        mutators = [
            name
            for name in dir(Store)
            if not name.startswith("_")
            and any(verb in name for verb in ("update", "delete", "edit", "replace", "remove"))
        ]
        assert mutators == []

        with recorded_statements(store.engine) as seen:
            store.ensure_session("s1", "m")
            for turn, message in tool_batch_conversation():
                store.append_message("s1", turn, message)
            run_id = store.start_run("s1", 2, RunState())
            store.save_run_state(run_id, RunState().with_compaction(compaction(2, 4)))
            store.flush()
            before = message_rows(store.engine, "s1")
            store.write_session_counters("s1", last_input_tokens=9, compactions=1)
            store.finish_run(run_id, "completed")
            store.flush()

        assert message_rows(store.engine, "s1") == before
        touching_messages = [
            s for s in seen if s.upper().startswith(("UPDATE MESSAGES", "DELETE FROM MESSAGES"))
        ]
        assert touching_messages == []


def run_threads(count: int, target: Callable[[int], None]) -> None:
    """Run ``target(i)`` in ``count`` threads; re-raise the first error any of them hit."""
    errors: list[BaseException] = []

    def guarded(index: int) -> None:
        try:
            target(index)
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    workers = [threading.Thread(target=guarded, args=(i,)) for i in range(count)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    if errors:
        raise errors[0]


def test_a_postgresql_url_without_the_driver_names_the_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "psycopg2", None)  # as if [postgres] were not installed
    with pytest.raises(ConfigError, match=r"pip install 'hango-context\[postgres\]'") as caught:
        engine_from_url("postgresql://hango:s3cret@127.0.0.1:5432/hango")
    assert "s3cret" not in str(caught.value) and "psycopg2" in str(caught.value)


# -- migrations -------------------------------------------------------------------------


def run_alembic(url: str, action: str, revision: str) -> None:
    """``alembic <action> <revision>`` on ``url``, handing our connection to env.py."""
    config = Config(str(REPO_ROOT / "alembic.ini"))
    engine = engine_from_url(url)
    try:
        with engine.connect() as conn:
            config.attributes["connection"] = conn
            getattr(command, action)(config, revision)
            conn.commit()
    finally:
        engine.dispose()


def columns(engine: Engine, table: str) -> list[str]:
    return [column["name"] for column in inspect(engine).get_columns(table)]


def table_rows(engine: Engine, table: str, order_by: str) -> list[tuple[Any, ...]]:
    with engine.connect() as conn:
        return [
            tuple(row) for row in conn.execute(text(f"SELECT * FROM {table} ORDER BY {order_by}"))
        ]


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


HEAD_REVISION = "0007_session_branches"
CORE_COLUMNS = ("id", "model", "created_at")
COUNTER_COLUMNS = ("last_input_tokens", "compactions")  # 0003
USAGE_COLUMNS = (  # 0005
    "cache_read_tokens",
    "cache_write_tokens",
    "uncached_input_tokens",
    "output_tokens",
    "input_cost_usd",
)


class MigrationsContract:
    """Checks on the Alembic revisions; subclasses provide ``empty_url`` (no schema)."""

    def test_head_matches_the_table_definitions(self, empty_url: str) -> None:
        run_alembic(empty_url, "upgrade", "head")
        engine = engine_from_url(empty_url)
        try:
            with engine.connect() as conn:
                differences = compare_metadata(MigrationContext.configure(conn), metadata)
            assert differences == []
            assert current_revision(engine) == HEAD_REVISION
        finally:
            engine.dispose()

    def test_downgrade_one_drops_exactly_the_counters_and_keeps_data(self, empty_url: str) -> None:
        store = Store.from_url(empty_url)
        try:
            store.migrate()
            seed(store)
            store.engine.dispose()
            run_alembic(empty_url, "downgrade", "0005_session_cache_usage")  # under the estimates
            kept_tables = ("messages", "runs", "history_files", "history_sections")
            before = {name: table_rows(store.engine, name, "1") for name in kept_tables}
            before_columns = {name: columns(store.engine, name) for name in kept_tables}
            store.engine.dispose()

            run_alembic(empty_url, "downgrade", "0003_session_counters")

            assert current_revision(store.engine) == "0003_session_counters"
            assert columns(store.engine, "sessions") == [*CORE_COLUMNS, *COUNTER_COLUMNS]
            assert {name: columns(store.engine, name) for name in kept_tables} == before_columns
            assert {name: table_rows(store.engine, name, "1") for name in kept_tables} == before
            assert [row[3:] for row in table_rows(store.engine, "sessions", "id")] == [(5000, 1)]

            run_alembic(empty_url, "downgrade", "-1")

            assert current_revision(store.engine) == "0002_history"
            assert columns(store.engine, "sessions") == list(CORE_COLUMNS)
            assert {name: columns(store.engine, name) for name in kept_tables} == before_columns
            assert {name: table_rows(store.engine, name, "1") for name in kept_tables} == before
            assert [row[0] for row in table_rows(store.engine, "sessions", "id")] == ["s1"]
            store.engine.dispose()

            run_alembic(empty_url, "upgrade", "0005_session_cache_usage")

            assert columns(store.engine, "sessions")[3:] == [*COUNTER_COLUMNS, *USAGE_COLUMNS]
            info = store.session("s1")
            assert info is not None
            assert (info.last_input_tokens, info.compactions) == (0, 0)
            assert info.usage == UsageTotals()
            # Every row kept (messages are read through the store at head: they carry the
            # estimate stored with them, a column of 0006).
            assert {name: table_rows(store.engine, name, "1") for name in kept_tables} == before
        finally:
            store.engine.dispose()

    def test_downgrade_one_drops_exactly_the_usage_counters(self, empty_url: str) -> None:
        store = Store.from_url(empty_url)
        try:
            store.migrate()
            seed(store)
            store.engine.dispose()
            run_alembic(empty_url, "downgrade", "0005_session_cache_usage")  # under the estimates
            kept = ("messages", "runs", "history_files", "history_sections", "session_leases")
            before = {name: table_rows(store.engine, name, "1") for name in kept}
            store.engine.dispose()

            run_alembic(empty_url, "downgrade", "-1")

            assert current_revision(store.engine) == "0004_turn_leases"
            assert columns(store.engine, "sessions") == [*CORE_COLUMNS, *COUNTER_COLUMNS]
            assert [row[3:] for row in table_rows(store.engine, "sessions", "id")] == [(5000, 1)]
            assert {name: table_rows(store.engine, name, "1") for name in kept} == before
            store.engine.dispose()

            run_alembic(empty_url, "upgrade", "0005_session_cache_usage")

            info = store.session("s1")
            assert info is not None and info.usage == UsageTotals()
        finally:
            store.engine.dispose()

    def test_downgrade_one_drops_exactly_the_turn_leases(self, empty_url: str) -> None:
        store = Store.from_url(empty_url)
        try:
            store.migrate()
            seed(store)
            store.engine.dispose()
            run_alembic(empty_url, "downgrade", "0004_turn_leases")  # under the usage counters
            kept = ("sessions", "messages", "runs", "history_files", "history_sections")
            before = {name: table_rows(store.engine, name, "1") for name in kept}
            store.engine.dispose()

            run_alembic(empty_url, "downgrade", "-1")

            assert current_revision(store.engine) == "0003_session_counters"
            assert "session_leases" not in inspect(store.engine).get_table_names()
            assert {name: table_rows(store.engine, name, "1") for name in kept} == before
            store.engine.dispose()

            run_alembic(empty_url, "upgrade", "0004_turn_leases")

            assert columns(store.engine, "session_leases") == [
                "session_id", "holder", "fence", "expires_at"
            ]  # fmt: skip
        finally:
            store.engine.dispose()

    def test_downgrade_one_drops_exactly_the_message_estimates(self, empty_url: str) -> None:
        store = Store.from_url(empty_url)
        try:
            store.migrate()
            seed(store)
            later = Message(role="user", content="later")
            store.append_message("s1", 2, later, estimate=MessageEstimate("e/1", 7))
            assert store.message_estimates("s1", "e/1") == {4: 7}
            kept = ("sessions", "runs", "history_files", "history_sections")
            before = {name: table_rows(store.engine, name, "1") for name in kept}
            messages_before = [row[:-2] for row in table_rows(store.engine, "messages", "seq")]
            store.engine.dispose()

            run_alembic(empty_url, "downgrade", "0005_session_cache_usage")  # under 0006

            assert current_revision(store.engine) == "0005_session_cache_usage"
            assert "estimated_tokens" not in columns(store.engine, "messages")
            assert table_rows(store.engine, "messages", "seq") == messages_before
            assert {name: table_rows(store.engine, name, "1") for name in kept} == before
            store.engine.dispose()

            run_alembic(empty_url, "upgrade", "head")

            assert columns(store.engine, "messages")[-2:] == ["estimated_tokens", "estimator"]
            assert store.message_estimates("s1", "e/1") == {}  # a cache: gone, not wrong
            assert [m.seq for m in store.messages("s1")] == [1, 2, 3, 4]
        finally:
            store.engine.dispose()

    def test_downgrade_one_drops_exactly_the_session_branches(self, empty_url: str) -> None:
        store = Store.from_url(empty_url)
        try:
            store.migrate()
            seed(store)
            store.ensure_session("s1-b2", "m")
            store.record_branch("s1-b2", "s1", 3)
            store.record_branch("s1-b2", "s1", 9)  # written once: the first record stays
            assert store.branch_of("s1-b2") == ("s1", 3)
            kept = ("sessions", "messages", "runs", "history_files", "history_sections")
            before = {name: table_rows(store.engine, name, "1") for name in kept}
            store.engine.dispose()

            run_alembic(empty_url, "downgrade", "-1")

            assert current_revision(store.engine) == "0006_message_estimates"
            assert "session_branches" not in inspect(store.engine).get_table_names()
            assert {name: table_rows(store.engine, name, "1") for name in kept} == before
            store.engine.dispose()

            run_alembic(empty_url, "upgrade", "head")

            assert store.branch_of("s1-b2") is None  # the record went with its table
        finally:
            store.engine.dispose()

    def test_base_removes_everything_and_head_restores_it(self, empty_url: str) -> None:
        run_alembic(empty_url, "upgrade", "head")
        run_alembic(empty_url, "downgrade", "base")
        engine = engine_from_url(empty_url)
        try:
            assert set(inspect(engine).get_table_names()) == {"alembic_version"}
            engine.dispose()
            run_alembic(empty_url, "upgrade", "head")
            assert set(inspect(engine).get_table_names()) == {*metadata.tables, "alembic_version"}
        finally:
            engine.dispose()


PRICE = Price(base_input=3.0, cache_write_5m=3.75, cache_read=0.3, output=15.0)


def seed(store: Store) -> None:
    """A session with messages, a finished run, counters and a history file."""
    from hango.history.postgres import PostgresHistory

    store.ensure_session("s1", "m")
    for turn, message in tool_batch_conversation()[:3]:
        store.append_message("s1", turn, message)
    run_id = store.start_run("s1", 1, RunState().with_compaction(compaction(1, 2)))
    store.finish_run(run_id, "completed")
    usage = UsageTotals().plus(Usage(input_tokens=3, cache_read_input_tokens=10), PRICE)
    store.write_session_counters("s1", last_input_tokens=5000, compactions=1, usage=usage)
    PostgresHistory(store.engine).append_section("/conversation_history/s1.md", "1", "evicted")


# -- SQLite -----------------------------------------------------------------------------


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'nested' / 'dir' / 'hango.db'}"


@pytest.fixture
def store(sqlite_url: str) -> Iterator[Store]:
    created = Store.from_url(sqlite_url, create_directory=True)
    created.migrate()
    yield created
    created.engine.dispose()


class TestStoreOnSqlite(StoreContract):
    def test_from_url_creates_the_database_directory_only_when_asked(self, sqlite_url: str) -> None:
        database = Path(sqlite_url.removeprefix("sqlite:///"))
        with pytest.raises(ConfigError, match="no directory"):
            Store.from_url(sqlite_url)
        assert not database.parent.exists()
        created = Store.from_url(sqlite_url, create_directory=True)
        try:
            created.migrate()
            assert database.is_file()
        finally:
            created.engine.dispose()

    def test_foreign_keys_stay_enforced_after_migrate(self, store: Store) -> None:
        with store.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1

    def test_migrate_twice_is_harmless(self, store: Store) -> None:
        store.ensure_session("s1", "m")
        store.migrate()
        assert [s.id for s in store.sessions()] == ["s1"]


class TestMigrationsOnSqlite(MigrationsContract):
    @pytest.fixture
    def empty_url(self, sqlite_url: str) -> str:
        Path(sqlite_url.removeprefix("sqlite:///")).parent.mkdir(parents=True)
        return sqlite_url


# -- several processes opening one fresh database (issue 14, defect 16) --------------------

_OPEN_AT_ONCE = """
import sys, time
from pathlib import Path
start = float(sys.argv[2])
while time.time() < start:
    time.sleep(0.001)
from hango.core.settings import load_settings
from hango.wiring.agent import open_store
store = open_store(load_settings(database_url=sys.argv[1]))
print(len(store.sessions()))
"""


def test_four_processes_opening_a_fresh_database_at_once_all_start(tmp_path: Path) -> None:
    repo = Path(__file__).resolve().parents[3]
    for round_number in range(5):
        url = f"sqlite:///{tmp_path / f'fresh-{round_number}.db'}"
        start = time.time() + 2.0  # every process imported and waiting when it strikes
        processes = [
            subprocess.Popen(
                [sys.executable, "-c", _OPEN_AT_ONCE, url, str(start)],
                cwd=repo,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(4)
        ]
        outcomes = [process.communicate(timeout=120) for process in processes]
        failed = [
            err for process, (_, err) in zip(processes, outcomes, strict=True) if process.returncode
        ]
        assert not failed, failed[0][-2000:]
        assert [out.strip() for out, _ in outcomes] == ["0"] * 4


@pytest.mark.parametrize("driver", ["psycopg2", "psycopg", "asyncpg"])
def test_a_rows_json_text_is_cast_to_json_on_postgres_whatever_the_driver(driver: str) -> None:
    # A driver that types its parameters sends text as varchar, which a json column
    # refuses without the cast; SQLite gets none (a type named JSON is NUMERIC there).
    keys = ["session_id", "seq", "turn", "role", "content", "created_at"]
    on_postgres = _INSERT_MESSAGES.compile(
        dialect=getattr(postgresql, driver).dialect(), column_keys=keys
    )
    assert "CAST(" in str(on_postgres).split("VALUES")[1]
    on_sqlite = _INSERT_MESSAGES.compile(dialect=sqlite.dialect(), column_keys=keys)
    assert "CAST(" not in str(on_sqlite)
