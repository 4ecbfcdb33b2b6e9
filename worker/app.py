"""The Celery app of the worker pools, configured from ``HANGO_*`` settings.

Run a pool per queue (summaries are slow LLM calls, offloads are quick writes)::

    celery -A worker worker -Q summarize -c 4 -n summarize@%h
    celery -A worker worker -Q offload -c 2 -n offload@%h
    celery -A worker flower --basic-auth=admin:secret

Every reliability setting lives in :func:`shared.queue.celery_config.celery_config`, which the
agent's producer shares, so both sides agree on routing, serialization and limits.
"""

from __future__ import annotations

import contextlib

from celery import Celery

from shared.core.settings import Settings, load_settings
from shared.queue.celery_config import celery_config


def create_app(settings: Settings | None = None) -> Celery:
    """The worker app; fails with a ``ConfigError`` naming the variable on bad settings."""
    settings = settings or load_settings()
    app = Celery("hango", include=["worker.tasks"])
    app.conf.update(celery_config(settings))
    return app


app = create_app()
celery = app

# OpenTelemetry for the worker processes (worker_process_init); optional until it lands.
with contextlib.suppress(ImportError):
    import worker.signals  # noqa: F401
