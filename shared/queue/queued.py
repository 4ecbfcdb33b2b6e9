"""The queued ports: the agent side of the summarize and offload tasks.

``QueuedSummarizer`` and ``QueuedOffloader`` implement the ``Summarizer`` and
``HistoryOffloader`` ports by publishing a task keyed by ``(session_id, turn)`` and
waiting for its committed result in Redis (:mod:`hango.queue.waiting`). They send ids
and sequence numbers only; the worker reloads the evicted range from the store.

When the queue cannot deliver — Redis or the broker unreachable, no result before the
deadline, the worker gave up — the turn still completes (invariant 5): the in-process
port runs instead and the summary carries ``fallback_reason``. The fallback result is
then committed like a worker's (first writer wins), so every caller of that turn, and
any retry of it, sees one summary (invariant 4).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import redis
from pydantic import ValidationError

from hango.compaction.jobs import (
    HistoryOffloader,
    OffloadJob,
    Summarizer,
    SummaryJob,
    SummaryResult,
    summary_digest,
)
from hango.core.errors import (
    JobFailedError,
    PublishError,
    QueueDeadlineError,
    QueueUnavailableError,
)
from hango.history.base import HistoryBackend
from hango.queue.celery_config import OFFLOAD_TASK, SUMMARIZE_TASK
from hango.queue.dispatch import Dispatcher
from hango.queue.keys import JobKey, JobKind, range_fingerprint
from hango.queue.waiting import DEADLINE_GRACE, Bounded, JobCache, WaitPolicy, await_job

log = logging.getLogger(__name__)

# What the queue could not do, as recorded in ``SummaryResult.fallback_reason``.
REASON_DEADLINE = "queue_deadline"
REASON_WORKER_FAILED = "worker_failed"
REASON_BROKER_DOWN = "broker_unavailable"
REASON_REDIS_DOWN = "redis_unavailable"
REASON_BAD_RESULT = "bad_queue_result"


def fallback_reason(exc: Exception) -> str:
    """A short, greppable reason: a code, then the detail."""
    if isinstance(exc, QueueDeadlineError):
        code = REASON_DEADLINE
    elif isinstance(exc, JobFailedError):
        code = REASON_WORKER_FAILED
    elif isinstance(exc, PublishError):
        code = REASON_BROKER_DOWN
    elif isinstance(exc, redis.RedisError):
        code = REASON_REDIS_DOWN
    else:
        code = REASON_BAD_RESULT
    return f"{code}: {exc}"


# How long the commit of a fallback result may take before the turn goes on without it.
FALLBACK_COMMIT_BOUND = 2.0


def wait_bounded(
    cache: JobCache, key: JobKey, publish: Callable[[float], object], policy: WaitPolicy
) -> str:
    """:func:`await_job`, abandoned shortly after the deadline even if Redis hangs."""
    bound = Bounded(policy.deadline + DEADLINE_GRACE, str(key))
    return bound(lambda: await_job(cache, key, publish, policy))


# Everything after which the turn falls back instead of failing.
_QUEUE_FAILURES = (QueueUnavailableError, redis.RedisError, ValidationError, ValueError)


def summarize_kwargs(job: SummaryJob) -> dict[str, Any]:
    return {
        "session_id": job.session_id,
        "turn": job.turn,
        "from_seq": job.from_seq,
        "to_seq": job.to_seq,
        # Never the text itself: the worker reads it from the store and checks this.
        "previous_digest": summary_digest(job.previous_summary),
        "model": job.model,
        "fingerprint": range_fingerprint(job.evicted),
        # An extension's base is a pre-summary's result: named by its job, never its text.
        **({"builds_on": job.builds_on.model_dump()} if job.builds_on else {}),
        **({"budget": job.budget} if job.budget else {}),
    }


def offload_kwargs(job: OffloadJob) -> dict[str, Any]:
    return {
        "session_id": job.session_id,
        "turn": job.turn,
        "from_seq": job.from_seq,
        "to_seq": job.to_seq,
        "fingerprint": range_fingerprint(job.evicted),
    }


def job_key(kind: JobKind, kwargs: dict[str, Any]) -> JobKey:
    """The key of a job from its task arguments (the same on both sides of the queue)."""
    return JobKey(
        kind,
        kwargs["session_id"],
        kwargs["turn"],
        (kwargs["from_seq"], kwargs["to_seq"]),
        kwargs.get("fingerprint", ""),
    )


@runtime_checkable
class SummarizesBy(Protocol):
    """A summarizer that can be given the deadline left (``LLMSummarizer``)."""

    def summarize_by(self, job: SummaryJob, until: float | None) -> SummaryResult: ...


class QueuedSummarizer:
    """A :class:`Summarizer` whose work runs on the ``summarize`` queue.

    ``timeout`` (``HANGO_SUMMARIZER_TIMEOUT``) is the one deadline of a summary: the wait
    for the worker ends by then at the latest (before the queue deadline when that is
    longer), and the in-process fallback gets only what is left of it.
    """

    def __init__(
        self,
        *,
        cache: JobCache,
        dispatcher: Dispatcher,
        policy: WaitPolicy,
        fallback: Summarizer,
        timeout: float | None = None,
    ) -> None:
        self.cache = cache
        self.dispatcher = dispatcher
        self.policy = policy
        self.fallback = fallback
        self.timeout = timeout

    def summarize(self, job: SummaryJob) -> SummaryResult:
        until = None if self.timeout is None else time.monotonic() + self.timeout
        if job.max_tokens is not None:
            # A shorter summary of a job already answered: its key would return the same
            # result, so it is asked in-process.
            return self._inline(job, until)
        kwargs = summarize_kwargs(job)
        key = job_key("summary", kwargs)
        policy = self.policy
        if self.timeout is not None and self.timeout < policy.deadline:
            policy = dataclasses.replace(policy, deadline=self.timeout)
        try:
            payload = wait_bounded(
                self.cache,
                key,
                lambda remaining: self.dispatcher.dispatch(
                    SUMMARIZE_TASK, kwargs, expires=remaining
                ),
                policy,
            )
            return SummaryResult.model_validate_json(payload)
        except _QUEUE_FAILURES as exc:
            return self._fall_back(job, key, fallback_reason(exc), until)

    def _inline(self, job: SummaryJob, until: float | None) -> SummaryResult:
        if until is not None and isinstance(self.fallback, SummarizesBy):
            return self.fallback.summarize_by(job, until)
        return self.fallback.summarize(job)

    def _fall_back(
        self, job: SummaryJob, key: JobKey, reason: str, until: float | None = None
    ) -> SummaryResult:
        log.warning("%s: summarizing in-process instead of on the queue (%s)", key, reason)
        result = self._inline(job, until)
        reasons = "; ".join(r for r in (reason, result.fallback_reason) if r)
        result = result.model_copy(update={"fallback_reason": reasons})
        commit = Bounded(FALLBACK_COMMIT_BOUND, f"{key}: commit")
        try:
            winner = commit(lambda: self.cache.commit(key, result.model_dump_json()))
        except (redis.RedisError, QueueDeadlineError):
            return result  # nothing shared to agree with: Redis is down or hangs
        return SummaryResult.model_validate_json(winner)


class QueuedOffloader:
    """A :class:`HistoryOffloader` whose work runs on the ``offload`` queue.

    The path the worker reports is checked in this process's history backend before it is
    trusted: a worker writing to a directory the agent cannot read would otherwise evict
    messages that were offloaded nowhere the agent can find (invariant 3).
    """

    def __init__(
        self,
        *,
        cache: JobCache,
        dispatcher: Dispatcher,
        policy: WaitPolicy,
        fallback: HistoryOffloader,
        history: HistoryBackend,
    ) -> None:
        self.cache = cache
        self.dispatcher = dispatcher
        self.policy = policy
        self.fallback = fallback
        self.history = history

    def offload(self, job: OffloadJob) -> str:
        kwargs = offload_kwargs(job)
        key = job_key("offload", kwargs)
        try:
            payload = wait_bounded(
                self.cache,
                key,
                lambda remaining: self.dispatcher.dispatch(OFFLOAD_TASK, kwargs, expires=remaining),
                self.policy,
            )
            return self._visible_path(payload)
        except _QUEUE_FAILURES as exc:
            reason = fallback_reason(exc)
        log.warning("%s: offloading in-process instead of on the queue (%s)", key, reason)
        path = self.fallback.offload(job)
        # The file is written; the cache only saves a retry of this turn the round trip.
        commit = Bounded(FALLBACK_COMMIT_BOUND, f"{key}: commit")
        with contextlib.suppress(redis.RedisError, QueueDeadlineError):
            commit(lambda: self.cache.commit(key, offload_payload(path)))
        return path

    def _visible_path(self, payload: str) -> str:
        path = path_of(payload)
        if not self.history.exists(path):
            raise ValueError(f"the worker offloaded to {path!r}, which this host cannot read")
        return path


def offload_payload(path: str) -> str:
    return json.dumps({"path": path})


def path_of(payload: str) -> str:
    value = json.loads(payload)
    path = value.get("path") if isinstance(value, dict) else None
    if not isinstance(path, str):
        raise ValueError(f"an offload result without a path: {payload[:200]!r}")
    return path
