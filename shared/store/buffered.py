"""A store whose writes wait in memory: ``hango replay``'s scratch database.

A replay of a million short lines is half a million turns, and each turn of the loop
runs about 17 statements in 9 transactions (read the session, its last turn and state,
start the run, top up the messages, append twice, save the state, close the run): ~1 ms
of CPU a turn on SQLite, most of it SQLAlchemy's work per statement rather than the
database's. :class:`BufferedStore` answers those from memory and writes the rows in one
transaction per :data:`FLUSH_ROWS` messages.

It is only right for a database this process created empty and alone writes (the
replay's throwaway SQLite file, not a ``--database-url``): its reads of sessions, turns,
states and the newest messages come from what it wrote, not from the database. Every
other method writes what is pending first and then asks the database, so every answer is
the plain :class:`Store`'s (``tests/unit/store/test_buffered.py`` runs both side by side).
Code that reads the tables through ``engine`` directly must call :meth:`flush` first.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, bindparam, func, select, update

from hango.compaction.record import RunState
from hango.core.errors import UnknownSessionError
from hango.core.ids import validate_session_id
from hango.core.messages import Message, StoredMessage
from hango.cost.meter import UsageTotals
from hango.store.leases import TurnLease
from hango.store.repository import (
    _INSERT_MESSAGES,
    MessageEstimate,
    SessionInfo,
    Store,
    _check_status,
    _message_rows,
    _now,
)
from hango.store.tables import runs, sessions

# Messages written per transaction: the pending rows are the only memory this adds.
FLUSH_ROWS = 512

_INSERT_RUNS = runs.insert()
_FLUSH_RUN = (
    update(runs)
    .where(runs.c.id == bindparam("run_id"))
    .values(
        status=bindparam("new_status", type_=runs.c.status.type),
        state=bindparam("new_state", type_=runs.c.state.type),
        error=bindparam("new_error", type_=runs.c.error.type),
        finished_at=bindparam("finished", type_=runs.c.finished_at.type),
    )
)
_FLUSH_SESSION = (
    update(sessions)
    .where(sessions.c.id == bindparam("sid"))
    .values(
        {
            column: bindparam(f"new_{column}", type_=sessions.c[column].type)
            for column in (
                "last_input_tokens",
                "compactions",
                "cache_read_tokens",
                "cache_write_tokens",
                "uncached_input_tokens",
                "output_tokens",
                "input_cost_usd",
            )
        }
    )
)


@dataclass
class _Run:
    """A run as its row stands, the database's copy behind until the next flush."""

    id: int
    session_id: str
    turn: int
    state: Any  # the JSON the row holds (``RunState.model_dump(mode="json")``)
    started_at: datetime
    status: str = "running"
    error: str | None = None
    finished_at: datetime | None = None
    written: bool = False

    def row(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "session_id": self.session_id,
            "turn": self.turn,
            "status": self.status,
            "state": self.state,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "error": self.error,
        }

    def changes(self) -> dict[str, Any]:
        return {
            "run_id": self.id,
            "new_status": self.status,
            "new_state": self.state,
            "new_error": self.error,
            "finished": self.finished_at,
        }


@dataclass
class _Session:
    """What the replay reads of a session every turn, kept as it is written."""

    info: SessionInfo
    last_seq: int = 0
    last_message_turn: int = 0
    latest_run: _Run | None = None  # the run with the highest turn


@dataclass
class _Pending:
    messages: list[dict[str, Any]] = field(default_factory=list)
    runs: dict[int, _Run] = field(default_factory=dict)
    sessions: set[str] = field(default_factory=set)


class BufferedStore(Store):
    """A :class:`Store` over a fresh database it alone writes; see the module's note."""

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self._sessions: dict[str, _Session] = {}
        self._pending = _Pending()
        self._run_ids = 0
        # Reentrant: a method that falls back to the database flushes under the lock.
        self._lock = threading.RLock()

    @classmethod
    def fresh(cls, engine: Engine) -> BufferedStore:
        """The store of a database migrated now, refused unless it holds no session and
        no run (what this store answers from memory must be all there is)."""
        store = cls(engine)
        store.migrate()
        with engine.connect() as conn:
            held = conn.execute(
                select(func.count())
                .select_from(sessions)
                .union_all(select(func.count()).select_from(runs))
            ).scalars()
            if any(held):
                raise ValueError(f"a buffered store needs an empty database, not {store.where}")
        return store

    def flush(self) -> None:
        """Write every pending row, in one transaction (they stay pending if it fails)."""
        with self._lock:
            pending = self._pending
            if not (pending.messages or pending.runs or pending.sessions):
                return
            with self.engine.begin() as conn:
                new = [run.row() for run in pending.runs.values() if not run.written]
                changed = [run.changes() for run in pending.runs.values() if run.written]
                if new:
                    conn.execute(_INSERT_RUNS, new)
                if changed:
                    conn.execute(_FLUSH_RUN, changed)
                if pending.messages:
                    conn.execute(_INSERT_MESSAGES, pending.messages)
                counters = [self._counters(sid) for sid in pending.sessions]
                if counters:
                    conn.execute(_FLUSH_SESSION, counters)
            for run in pending.runs.values():
                run.written = True
            self._pending = _Pending()

    def _counters(self, session_id: str) -> dict[str, Any]:
        info = self._sessions[session_id].info
        usage = info.usage
        return {
            "sid": session_id,
            "new_last_input_tokens": info.last_input_tokens,
            "new_compactions": info.compactions,
            "new_cache_read_tokens": usage.read_tokens,
            "new_cache_write_tokens": usage.write_tokens,
            "new_uncached_input_tokens": usage.uncached_tokens,
            "new_output_tokens": usage.output_tokens,
            "new_input_cost_usd": usage.input_cost_usd,
        }

    def _known(self, session_id: str) -> _Session:
        found = self._sessions.get(session_id)
        if found is None:
            raise UnknownSessionError(session_id, database=self.where)
        return found

    # -- sessions ---------------------------------------------------------------------

    def ensure_session(self, session_id: str, model: str) -> None:
        validate_session_id(session_id)
        with self._lock:
            if session_id in self._sessions:
                return
            super().ensure_session(session_id, model)
            created = super().session(session_id)
            assert created is not None
            self._sessions[session_id] = _Session(created)

    def session(self, session_id: str) -> SessionInfo | None:
        with self._lock:
            found = self._sessions.get(session_id)
        return None if found is None else found.info

    def write_session_counters(
        self,
        session_id: str,
        *,
        last_input_tokens: int,
        compactions: int,
        usage: UsageTotals | None = None,
    ) -> None:
        with self._lock:
            self._write_counters_now(session_id, last_input_tokens, compactions, usage)

    def _write_counters_now(
        self,
        session_id: str,
        last_input_tokens: int,
        compactions: int,
        usage: UsageTotals | None,
    ) -> None:
        held = self._known(session_id)
        totals = held.info.usage
        if usage is not None and usage.calls:
            # The same sums, in the same order, as the statement's increments.
            totals = UsageTotals(
                read_tokens=totals.read_tokens + usage.read_tokens,
                write_tokens=totals.write_tokens + usage.write_tokens,
                uncached_tokens=totals.uncached_tokens + usage.uncached_tokens,
                output_tokens=totals.output_tokens + usage.output_tokens,
                input_cost_usd=totals.input_cost_usd + usage.input_cost_usd,
            )
        held.info = replace(
            held.info, last_input_tokens=last_input_tokens, compactions=compactions, usage=totals
        )
        self._pending.sessions.add(session_id)

    def close_turn(
        self,
        run_id: int,
        session_id: str,
        *,
        status: str,
        error: str | None = None,
        last_input_tokens: int,
        compactions: int,
        usage: UsageTotals | None = None,
    ) -> bool:
        _check_status(status)
        counters = (last_input_tokens, compactions, usage)
        with self._lock:
            run = self._run(run_id)
            if run is None:
                return self._close_in_database(run_id, session_id, status, error, counters)
            if run.status != "running":
                return False
            self._known(session_id)
            self._finish(run, status, error)
            self._write_counters_now(session_id, *counters)
            if len(self._pending.messages) >= FLUSH_ROWS:
                self.flush()
        return True

    def _close_in_database(
        self,
        run_id: int,
        session_id: str,
        status: str,
        error: str | None,
        counters: tuple[int, int, UsageTotals | None],
    ) -> bool:
        """Close a run memory no longer holds; memory's counters take the same change."""
        self.flush()
        tokens, compactions, usage = counters
        closed = super().close_turn(
            run_id,
            session_id,
            status=status,
            error=error,
            last_input_tokens=tokens,
            compactions=compactions,
            usage=usage,
        )
        if closed:  # the database added these increments to the sums memory holds
            self._write_counters_now(session_id, tokens, compactions, usage)
        return closed

    # -- messages ---------------------------------------------------------------------

    def append_messages(
        self,
        session_id: str,
        turn: int,
        batch: Sequence[tuple[Message, MessageEstimate | None]],
        lease: TurnLease | None = None,
    ) -> list[StoredMessage]:
        if not batch:
            return []
        with self._lock:
            if lease is not None:
                # The fence lives in the database's lease table.
                self.flush()
                stored = super().append_messages(session_id, turn, batch, lease)
                self._appended(self._known(session_id), stored)
                return stored
            held = self._known(session_id)
            first, now = held.last_seq + 1, _now()
            stored, rows = _message_rows(session_id, first, turn, batch, now)
            self._pending.messages.extend(rows)
            self._appended(held, stored)
        return stored

    @staticmethod
    def _appended(held: _Session, stored: list[StoredMessage]) -> None:
        held.last_seq, held.last_message_turn = stored[-1].seq, stored[-1].turn

    def messages(
        self, session_id: str, from_seq: int | None = None, to_seq: int | None = None
    ) -> list[StoredMessage]:
        with self._lock:
            held = self._sessions.get(session_id)
            newest = 0 if held is None else held.last_seq
            if from_seq is not None and from_seq > newest:
                return []  # the loop's top-up once per turn: nothing new since it appended
            self.flush()
        return super().messages(session_id, from_seq, to_seq)

    def last_seq(self, session_id: str) -> int:
        with self._lock:
            held = self._sessions.get(session_id)
        return 0 if held is None else held.last_seq

    def last_turn(self, session_id: str) -> int:
        with self._lock:
            held = self._sessions.get(session_id)
            if held is None:
                return 0
            run = held.latest_run
        return max(held.last_message_turn, 0 if run is None else run.turn)

    # -- runs -------------------------------------------------------------------------

    def start_run(self, session_id: str, turn: int, state: RunState) -> int:
        with self._lock:
            held = self._known(session_id)
            latest = held.latest_run
            if latest is not None and turn <= latest.turn:
                # An earlier turn's run, which may be in the database only.
                self.flush()
                found = super().start_run(session_id, turn, state)
                # A run the database numbered: the next of ours comes after it.
                self._run_ids = max(self._run_ids, found)
                return found
            self._run_ids += 1
            run = _Run(self._run_ids, session_id, turn, state.model_dump(mode="json"), _now())
            held.latest_run = self._pending.runs[run.id] = run
        return run.id

    def save_run_state(self, run_id: int, state: RunState) -> None:
        with self._lock:
            run = self._run(run_id)
            if run is None:
                self.flush()
                super().save_run_state(run_id, state)
                return
            run.state = state.model_dump(mode="json")
            self._pending.runs[run.id] = run

    def finish_run(self, run_id: int, status: str, error: str | None = None) -> None:
        _check_status(status)
        with self._lock:
            run = self._run(run_id)
            if run is None:
                self.flush()
                super().finish_run(run_id, status, error)
                return
            self._finish(run, status, error)

    def latest_state(self, session_id: str) -> RunState:
        with self._lock:
            held = self._sessions.get(session_id)
            run = None if held is None else held.latest_run
        return RunState() if run is None else RunState.model_validate(run.state)

    def _run(self, run_id: int) -> _Run | None:
        """The run if memory holds it: pending, or the latest of its session."""
        found = self._pending.runs.get(run_id)
        if found is not None:
            return found
        for held in self._sessions.values():
            if held.latest_run is not None and held.latest_run.id == run_id:
                return held.latest_run
        return None

    def _finish(self, run: _Run, status: str, error: str | None) -> None:
        run.status, run.error, run.finished_at = status, error, _now()
        self._pending.runs[run.id] = run


def _flushed_first(name: str) -> Callable[..., Any]:
    """``Store.<name>``, after the pending rows are written."""
    inherited = getattr(Store, name)

    def method(self: BufferedStore, *args: Any, **kwargs: Any) -> Any:
        self.flush()
        return inherited(self, *args, **kwargs)

    method.__name__ = name
    method.__doc__ = inherited.__doc__
    return method


# The reads no turn makes: answered by the database, once it holds everything.
FLUSHED_FIRST = (
    "record_branch",
    "branch_of",
    "sessions",
    "_last_message",
    "message_estimates",
    "run",
    "latest_run",
    "runs",
    "_update_run",
)
for _name in FLUSHED_FIRST:
    setattr(BufferedStore, _name, _flushed_first(_name))
