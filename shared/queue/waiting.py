"""The caller's side of single-flight: publish at most once, wait for the one result.

Every caller of ``(kind, session_id, turn)`` runs the same loop on a consistent snapshot
of the job's keys:

1. a committed result → return it (a retried model call or resumed turn pays nothing);
2. an error recorded by the worker → give up now, so the turn falls back at once;
3. no lease held and no recent publish → the one caller that wins ``SET enqueue NX``
   publishes the task. The same rule re-publishes when the worker holding the lease
   died: its lease expires within one TTL, the enqueue mark within its own TTL, and the
   next look sends the job again (the orphaned message later finds the result and stops);
4. otherwise block until the result is committed (``BLPOP`` on the job's ``done`` list,
   pushed in the same atomic step as the result), at most ``recheck`` seconds, and look
   again, until the deadline. The caller wakes within a Redis round trip of the commit;
   the recheck bound is what notices a dead worker's expired lease.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from hango.core.deadline import CallAbandoned, call_within
from hango.core.errors import (
    JobFailedError,
    PublishError,
    QueueDeadlineError,
)
from hango.queue.keys import JobKey
from hango.queue.results import JobState


class JobCache(Protocol):
    """What a caller needs of the job's keys (:class:`~hango.queue.results.ResultCache`)."""

    def state(self, key: JobKey) -> JobState: ...
    def commit(self, key: JobKey, payload: str) -> str: ...
    def claim_dispatch(self, key: JobKey, ttl_seconds: float) -> bool: ...
    def release_dispatch(self, key: JobKey) -> None: ...
    def wait_for_commit(self, key: JobKey, timeout: float) -> bool: ...


@dataclass(frozen=True)
class WaitPolicy:
    deadline: float
    enqueue_ttl: float
    # Longest block between two looks at the job's keys (a dead worker is noticed by then).
    recheck: float = 0.25


T = TypeVar("T")

# Beyond the deadline, how long a wait may go on before it is abandoned (a Redis that hangs
# instead of refusing would otherwise hold the turn for a whole socket timeout per call).
DEADLINE_GRACE = 0.5


class Bounded:
    """Runs a call on a daemon thread and stops waiting for it after ``seconds``.

    A Redis server that hangs rather than refusing (a paused host, a full network buffer)
    blocks a command until the client's socket timeout: the deadline would be overrun by
    that much per call. The abandoned call finishes on its own, at the latest when its
    socket times out; its outcome is dropped.
    """

    def __init__(self, seconds: float, what: str) -> None:
        self.seconds = seconds
        self.what = what

    def __call__(self, call: Callable[[], T]) -> T:
        try:
            return call_within(self.seconds, call, name="hango-queue-call")
        except CallAbandoned:
            raise QueueDeadlineError(
                f"{self.what}: Redis did not answer within {self.seconds:g} s"
            ) from None


Publish = Callable[[float], object]
"""Publishes the task; called with the seconds left before the caller's deadline."""


def await_job(
    cache: JobCache,
    key: JobKey,
    publish: Publish,
    policy: WaitPolicy,
    *,
    clock: Callable[[], float] = time.monotonic,
) -> str:
    """The committed result of ``key``; raises a :class:`QueueUnavailableError` subclass."""
    deadline = clock() + policy.deadline
    while True:
        state = cache.state(key)
        if state.result is not None:
            return state.result
        if state.error is not None:
            raise JobFailedError(f"{key}: the worker failed: {state.error}")
        if not (state.leased or state.dispatched):
            _publish_once(cache, key, publish, policy, deadline - clock())
        remaining = deadline - clock()
        if remaining <= 0:
            raise QueueDeadlineError(f"{key}: no result within {policy.deadline:g} s")
        cache.wait_for_commit(key, min(policy.recheck, remaining))


def _publish_once(
    cache: JobCache, key: JobKey, publish: Publish, policy: WaitPolicy, remaining: float
) -> None:
    if not cache.claim_dispatch(key, policy.enqueue_ttl):
        return
    try:
        publish(remaining)
    except Exception as exc:
        cache.release_dispatch(key)
        raise PublishError(f"{key}: could not publish the task: {exc!r}") from exc
