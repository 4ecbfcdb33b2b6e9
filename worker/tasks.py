"""The summarize and offload tasks: thin shells over :mod:`hango_worker.execution`.

Arguments are ids and sequence numbers (the worker reloads the evicted range from the
store), results go to the job's own Redis key (``ignore_result``: Celery's result
backend would add a second, overwritable copy and, in Celery 5.7, a stored SUCCESS stops
a killed task from being requeued). Idempotency on ``(session_id, turn)`` lives in the
body, because the duplicates that matter come from the broker (redelivery, a dead
worker's orphaned message), not from the publisher.

Retries: transient provider errors (429, 5xx, timeouts) with exponential backoff and
jitter, the job marked as published for the countdown so a waiting caller does not publish
it again and cut the pause short; a busy lease (another worker is computing the same job)
a second later. Every countdown stays far below the visibility timeout. A job that fails
for good records why, so waiting callers fall back at once instead of at their deadline.
"""

from __future__ import annotations

import math
import os
from functools import lru_cache
from typing import Any

from billiard.einfo import ExceptionInfo
from celery import Task

from hango.core.errors import LeaseBusyError, TransientProviderError
from hango.core.settings import load_settings
from hango.queue.celery_config import (
    OFFLOAD_TASK,
    SUMMARIZE_TASK,
    WORKER_LOST_RETRY_DELAY,
    transient_countdown,
)
from hango.queue.keys import JobKey, JobKind
from hango.queue.queued import job_key
from hango_worker.app import app
from hango_worker.execution import WorkerServices, record_failure, run_offload, run_summary

TRANSIENT_RETRIES = 5
LEASE_BUSY_DELAY = 1.0

_KIND_OF_TASK: dict[str, JobKind] = {SUMMARIZE_TASK: "summary", OFFLOAD_TASK: "offload"}


@lru_cache(maxsize=1)
def _services_for(pid: int) -> WorkerServices:
    del pid  # the cache key: a forked child builds its own engine and connections
    return WorkerServices.from_settings(load_settings())


def services() -> WorkerServices:
    return _services_for(os.getpid())


class JobTask(Task[Any, Any]):
    """Shared behaviour of the two job tasks: lease-busy retry and failure recording."""

    default_retry_delay = WORKER_LOST_RETRY_DELAY

    def retry_when_busy(self, busy: LeaseBusyError) -> Exception:
        settings = services().settings
        # Enough retries to outlast a live holder (hard time limit) plus its lease.
        budget = math.ceil(
            (settings.worker_time_limit + settings.queue_lease_ttl) / LEASE_BUSY_DELAY
        )
        return self.retry(
            exc=busy, countdown=LEASE_BUSY_DELAY, max_retries=TRANSIENT_RETRIES + budget
        )

    def retry_when_transient(self, error: TransientProviderError, key: JobKey) -> Exception:
        """Retry after a back-off that waiting callers respect; ``error`` when out of tries."""
        if self.request.retries >= TRANSIENT_RETRIES:
            return error
        countdown = transient_countdown(self.request.retries)
        current = services()
        current.cache.hold_dispatch(key, countdown + current.settings.queue_enqueue_ttl)
        return self.retry(exc=error, countdown=countdown, max_retries=TRANSIENT_RETRIES)

    def on_failure(
        self,
        exc: Exception,
        task_id: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        einfo: ExceptionInfo,
    ) -> None:
        if isinstance(exc, LeaseBusyError):
            return  # a live holder commits the result; nothing failed
        record_failure(load_settings(), job_key(_KIND_OF_TASK[self.name], kwargs), exc)


@app.task(
    bind=True,
    base=JobTask,
    name=SUMMARIZE_TASK,
    max_retries=TRANSIENT_RETRIES,
    ignore_result=True,
    acks_late=True,
)
def summarize(
    self: JobTask,
    session_id: str,
    turn: int,
    from_seq: int,
    to_seq: int,
    model: str,
    fingerprint: str = "",
    previous_digest: str = "",
    builds_on: dict[str, object] | None = None,
    budget: int | None = None,
) -> None:
    try:
        run_summary(
            services(),
            session_id=session_id,
            turn=turn,
            from_seq=from_seq,
            to_seq=to_seq,
            previous_digest=previous_digest,
            builds_on=builds_on,
            budget=budget,
            model=model,
            fingerprint=fingerprint,
        )
    except LeaseBusyError as busy:
        raise self.retry_when_busy(busy) from None
    except TransientProviderError as error:
        key = JobKey("summary", session_id, turn, (from_seq, to_seq), fingerprint)
        raise self.retry_when_transient(error, key) from None


@app.task(
    bind=True,
    base=JobTask,
    name=OFFLOAD_TASK,
    max_retries=TRANSIENT_RETRIES,
    ignore_result=True,
    acks_late=True,
)
def offload(
    self: JobTask, session_id: str, turn: int, from_seq: int, to_seq: int, fingerprint: str = ""
) -> None:
    try:
        run_offload(
            services(),
            session_id=session_id,
            turn=turn,
            from_seq=from_seq,
            to_seq=to_seq,
            fingerprint=fingerprint,
        )
    except LeaseBusyError as busy:
        raise self.retry_when_busy(busy) from None
