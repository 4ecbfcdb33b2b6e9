"""Retention: deleting a session, and finding the sessions idle for longer than a cutoff.

A session's rows are its messages, runs, lease and the session row itself; they go in one
transaction, so a session is either all there or all gone. A session whose lease is live
(a turn is running in some process right now) is refused, never deleted under it. The
session's history files (the offloaded transcript and its large tool results) are the
caller's to delete with the history backend (``hango sessions delete`` does both).
"""

from __future__ import annotations

import time
from datetime import datetime

from sqlalchemy import Connection, delete, func, select

from hango.core.errors import SessionBusyError
from hango.store.repository import Store
from hango.store.tables import messages, runs, session_leases, sessions


def delete_session(store: Store, session_id: str, *, now: float | None = None) -> bool:
    """Delete every row of the session; ``False`` when there was no such session."""
    with store.engine.begin() as conn:
        _refuse_live_lease(conn, session_id, time.time() if now is None else now)
        for table in (session_leases, runs, messages):
            conn.execute(delete(table).where(table.c.session_id == session_id))
        removed = conn.execute(delete(sessions).where(sessions.c.id == session_id))
    return removed.rowcount > 0


def idle_sessions(store: Store, before: datetime) -> list[str]:
    """The sessions with no message (or, with none at all, no creation) since ``before``."""
    last_message = (
        select(messages.c.session_id, func.max(messages.c.created_at).label("at"))
        .group_by(messages.c.session_id)
        .subquery()
    )
    last_active = func.coalesce(last_message.c.at, sessions.c.created_at)
    query = (
        select(sessions.c.id)
        .outerjoin(last_message, last_message.c.session_id == sessions.c.id)
        .where(last_active < before)
        .order_by(sessions.c.id)
    )
    with store.engine.connect() as conn:
        return [str(session_id) for session_id in conn.execute(query).scalars()]


def _refuse_live_lease(conn: Connection, session_id: str, now: float) -> None:
    expires = conn.execute(
        select(session_leases.c.expires_at).where(session_leases.c.session_id == session_id)
    ).scalar()
    if expires is not None and expires > now:
        raise SessionBusyError(
            f"session {session_id!r} is running a turn in another process; it was not "
            f"deleted (its lease expires in {expires - now:.0f} s)",
            session_id=session_id,
            waited=0.0,
        )
