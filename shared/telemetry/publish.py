"""Tracing the agent's task publishing, so a worker's run continues the agent's trace.

The agent publishes by task *name* (``send_task``) and never imports the worker's tasks.
The contrib Celery instrumentation starts a publish span in ``before_task_publish`` but
only ends it in ``after_task_publish`` when the task is registered in the current app;
for a name-only publish the span is left open *and current*, so every later span of the
turn would hang under a span that is never exported. So the publishing side is traced
here instead, and the contrib instrumentation is used on workers only, where every task
is registered.

Each publish becomes a PRODUCER span ``apply_async/{task}`` (the contrib naming), child
of the current span (the turn), whose context is injected into the message headers; the
worker's ``run/{task}`` span extracts it. The headers also get the publish time, from
which the worker measures queue latency.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Any

from celery import signals
from opentelemetry import trace
from opentelemetry.propagate import inject
from opentelemetry.trace import SpanKind, StatusCode

from hango.queue.dispatch import publish_failed
from hango.telemetry import names as t

# A refused publish is closed by ``publish_failed``; publishes that got neither signal are
# closed as failures once this many are pending, so the table cannot grow without bound.
MAX_PENDING_PUBLISHES = 256


class CeleryPublishTracer:
    """Connects to Celery's publish signals; ``disconnect()`` undoes it."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self._tracer = tracer
        self._lock = threading.Lock()
        self._pending: OrderedDict[str, trace.Span] = OrderedDict()

    def connect(self) -> CeleryPublishTracer:
        signals.before_task_publish.connect(self.before_publish, weak=False)
        signals.after_task_publish.connect(self.after_publish, weak=False)
        publish_failed.connect(self.publish_failed, weak=False)
        return self

    def disconnect(self) -> None:
        signals.before_task_publish.disconnect(self.before_publish)
        signals.after_task_publish.disconnect(self.after_publish)
        publish_failed.disconnect(self.publish_failed)

    def before_publish(
        self, sender: str | None = None, headers: dict[str, Any] | None = None, **_: Any
    ) -> None:
        if headers is None:
            return
        stamp_enqueued_at(headers)
        task_id = headers.get("id")
        if not isinstance(task_id, str):
            return
        task = str(sender or headers.get("task") or "unknown")
        span = self._tracer.start_span(
            f"{t.CELERY_APPLY_ASYNC}/{task}",
            kind=SpanKind.PRODUCER,
            attributes={
                t.CELERY_ACTION: t.CELERY_APPLY_ASYNC,
                t.CELERY_TASK_NAME: task,
                t.MESSAGING_MESSAGE_ID: task_id,
            },
        )
        inject(headers, context=trace.set_span_in_context(span))
        self._remember(task_id, span)

    def after_publish(self, headers: dict[str, Any] | None = None, **_: Any) -> None:
        task_id = (headers or {}).get("id")
        with self._lock:
            span = self._pending.pop(task_id, None) if isinstance(task_id, str) else None
        if span is not None:
            span.end()

    def publish_failed(
        self, task_id: str | None = None, exception: BaseException | None = None, **_: Any
    ) -> None:
        """The broker refused the publish: end its span now, as an error."""
        with self._lock:
            span = self._pending.pop(task_id, None) if isinstance(task_id, str) else None
        if span is None:
            return
        if exception is not None:
            span.record_exception(exception)
        span.set_status(StatusCode.ERROR, f"publish failed: {type(exception).__name__}")
        span.end()

    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    def _remember(self, task_id: str, span: trace.Span) -> None:
        with self._lock:
            self._pending[task_id] = span
            overflow = [
                self._pending.popitem(last=False)[1]
                for _ in range(len(self._pending) - MAX_PENDING_PUBLISHES)
            ]
        for lost in overflow:
            lost.set_status(StatusCode.ERROR, "publish not confirmed")
            lost.end()


def stamp_enqueued_at(headers: dict[str, Any]) -> None:
    """Record when the task left, for the worker's queue-latency histogram."""
    headers.setdefault(t.ENQUEUED_AT_HEADER, time.time())
