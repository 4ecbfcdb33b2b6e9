"""Session leases: at most one turn runs on a session at a time, across processes and hosts.

The lease is a row of ``session_leases`` in the store itself (PostgreSQL or the embedded
SQLite, the same code): a random holder token, a fencing number that every new holder
increments, and an expiry that a heartbeat thread pushes forward while the turn runs.

- **taking it** is one conditional ``UPDATE`` (the row is free, or expired) or, for a
  session's first turn, an ``INSERT ... ON CONFLICT DO NOTHING``: one statement, atomic on
  both databases, no read-then-write race;
- **a crashed holder** stops heartbeating; its lease expires after ``ttl`` seconds and the
  next caller takes it (and resumes the turn it left unfinished);
- **fencing**: the store checks the holder's fence in the same transaction as each
  append (:meth:`~hango.store.repository.Store.append_message`), so a holder that was
  paused past its expiry (a long GC, a suspended VM) and taken over cannot interleave its
  messages with the new holder's.

Expiry compares the holders' wall clocks: hosts must agree to well within ``ttl``
(NTP does; the default ttl is 30 s).
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, select, update
from sqlalchemy.exc import IntegrityError, OperationalError

from hango.core.errors import SessionBusyError, TurnLeaseLostError
from hango.store.tables import conflict_insert, session_leases

log = logging.getLogger(__name__)

# First and longest pause between two attempts while another process holds the session.
_FIRST_RETRY = 0.01
_MAX_RETRY = 0.25


@dataclass(frozen=True)
class TurnLease:
    """One holding of a session: the token and the fence its appends carry."""

    session_id: str
    holder: str
    fence: int


@dataclass(frozen=True)
class LeasePolicy:
    """How long a holding lives between heartbeats, and how long a caller waits for one."""

    ttl: float = 30.0
    wait: float = 60.0


class SessionLeases:
    """Takes, extends and releases session leases in the store's database."""

    def __init__(self, engine: Engine, *, clock: Callable[[], float] = time.time) -> None:
        self.engine = engine
        self.clock = clock

    def try_acquire(self, session_id: str, ttl: float) -> TurnLease | None:
        """The lease if it is free (or expired) now; None while another holder has it."""
        holder = secrets.token_hex(16)
        now = self.clock()
        try:
            with self.engine.begin() as conn:
                fence = _take(conn, session_id, holder, now, now + ttl)
        except (IntegrityError, OperationalError):
            # Another process inserted the first row, or SQLite's writer lock was busy.
            return None
        return None if fence is None else TurnLease(session_id, holder, fence)

    def acquire(self, session_id: str, policy: LeasePolicy) -> TurnLease:
        """The lease, waiting up to ``policy.wait`` seconds; :class:`SessionBusyError` after."""
        started = time.monotonic()
        pause = _FIRST_RETRY
        while True:
            lease = self.try_acquire(session_id, policy.ttl)
            if lease is not None:
                return lease
            waited = time.monotonic() - started
            if waited >= policy.wait:
                raise SessionBusyError(
                    f"session {session_id!r} is running a turn in another process; waited "
                    f"{waited:.1f} s (HANGO_SESSION_BUSY_TIMEOUT={policy.wait:g}). A crashed "
                    f"holder's lease expires within HANGO_SESSION_LEASE_TTL={policy.ttl:g} s",
                    session_id=session_id,
                    waited=round(waited, 3),
                )
            time.sleep(min(pause, policy.wait - waited))
            pause = min(pause * 2, _MAX_RETRY)

    def extend(self, lease: TurnLease, ttl: float) -> bool:
        """Push the expiry forward; False when the lease is no longer ours."""
        statement = update(session_leases).where(_ours(lease)).values(expires_at=self.clock() + ttl)
        with self.engine.begin() as conn:
            return bool(conn.execute(statement).rowcount)

    def release(self, lease: TurnLease) -> None:
        """Free the session now (the row and its fence stay: fences only ever grow)."""
        statement = update(session_leases).where(_ours(lease)).values(expires_at=0.0)
        with self.engine.begin() as conn:
            conn.execute(statement)

    @contextmanager
    def held(self, session_id: str, policy: LeasePolicy) -> Iterator[TurnLease]:
        """Hold the session for the body, heartbeating every third of the ttl."""
        with self.holding(self.acquire(session_id, policy), policy) as lease:
            yield lease

    @contextmanager
    def holding(self, lease: TurnLease, policy: LeasePolicy) -> Iterator[TurnLease]:
        """Hold ``lease``, taken already, for the body; released after it."""
        stop = threading.Event()
        beat = threading.Thread(
            target=self._heartbeat,
            args=(lease, policy.ttl, stop),
            name=f"session-lease {lease.session_id}",
            daemon=True,
        )
        beat.start()
        try:
            yield lease
        finally:
            stop.set()
            beat.join()
            try:
                self.release(lease)
            except Exception:
                log.warning("session %s: could not release its lease; it expires", lease.session_id)

    def _heartbeat(self, lease: TurnLease, ttl: float, stop: threading.Event) -> None:
        while not stop.wait(ttl / 3):
            try:
                if not self.extend(lease, ttl):
                    log.warning("session %s: the turn's lease was taken over", lease.session_id)
                    return
            except Exception:
                log.warning("session %s: could not extend the turn's lease", lease.session_id)


def check_fence(conn: Connection, lease: TurnLease) -> None:
    """Refuse a write unless ``lease`` is still the session's current holding.

    The row is read ``FOR UPDATE`` (PostgreSQL): a takeover waits for this transaction,
    or this transaction sees the new fence; either way no stale write lands after it.
    """
    row = conn.execute(
        select(session_leases.c.holder, session_leases.c.fence)
        .where(session_leases.c.session_id == lease.session_id)
        .with_for_update()
    ).first()
    if row is None or (row.holder, row.fence) != (lease.holder, lease.fence):
        raise TurnLeaseLostError(
            f"session {lease.session_id!r}: this process's turn lost its lease (it expired "
            "and another process took the session); nothing more is written by this turn",
            session_id=lease.session_id,
        )


def _ours(lease: TurnLease) -> Any:
    return (
        (session_leases.c.session_id == lease.session_id)
        & (session_leases.c.holder == lease.holder)
        & (session_leases.c.fence == lease.fence)
    )


def _take(conn: Connection, session_id: str, holder: str, now: float, until: float) -> int | None:
    """Take the row if it is free; the new fence, or None if someone holds it."""
    taken = conn.execute(
        update(session_leases)
        .where(session_leases.c.session_id == session_id, session_leases.c.expires_at <= now)
        .values(holder=holder, fence=session_leases.c.fence + 1, expires_at=until)
    ).rowcount
    if not taken:
        inserted = conn.execute(
            conflict_insert(conn.dialect.name, session_leases).on_conflict_do_nothing(
                index_elements=["session_id"]
            ),
            {"session_id": session_id, "holder": holder, "fence": 1, "expires_at": until},
        ).rowcount
        if not inserted:
            return None
    fence = conn.execute(
        select(session_leases.c.fence).where(
            session_leases.c.session_id == session_id, session_leases.c.holder == holder
        )
    ).scalar()
    return None if fence is None else int(fence)
