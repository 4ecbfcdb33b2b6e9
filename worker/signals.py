"""Worker process signals: OpenTelemetry after the fork, flushed before the process exits.

The batch span processor and the periodic metric reader run threads, and threads do not
survive a fork, so each pool process sets telemetry up in ``worker_process_init`` (sent
by prefork children and by the solo pool) and flushes it in ``worker_process_shutdown``
(or ``worker_shutdown`` for the solo pool). Celery is instrumented there too, so a task's
``run/<task>`` span continues the trace its publisher started.

Around each task, ``task_prerun`` opens the conversation scope from the task's
``session_id``/``turn`` keyword arguments, so the summarizer's chat span on the worker
carries ``gen_ai.conversation.id`` like the agent's own calls, and records how long the
task waited in the queue (from the publish-time header the agent side stamps).

Import this module from the worker app so the handlers are connected.
"""

from __future__ import annotations

import contextvars
import logging
import time
from typing import Any

from celery import signals

from hango.telemetry import names as t
from hango.telemetry.setup import TelemetryHandle, setup_telemetry

logger = logging.getLogger(__name__)

WORKER_SERVICE_NAME = "hango-worker"

_handle: TelemetryHandle | None = None
_scopes: dict[str, contextvars.Token[t.ConversationScope | None]] = {}


@signals.worker_process_init.connect(weak=False)
def start_telemetry(**_: Any) -> None:
    global _handle
    if _handle is not None:
        return
    try:
        _handle = setup_telemetry(WORKER_SERVICE_NAME, celery_role="worker")
    except Exception:
        # Observability must never keep a worker from serving tasks.
        logger.exception("telemetry setup failed; this worker process exports nothing")


@signals.worker_process_shutdown.connect(weak=False)
def flush_telemetry(**_: Any) -> None:
    global _handle
    handle, _handle = _handle, None
    if handle is not None:
        handle.shutdown()


# The solo pool sends worker_process_init but never worker_process_shutdown.
signals.worker_shutdown.connect(flush_telemetry, weak=False)


@signals.task_prerun.connect(weak=False)
def open_task_scope(
    task_id: str | None = None,
    task: Any = None,
    kwargs: dict[str, Any] | None = None,
    **_: Any,
) -> None:
    scope = task_conversation(kwargs or {})
    if scope is not None and task_id is not None:
        _scopes[task_id] = t.enter_conversation(scope)
    if _handle is not None and task is not None:
        record_queue_wait(_handle.telemetry, task)


@signals.task_postrun.connect(weak=False)
def close_task_scope(task_id: str | None = None, **_: Any) -> None:
    token = _scopes.pop(task_id, None) if task_id is not None else None
    if token is None:
        return
    try:
        t.exit_conversation(token)
    except ValueError:
        # Reset from another context (a pool that moved the task): the scope is dropped
        # with that context anyway.
        logger.debug("conversation scope of task %s closed in another context", task_id)


def task_conversation(kwargs: dict[str, Any]) -> t.ConversationScope | None:
    """The scope of a task keyed by ``(session_id, turn)``; None for any other task."""
    session_id = kwargs.get("session_id")
    if not isinstance(session_id, str):
        return None
    turn = kwargs.get("turn")
    return t.ConversationScope(session_id, turn if isinstance(turn, int) else None)


def record_queue_wait(telemetry: t.Telemetry, task: Any) -> None:
    """Publish-to-start time; the header is absent when the publisher was not instrumented."""
    enqueued_at = getattr(task.request, t.ENQUEUED_AT_HEADER, None)
    if not isinstance(enqueued_at, int | float):
        return
    waited = max(0.0, time.time() - float(enqueued_at))
    telemetry.record(t.QUEUE_WAIT_DURATION, waited, {t.HANGO_TASK_NAME: str(task.name)})
