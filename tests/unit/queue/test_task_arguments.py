"""Task arguments carry no conversation content (issue 21, item 5).

The summarize task used to carry the previous summary in its kwargs (visible in Flower,
stored in broker messages). Now it carries a digest, and the worker reads the text from
the compaction record in the store.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from celery import Celery

from hango.compaction.jobs import SummaryJob, summary_digest
from hango.compaction.record import CompactionRecord, RunState
from hango.core.errors import MissingRangeError
from hango.core.messages import Message, StoredMessage
from hango.queue.celery_config import SUMMARIZE_QUEUE, SUMMARIZE_TASK, task_queues
from hango.queue.dispatch import CeleryDispatcher
from hango.queue.queued import summarize_kwargs
from hango.store import Store
from hango_worker.execution import load_range, stored_previous_summary

PREVIOUS = "## Goal\nShip the zebra-quartz migration for tenant 4411."
SECRET_LINE = "the user's confidential remark: cobalt-heron-17"


def _job(previous: str | None) -> SummaryJob:
    evicted = tuple(
        StoredMessage(seq=5 + i, turn=2, message=Message(role=role, content=SECRET_LINE))
        for i, role in enumerate(("assistant", "user"))
    )
    return SummaryJob(
        session_id="s1",
        turn=3,
        from_seq=5,
        to_seq=6,
        previous_summary=previous,
        evicted=evicted,
        model="m",
    )


def _published(kwargs: dict[str, object]) -> bytes:
    """The raw broker message the agent's dispatcher publishes (body and headers)."""
    app = Celery("test-producer", set_as_current=False)
    app.conf.update(
        broker_url="memory://",
        task_queues=task_queues(),
        task_routes={SUMMARIZE_TASK: {"queue": SUMMARIZE_QUEUE}},
        task_serializer="json",
    )
    CeleryDispatcher(app).dispatch(SUMMARIZE_TASK, kwargs, expires=30)
    with app.connection_for_write() as connection:
        queue = connection.SimpleQueue(SUMMARIZE_QUEUE)
        message = queue.get(timeout=2)
        queue.close()
    return message.body + repr(message.headers).encode()


def test_the_published_summarize_message_holds_no_conversation_text() -> None:
    raw = _published(summarize_kwargs(_job(PREVIOUS)))
    assert b"zebra-quartz" not in raw and b"cobalt-heron" not in raw
    assert summary_digest(PREVIOUS).encode() in raw  # what the worker checks against


def _store_with_record(tmp_path: Path, kept_from_seq: int, summary: str | None) -> Store:
    store = Store.from_url(f"sqlite:///{tmp_path / 'h.db'}")
    store.migrate()
    store.ensure_session("s1", "m")
    record = CompactionRecord(
        at_turn=2,
        reason="threshold",
        kept_from_seq=kept_from_seq,
        summary=summary,
        offload_path=None,
        tokens_before=10,
        tokens_after=5,
        evicted_messages=4,
    )
    store.start_run("s1", 2, RunState().with_compaction(record))
    store.start_run("s1", 3, RunState(latest=record, compaction_count=1))
    return store


def test_the_worker_reads_the_previous_summary_from_the_record(tmp_path: Path) -> None:
    store = _store_with_record(tmp_path, kept_from_seq=5, summary=PREVIOUS)
    digest = summary_digest(PREVIOUS)
    assert stored_previous_summary(store, "s1", 3, 5, digest) == PREVIOUS


def test_the_first_summary_of_a_session_builds_on_nothing(tmp_path: Path) -> None:
    store = _store_with_record(tmp_path, kept_from_seq=5, summary=PREVIOUS)
    assert stored_previous_summary(store, "s1", 3, 1, summary_digest(None)) is None


def test_a_previous_summary_that_differs_from_the_agents_is_refused(tmp_path: Path) -> None:
    store = _store_with_record(tmp_path, kept_from_seq=5, summary="another history's summary")
    with pytest.raises(MissingRangeError, match="not in this worker's store"):
        stored_previous_summary(store, "s1", 3, 5, summary_digest(PREVIOUS))


def test_an_extension_names_the_job_it_builds_on_never_its_text() -> None:
    base = _job(None)
    extension = _job(PREVIOUS).model_copy(update={"builds_on": base.ref()})
    raw = _published(summarize_kwargs(extension))
    assert b"zebra-quartz" not in raw and b"cobalt-heron" not in raw
    assert base.ref().fingerprint.encode() in raw


def test_an_extension_builds_on_the_text_its_base_job_committed(tmp_path: Path) -> None:
    """No record holds a pre-summary that is being extended: its committed result does."""
    store = _store_with_record(tmp_path, kept_from_seq=5, summary=None)
    digest = summary_digest(PREVIOUS)
    with pytest.raises(MissingRangeError):
        stored_previous_summary(store, "s1", 3, 7, digest)
    assert stored_previous_summary(store, "s1", 3, 7, digest, lambda: PREVIOUS) == PREVIOUS
    with pytest.raises(MissingRangeError, match="not in this worker's store"):
        stored_previous_summary(store, "s1", 3, 7, digest, lambda: "another base")


# -- task arguments are checked against the store before anything is built -------------


def _store_with_messages(tmp_path: Path, count: int) -> Store:
    store = Store.from_url(f"sqlite:///{tmp_path / 'm.db'}")
    store.migrate()
    store.ensure_session("s1", "m")
    for i in range(count):
        role = "user" if i % 2 == 0 else "assistant"
        store.append_message("s1", 1, Message(role=role, content=f"message {i}"))
    return store


@pytest.mark.parametrize(
    ("from_seq", "to_seq", "says"),
    [
        (1, 10**9, "holds messages up to 4"),
        (1, 10**18, "holds messages up to 4"),
        (0, 2, "from_seq"),
        (-5, 2, "from_seq"),
        (3, 2, "to_seq"),
        (True, 2, "from_seq"),
    ],
)
def test_an_absurd_range_is_refused_before_anything_is_built(
    tmp_path: Path, from_seq: int, to_seq: int, says: str
) -> None:
    import tracemalloc

    store = _store_with_messages(tmp_path, 4)
    tracemalloc.start()
    try:
        with pytest.raises(MissingRangeError, match=says):
            load_range(store, "s1", from_seq, to_seq)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 5_000_000  # a normal range of 4 messages costs far less than this


def test_a_range_with_a_gap_is_refused_and_a_whole_one_is_loaded(tmp_path: Path) -> None:
    store = _store_with_messages(tmp_path, 4)
    assert [m.seq for m in load_range(store, "s1", 2, 4)] == [2, 3, 4]
    with pytest.raises(MissingRangeError, match="holds 0 of messages"):
        load_range(store, "other-session", 1, 1)
