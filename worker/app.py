"""The Celery app of the worker pools, configured from ``HANGO_*`` settings.

Run a pool per queue (summaries are slow LLM calls, offloads are quick writes)::

    celery -A hango_worker worker -Q summarize -c 4 -n summarize@%h
    celery -A hango_worker worker -Q offload -c 2 -n offload@%h
    celery -A hango_worker flower --basic-auth=admin:secret

Every reliability setting lives in :func:`hango.queue.celery_config.celery_config`, which the
agent's producer shares, so both sides agree on routing, serialization and limits.
"""

from __future__ import annotations

import sys
from typing import Any, NoReturn

from celery import Celery, signals

from hango.core.errors import EXIT_WORKER_CONFIG, ConfigError
from hango.core.settings import Settings, load_settings
from hango.queue.celery_config import SUMMARIZE_QUEUE, celery_config
from hango.queue.signing import publish_probe, signer_from_settings
from hango.wiring.queue import redis_client
from hango_worker.summarizer import check_worker_summarizer


def create_app(settings: Settings | None = None) -> Celery:
    """The worker app; fails with a ``ConfigError`` naming the variable on bad settings."""
    settings = settings or load_settings()
    signer_from_settings(settings)  # results it commits are signed: no secret, no start
    app = Celery("hango", include=["hango_worker.tasks"])
    app.conf.update(celery_config(settings))
    return app


def _app_or_exit() -> Celery:
    """The app, or one line naming the variable and a non-zero exit (no traceback)."""
    try:
        return create_app()
    except ConfigError as exc:
        refuse(exc)


@signals.celeryd_after_setup.connect(weak=False)
def refuse_to_start_without_a_summarizer(instance: Any = None, **_: Any) -> None:
    """A worker consuming ``summarize`` checks its summarizer before serving anything.

    Without this, a worker missing its API key starts, fails every task with a traceback,
    and the agents fall back in-process as if nothing were wrong. An offload-only worker
    (``-Q offload``) never summarizes, so it needs no key.
    """
    queues = instance.app.amqp.queues
    if SUMMARIZE_QUEUE not in (queues.consume_from or queues):
        return
    try:
        check_worker_summarizer(load_settings())
    except ConfigError as exc:
        refuse(exc)


@signals.celeryd_after_setup.connect(weak=False)
def publish_the_secret_probe(sender: Any = None, **_: Any) -> None:
    """A value signed with this worker's secret, for agents to check theirs against."""
    settings = load_settings()
    publish_probe(redis_client(settings), signer_from_settings(settings), str(sender))


def refuse(error: ConfigError) -> NoReturn:
    """One line naming the variable, and the status a supervisor does not restart."""
    print(f"hango worker: {error}", file=sys.stderr, flush=True)
    raise SystemExit(EXIT_WORKER_CONFIG)


app = _app_or_exit()
celery = app

# OpenTelemetry for the worker processes (worker_process_init).
import hango_worker.signals  # noqa: E402, F401
