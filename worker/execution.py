"""The bodies of the summarize and offload tasks (``worker/tasks.py`` only wraps them).

Each body is idempotent on ``(session_id, turn)``:

1. a committed result → return it without touching the provider (a redelivered message,
   a duplicate publish, the orphan of a dead worker);
2. take the job's lease (in the same round trip as 1), or raise
   :class:`~hango.queue.lease.LeaseBusyError` so the task retries shortly (another
   worker is computing it right now);
3. under the heartbeated lease: reload the evicted range from the store by sequence
   number, compute, commit with "first writer wins" and release the lease.

A worker killed mid-call costs one repeated provider call (its lease expires, the job
runs again); never a second committed result.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis

from hango.compaction.jobs import (
    JobRef,
    OffloadJob,
    Summarizer,
    SummaryJob,
    SummaryResult,
    summary_digest,
)
from hango.core.errors import MissingRangeError
from hango.core.messages import StoredMessage
from hango.core.settings import Settings
from hango.history.base import HistoryBackend
from hango.queue.keys import JobKey, range_fingerprint
from hango.queue.lease import Lease, heartbeat
from hango.queue.queued import offload_payload
from hango.queue.results import ResultCache
from hango.store import Store
from hango.summarizers.offload import InlineOffloader
from hango.wiring.history import history_from_settings
from hango.wiring.queue import result_cache
from hango_worker.summarizer import worker_summarizer

log = logging.getLogger(__name__)

# Pauses between tries of a commit that found Redis down (doubling up to the maximum).
COMMIT_RETRY_FIRST = 0.25
COMMIT_RETRY_MAX = 4.0

# Marks results computed on a worker (``CompactionRecord.summarizer``, e.g. "worker:llm").
WORKER_PREFIX = "worker:"


@dataclass(frozen=True)
class WorkerServices:
    """What a worker process needs; built once per process, after the fork."""

    settings: Settings
    store: Store
    history: HistoryBackend
    summarizer: Summarizer
    cache: ResultCache

    @classmethod
    def from_settings(cls, settings: Settings) -> WorkerServices:
        store = Store.from_url(settings.database_url)
        return cls(
            settings=settings,
            store=store,
            history=history_from_settings(settings, engine=store.engine),
            summarizer=worker_summarizer(settings),
            cache=result_cache(settings),
        )


def run_once(
    cache: ResultCache,
    key: JobKey,
    lease_ttl: float,
    compute: Callable[[], str],
    commit_budget: float = 0.0,
) -> str:
    """The committed result of ``key``, computing it under the job's lease if needed.

    Two Redis round trips around the computation: "result, else lease" at the start and
    "commit, release" at the end; the heartbeat keeps the lease alive in between. A
    finished result is not thrown away because Redis is down at the end: the commit is
    tried again for up to ``commit_budget`` seconds (what the task's time limit leaves).
    """
    lease = Lease(cache.client, key.lease, lease_ttl)
    committed = cache.result_or_lease(key, lease)  # LeaseBusyError: someone computes it now
    if committed is not None:
        return committed
    try:
        with heartbeat(lease):
            payload = compute()
    except BaseException:
        lease.release_quietly()
        raise
    return _commit_retrying(cache, key, payload, lease, commit_budget)


def _commit_retrying(
    cache: ResultCache, key: JobKey, payload: str, lease: Lease, budget: float
) -> str:
    deadline = time.monotonic() + budget
    pause = COMMIT_RETRY_FIRST
    while True:
        try:
            return cache.commit_and_release(key, payload, lease)
        except redis.RedisError as error:
            if time.monotonic() + pause > deadline:
                raise
            log.warning("%s: could not commit the finished result (%s); retrying", key, error)
            time.sleep(pause)
            pause = min(pause * 2, COMMIT_RETRY_MAX)


def commit_budget(settings: Settings) -> float:
    """How long a finished result's commit may be retried: what the soft time limit
    leaves after the longest summary call (an offload is quicker still)."""
    return max(0.0, settings.worker_soft_time_limit - settings.summarizer_timeout - 1.0)


def load_range(
    store: Store, session_id: str, from_seq: int, to_seq: int
) -> tuple[StoredMessage, ...]:
    """Messages ``from_seq..to_seq`` (inclusive), all of them or :class:`MissingRangeError`.

    The bounds are checked against the store before anything is read or built: a task
    published by anyone who can reach the broker must not make a worker allocate by its
    word (``to_seq=10**9`` once cost 6 GB).
    """
    _check_bounds(store, session_id, from_seq, to_seq)
    found = tuple(store.messages(session_id, from_seq, to_seq))
    whole = len(found) == to_seq - from_seq + 1
    if not whole or any(m.seq != from_seq + i for i, m in enumerate(found)):
        raise MissingRangeError(
            f"session {session_id!r}: the store holds {len(found)} of messages {from_seq}..{to_seq}"
        )
    return found


def _check_bounds(store: Store, session_id: str, from_seq: int, to_seq: int) -> None:
    for name, value in (("from_seq", from_seq), ("to_seq", to_seq)):
        if type(value) is not int or value < 1:
            raise MissingRangeError(f"{name} must be a positive integer, not {value!r}")
    if to_seq < from_seq:
        raise MissingRangeError(f"to_seq ({to_seq}) is before from_seq ({from_seq})")
    last = store.last_seq(session_id)
    if last == 0:
        raise MissingRangeError(
            f"session {session_id!r}: the store holds 0 of messages {from_seq}..{to_seq}"
        )
    if to_seq > last:
        raise MissingRangeError(
            f"session {session_id!r}: messages {from_seq}..{to_seq} asked, the store holds "
            f"messages up to {last}"
        )


def load_checked_range(
    store: Store, session_id: str, from_seq: int, to_seq: int, fingerprint: str
) -> tuple[StoredMessage, ...]:
    """The range, refused unless it is the very range the caller evicted."""
    found = tuple(load_range(store, session_id, from_seq, to_seq))
    if fingerprint and range_fingerprint(found) != fingerprint:
        raise MissingRangeError(
            f"session {session_id!r}: messages {from_seq}..{to_seq} in this worker's store "
            "differ from the ones the agent evicted (another database, or a reused session id)"
        )
    return found


# How many turns back the record a summary builds on is looked for (it is normally in the
# job's own run: each run carries the latest record forward).
PREVIOUS_LOOKBACK = 8


def stored_previous_summary(
    store: Store,
    session_id: str,
    turn: int,
    from_seq: int,
    digest: str,
    committed: Callable[[], str | None] = lambda: None,
) -> str | None:
    """The summary the evicted range follows, read from the compaction record it builds on.

    The range of a summary starts where the previous record kept from, so that record is
    the one whose ``kept_from_seq`` is ``from_seq`` (none for the first compaction). An
    extension of a pre-summary builds on a text no record holds yet: ``committed`` reads
    it from the result cache, where the pre-summary's own job put it. The text must match
    the digest the agent sent, or the job is refused: a summary built on another history
    would be installed as this one's.
    """
    found = _record_summary(store, session_id, turn, from_seq)
    if summary_digest(found) != digest:
        found = committed()
    if summary_digest(found) != digest:
        raise MissingRangeError(
            f"session {session_id!r} turn {turn}: the summary that messages from {from_seq} "
            "follow is not in this worker's store as the agent saw it (state not saved yet, "
            "another database, or a reused session id)"
        )
    return found


def _record_summary(store: Store, session_id: str, turn: int, from_seq: int) -> str | None:
    for earlier in range(turn, max(0, turn - PREVIOUS_LOOKBACK), -1):
        run = store.run(session_id, earlier)
        if run is None:
            continue
        for record in (*reversed(run.state.compactions), run.state.latest):
            if record is not None and record.kept_from_seq == from_seq:
                return record.summary
    return None


def committed_summary(cache: ResultCache, session_id: str, ref: JobRef) -> str | None:
    """The text a summary job committed to the result cache (signature checked), if any."""
    span = (ref.from_seq, ref.to_seq)
    payload = cache.get(JobKey("summary", session_id, ref.turn, span, ref.fingerprint))
    return None if payload is None else SummaryResult.model_validate_json(payload).text


def run_summary(
    services: WorkerServices,
    *,
    session_id: str,
    turn: int,
    from_seq: int,
    to_seq: int,
    model: str,
    fingerprint: str = "",
    previous_digest: str = "",
    builds_on: dict[str, object] | None = None,
    budget: int | None = None,
) -> str:
    """The summary of the range as committed JSON (``SummaryResult``)."""
    base = None if builds_on is None else JobRef.model_validate(builds_on)

    def compute() -> str:
        previous = stored_previous_summary(
            services.store,
            session_id,
            turn,
            from_seq,
            previous_digest,
            lambda: None if base is None else committed_summary(services.cache, session_id, base),
        )
        job = SummaryJob(
            session_id=session_id,
            turn=turn,
            from_seq=from_seq,
            to_seq=to_seq,
            previous_summary=previous,
            evicted=load_checked_range(services.store, session_id, from_seq, to_seq, fingerprint),
            model=model,
            budget=budget,
        )
        result = services.summarizer.summarize(job)
        tagged = result.model_copy(update={"summarizer": WORKER_PREFIX + result.summarizer})
        return tagged.model_dump_json()

    key = JobKey("summary", session_id, turn, (from_seq, to_seq), fingerprint)
    settings = services.settings
    return run_once(services.cache, key, settings.queue_lease_ttl, compute, commit_budget(settings))


def run_offload(
    services: WorkerServices,
    *,
    session_id: str,
    turn: int,
    from_seq: int,
    to_seq: int,
    fingerprint: str = "",
) -> str:
    """Append the range to the session's history file once; the committed ``{"path": ...}``."""

    def compute() -> str:
        job = OffloadJob(
            session_id=session_id,
            turn=turn,
            from_seq=from_seq,
            to_seq=to_seq,
            evicted=load_checked_range(services.store, session_id, from_seq, to_seq, fingerprint),
        )
        # The section key names the turn and range: a repeat appends nothing.
        return offload_payload(InlineOffloader(services.history).offload(job))

    key = JobKey("offload", session_id, turn, (from_seq, to_seq), fingerprint)
    settings = services.settings
    return run_once(services.cache, key, settings.queue_lease_ttl, compute, commit_budget(settings))


def record_failure(settings: Settings, key: JobKey, error: BaseException) -> None:
    """Tell waiting callers the job failed for good, so they fall back now.

    It needs only the settings and Redis, not the worker's services: the failure being
    recorded may be that the services could not be built (a bad summarizer setting, the
    database down).
    """
    reason = f"{type(error).__name__}: {error}"
    try:
        result_cache(settings).record_error(key, reason, settings.queue_enqueue_ttl)
    except Exception:  # the callers still fall back at their deadline
        log.exception("%s: could not record the failure %s", key, reason)
