"""Builds the configured history backend from the settings (``HANGO_HISTORY_BACKEND``)."""

from __future__ import annotations

from sqlalchemy import Engine

from hango.core.settings import Settings
from hango.history.base import HistoryBackend
from hango.history.local import LocalHistory
from hango.history.postgres import PostgresHistory
from hango.store.repository import engine_from_url


def history_from_settings(settings: Settings, engine: Engine | None = None) -> HistoryBackend:
    """The backend named by ``settings.history_backend``.

    ``engine`` lets the database backend share the store's connection pool; without it
    one is made from ``settings.database_url``.
    """
    if settings.history_backend == "postgres":
        return PostgresHistory(
            engine if engine is not None else engine_from_url(settings.database_url)
        )
    return LocalHistory(settings.history_root)
