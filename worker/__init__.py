"""The Celery side: app, tasks and worker signals. Logic lives in ``shared``.

``celery -A hango_worker worker`` finds the app as ``hango_worker.celery``. It is resolved lazily so
that importing ``hango_worker.tasks`` or ``hango_worker.signals`` alone (tests, tools) does not
build the app, which needs ``HANGO_REDIS_URL``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from celery import Celery


def __getattr__(name: str) -> Celery:
    if name == "celery":
        from hango_worker.app import app

        return app
    raise AttributeError(f"module 'worker' has no attribute {name!r}")
