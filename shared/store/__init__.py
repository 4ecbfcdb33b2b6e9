"""The store: sessions, append-only messages and runs, on PostgreSQL or SQLite."""

from shared.store.repository import RunInfo, SessionInfo, Store

__all__ = ["RunInfo", "SessionInfo", "Store"]
