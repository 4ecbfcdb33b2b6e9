"""The store: sessions, append-only messages and runs, on PostgreSQL or SQLite."""

from hango.store.repository import MessageEstimate, RunInfo, SessionInfo, Store

__all__ = ["MessageEstimate", "RunInfo", "SessionInfo", "Store"]
