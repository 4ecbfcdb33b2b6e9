"""Publishing the summarize and offload tasks from the agent side.

The agent does not import the worker package: it publishes by task name through a small
producer app built from the same configuration (:func:`hango.queue.celery_config.celery_config`),
so an agent host needs Redis and nothing of the worker's runtime. A publish that cannot
reach the broker fails fast (bounded retry policy) instead of stalling the turn.
"""

from __future__ import annotations

import uuid
from typing import Any, Protocol

from celery import Celery
from celery.utils.dispatch import Signal

from hango.core.settings import Settings
from hango.queue.celery_config import celery_config

# kombu's default retries a failed publish for a few seconds; a turn falls back instead.
PUBLISH_RETRY_POLICY = {
    "max_retries": 2,
    "interval_start": 0.0,
    "interval_step": 0.2,
    "interval_max": 0.5,
}


publish_failed = Signal(name="hango_publish_failed")
"""Sent when a publish raised: Celery's ``after_task_publish`` never comes for it, so a
tracer that opened a span in ``before_task_publish`` learns here that it can close it."""


class Dispatcher(Protocol):
    def dispatch(self, task: str, kwargs: dict[str, Any], *, expires: float) -> str:
        """Publish one task; return its id. ``expires`` is seconds from now."""
        ...


def producer_app(settings: Settings) -> Celery:
    """A Celery app that only publishes (no tasks registered, not the current app)."""
    app = Celery("hango-producer", set_as_current=False)
    app.conf.update(celery_config(settings))
    return app


class CeleryDispatcher:
    """Publishes by task name; routing to the summarize/offload queue comes from the config."""

    def __init__(self, app: Celery) -> None:
        self.app = app

    def dispatch(self, task: str, kwargs: dict[str, Any], *, expires: float) -> str:
        # A fresh id per publish: a re-dispatch after a dead worker must not share an id
        # with the lost message (Celery does not dedupe ids, and it confuses Flower).
        task_id = str(uuid.uuid4())
        try:
            self.app.send_task(
                task,
                kwargs=kwargs,
                task_id=task_id,
                expires=max(1.0, expires),
                retry=True,
                retry_policy=PUBLISH_RETRY_POLICY,
                # Results travel through the job's own key, never Celery's backend: without
                # this every publish subscribed to a result channel, and with Redis down
                # that subscription retried for about 20 s before the publish failed.
                ignore_result=True,
            )
        except Exception as exc:
            publish_failed.send(sender=task, task_id=task_id, exception=exc)
            raise
        return task_id
