"""The store: sessions, their append-only messages and their runs, through SQLAlchemy Core.

One :class:`Store` serves PostgreSQL (the real target) and SQLite (the embedded default).
Each method is one short transaction, so a ``Store`` is safe to share between threads.

Messages are append-only (invariant 1): this class has no way to change or remove a
stored message, and nothing else in the product writes the ``messages`` table. A message
is anchored to its per-session ``seq`` (invariant 6), assigned here as the next number in
the session while the session row is locked; SQLite, which has no row locks, retries on
the primary-key conflict instead.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import importlib.resources
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import sqlalchemy
from pydantic_core import PydanticSerializationError
from sqlalchemy import (
    BigInteger,
    Connection,
    Engine,
    Float,
    Row,
    Text,
    TypeDecorator,
    bindparam,
    cast,
    event,
    func,
    select,
    update,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.sql.elements import BindParameter, ColumnElement

from hango.compaction.record import RunState
from hango.core.errors import (
    ConfigError,
    InvalidInputError,
    SchemaNotReadyError,
    UnknownSessionError,
)
from hango.core.ids import validate_session_id
from hango.core.messages import Message, StoredMessage, message_json
from hango.cost.meter import UsageTotals
from hango.store.leases import TurnLease, check_fence
from hango.store.tables import conflict_insert, messages, runs, session_branches, sessions

RUN_STATUSES = frozenset({"running", "completed", "failed"})
FINISHED_STATUSES = frozenset({"completed", "failed"})
_APPEND_ATTEMPTS = 50

# The statements every turn runs, built once with bound parameters: building a statement
# and its cache key on each call cost ~80 us of CPU a statement against ~19 us for a
# prebuilt one, and a turn runs about 17 (SQLite, measured with time.process_time).
# Expression objects are immutable: ``.where()`` on one makes a new statement.
_SESSION = select(sessions).where(sessions.c.id == bindparam("sid"))
_LOCK_SESSION = select(sessions.c.id).where(sessions.c.id == bindparam("sid")).with_for_update()
_NEXT_SEQ = select(func.coalesce(func.max(messages.c.seq), 0)).where(
    messages.c.session_id == bindparam("sid")
)
_LAST_MESSAGE_TURN = (
    select(messages.c.turn)
    .where(messages.c.session_id == bindparam("sid"))
    .order_by(messages.c.seq.desc())
    .limit(1)
)
_LAST_RUN_TURN = select(func.max(runs.c.turn)).where(runs.c.session_id == bindparam("sid"))
_LATEST_STATE = (
    select(runs.c.state)
    .where(runs.c.session_id == bindparam("sid"))
    .order_by(runs.c.turn.desc())
    .limit(1)
)
_RUN_ID = select(runs.c.id).where(
    runs.c.session_id == bindparam("sid"), runs.c.turn == bindparam("run_turn")
)


class _JsonOnPostgres(TypeDecorator[str]):
    """JSON text cast to ``json`` where the value is bound: a driver that types its
    parameters (psycopg 3, asyncpg) sends it as ``varchar``, which the column refuses."""

    impl = Text
    cache_ok = True

    def bind_expression(self, bindvalue: BindParameter[str]) -> ColumnElement[str]:
        return cast(bindvalue, postgresql.JSON)


# The content bound as the text it already is (the message's compact JSON), not as a value
# for the JSON type to serialize again (SQLite: no cast, a type named JSON is NUMERIC there).
_JSON_TEXT = Text().with_variant(_JsonOnPostgres(), "postgresql")
_INSERT_MESSAGES = messages.insert().values(content=bindparam("content", type_=_JSON_TEXT))
_SAVE_STATE = (
    update(runs)
    .where(runs.c.id == bindparam("run_id"))
    .values(state=bindparam("new_state", type_=runs.c.state.type))
)
_CLOSE_RUN = (
    update(runs)
    .where(runs.c.id == bindparam("run_id"), runs.c.status == "running")
    .values(
        status=bindparam("new_status", type_=runs.c.status.type),
        error=bindparam("new_error", type_=runs.c.error.type),
        finished_at=bindparam("finished", type_=runs.c.finished_at.type),
    )
)
_WRITE_COUNTERS = (
    update(sessions)
    .where(sessions.c.id == bindparam("sid"))
    .values(
        last_input_tokens=bindparam("tokens", type_=sessions.c.last_input_tokens.type),
        compactions=bindparam("count", type_=sessions.c.compactions.type),
    )
)
# With usage: the sums grow by increments in the same statement (no read can race it).
_WRITE_COUNTERS_AND_USAGE = _WRITE_COUNTERS.values(
    cache_read_tokens=sessions.c.cache_read_tokens + bindparam("read", type_=BigInteger()),
    cache_write_tokens=sessions.c.cache_write_tokens + bindparam("write", type_=BigInteger()),
    uncached_input_tokens=sessions.c.uncached_input_tokens
    + bindparam("uncached", type_=BigInteger()),
    output_tokens=sessions.c.output_tokens + bindparam("output", type_=BigInteger()),
    input_cost_usd=sessions.c.input_cost_usd + bindparam("cost", type_=Float()),
)
# Seqs run from 1 and fit the column's 32-bit integer: these bounds leave none out.
_ALL_SEQS = (0, 2**31 - 1)
# What a read of a message row selects: the arguments of ``_read_message``.
_MESSAGE_ROW = (
    messages.c.seq,
    messages.c.turn,
    cast(messages.c.content, Text).label("content"),
    messages.c.estimator,
    messages.c.estimated_tokens,
)
_MESSAGES_BETWEEN = (
    select(*_MESSAGE_ROW)
    .where(
        messages.c.session_id == bindparam("sid"),
        messages.c.seq >= bindparam("lo"),
        messages.c.seq <= bindparam("hi"),
    )
    .order_by(messages.c.seq)
)


@dataclass(frozen=True)
class MessageEstimate:
    """A message's token estimate, stored with it: the figure and the estimator's signature."""

    estimator: str
    tokens: int


@dataclass(frozen=True)
class SessionInfo:
    id: str
    model: str
    created_at: datetime
    last_input_tokens: int
    compactions: int
    # Real usage over the session's model calls (0 until a provider reports any).
    usage: UsageTotals = field(default_factory=UsageTotals)


@dataclass(frozen=True)
class RunInfo:
    id: int
    session_id: str
    turn: int
    status: str
    state: RunState
    error: str | None


log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")


def _disconnected(error: DBAPIError) -> bool:
    """The connection died under the statement (terminated backend, server restart)."""
    return bool(error.connection_invalidated)


def once_more_on_disconnect(method: Callable[P, R]) -> Callable[P, R]:
    """Run an idempotent store step once more when its connection was terminated.

    The pool's pre-ping catches a connection that died while idle; one that dies under a
    statement fails it, and the pool has already discarded it, so a second run of a step
    that is safe to repeat (a read, an upsert, an update to fixed values) carries the turn
    on instead of failing it.
    """

    @functools.wraps(method)
    def retried(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(*args, **kwargs)
        except DBAPIError as error:
            if not _disconnected(error):
                raise
            log.warning("database connection lost in %s; retrying once", method.__name__)
            return method(*args, **kwargs)

    return retried


# Rows fetched at a time when a session's messages are read back. A batch's rows live
# while its messages are made, and those alive when the collector runs count towards its
# next full pass: at 500 a restart over 10,000 messages took two full passes, at 200 one.
_READ_BATCH = 200


class Store:
    """Sessions, messages and runs in one database."""

    engine: Engine

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @classmethod
    def from_url(cls, url: str, *, create_directory: bool = False) -> Store:
        """A store for ``url``; PostgreSQL pings its pool.

        A SQLite file's directory is created only when ``create_directory`` says it is
        ours to create (the home's); a missing directory elsewhere is a typo to report.
        """
        return cls(engine_from_url(url, create_directory=create_directory))

    def flush(self) -> None:
        """Nothing waits here (every method commits); a buffered store writes its rows."""

    @property
    def where(self) -> str:
        """The database's URL without its password, fit for a message."""
        return self.engine.url.render_as_string(hide_password=True)

    def migrate(self) -> tuple[str | None, str | None]:
        """Bring the schema to the head Alembic revision; the revisions before and after."""
        # Imported here: Alembic is heavy and only start-up and deploy steps migrate.
        from alembic import command

        config = _alembic_config()
        with _migration_lock(self.engine), self.engine.connect() as conn:
            before = _current_revision(conn)
            config.attributes["connection"] = conn
            command.upgrade(config, "head")
            conn.commit()
            after = _current_revision(conn)
            if conn.dialect.name == "sqlite":
                # env.py turned enforcement off for the table rebuilds; this connection
                # goes back to the pool, so turn it on again.
                conn.exec_driver_sql("PRAGMA foreign_keys=ON")
                conn.commit()
        return before, after

    def require_schema(self, *, migrate: bool = False) -> None:
        """Fail with a line naming ``hango migrate`` unless the schema is at the head revision.

        ``migrate`` upgrades it instead (``--migrate`` / ``HANGO_AUTO_MIGRATE``).
        """
        from alembic.script import ScriptDirectory

        head = ScriptDirectory.from_config(_alembic_config()).get_current_head()
        with self.engine.connect() as conn:
            current = _current_revision(conn)
        if current == head:
            return
        if migrate:
            self.migrate()
            return
        state = "has no hango schema" if current is None else f"is at revision {current}"
        raise SchemaNotReadyError(
            f"database {self.where} {state}, not {head}: run `hango migrate` on it "
            "(or pass --migrate / set HANGO_AUTO_MIGRATE=1 to migrate on first use)",
            database=self.where,
        )

    # -- sessions ---------------------------------------------------------------------

    @once_more_on_disconnect
    def ensure_session(self, session_id: str, model: str) -> None:
        """Create the session unless it exists (an existing one is left as it is)."""
        validate_session_id(session_id)
        with self.engine.begin() as conn:
            statement = conflict_insert(conn.dialect.name, sessions).on_conflict_do_nothing(
                index_elements=["id"]
            )
            conn.execute(statement, {"id": session_id, "model": model, "created_at": _now()})

    @once_more_on_disconnect
    def record_branch(self, session_id: str, parent_id: str, diverged_at: int) -> None:
        """Note that ``session_id`` continues ``parent_id`` from message ``diverged_at`` on
        (written once: a second call for the same branch leaves the first record)."""
        with self.engine.begin() as conn:
            statement = conflict_insert(conn.dialect.name, session_branches)
            row = {
                "session_id": session_id,
                "parent_id": parent_id,
                "diverged_at": diverged_at,
                "created_at": _now(),
            }
            conn.execute(statement.on_conflict_do_nothing(index_elements=["session_id"]), row)

    @once_more_on_disconnect
    def branch_of(self, session_id: str) -> tuple[str, int] | None:
        """The session ``session_id`` branched from and where, or ``None``."""
        query = select(session_branches.c.parent_id, session_branches.c.diverged_at).where(
            session_branches.c.session_id == session_id
        )
        with self.engine.connect() as conn:
            row = conn.execute(query).first()
        return None if row is None else (row.parent_id, row.diverged_at)

    @once_more_on_disconnect
    def session(self, session_id: str) -> SessionInfo | None:
        with self.engine.connect() as conn:
            row = conn.execute(_SESSION, {"sid": session_id}).first()
        return None if row is None else _session_info(row)

    @once_more_on_disconnect
    def sessions(self) -> list[SessionInfo]:
        query = select(sessions).order_by(sessions.c.created_at, sessions.c.id)
        with self.engine.connect() as conn:
            return [_session_info(row) for row in conn.execute(query)]

    # Not retried on a dropped connection: the usage sums are increments, and a commit
    # that got through before the connection died would be counted twice.
    def write_session_counters(
        self,
        session_id: str,
        *,
        last_input_tokens: int,
        compactions: int,
        usage: UsageTotals | None = None,
    ) -> None:
        """Write the counters with exactly one ``UPDATE sessions`` statement.

        ``usage`` (one turn's real usage) is added to the session's usage sums in the
        same statement, as increments, so no read of the old sums can race with it.
        """
        with self.engine.begin() as conn:
            self._write_counters(conn, session_id, last_input_tokens, compactions, usage)

    def _write_counters(
        self,
        conn: Connection,
        session_id: str,
        last_input_tokens: int,
        compactions: int,
        usage: UsageTotals | None,
    ) -> None:
        statement = _WRITE_COUNTERS
        bound: dict[str, Any] = {
            "sid": session_id,
            "tokens": last_input_tokens,
            "count": compactions,
        }
        if usage is not None and usage.calls:
            statement = _WRITE_COUNTERS_AND_USAGE
            bound.update(_usage_increments(usage))
        if conn.execute(statement, bound).rowcount == 0:
            raise UnknownSessionError(session_id, database=self.where)

    @once_more_on_disconnect
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
        """Finish the run and write the session counters in one transaction, once.

        The run's ``running`` status guards the increments: a retry after a commit that
        went through but whose answer was lost (a backend terminated at the wrong moment)
        finds the run closed and adds nothing, so the step is safe to run again. False
        when the run was already closed.
        """
        _check_status(status)
        closing = {"run_id": run_id, "new_status": status, "new_error": error, "finished": _now()}
        with self.engine.begin() as conn:
            if conn.execute(_CLOSE_RUN, closing).rowcount == 0:
                return False
            self._write_counters(conn, session_id, last_input_tokens, compactions, usage)
        return True

    # -- messages (append-only) -------------------------------------------------------

    def append_message(
        self,
        session_id: str,
        turn: int,
        message: Message,
        lease: TurnLease | None = None,
        estimate: MessageEstimate | None = None,
    ) -> StoredMessage:
        """Store ``message`` as the session's next ``seq`` (1, 2, ...) and return it.

        With ``lease``, the append happens only if that holding of the session is still
        the current one (fencing), checked in the same transaction:
        :class:`TurnLeaseLostError` otherwise. ``estimate`` is stored beside the message:
        a read gives it back with it (``StoredMessage.estimate``), and
        :meth:`message_estimates` lists a session's by ``seq``.
        """
        return self.append_messages(session_id, turn, [(message, estimate)], lease)[0]

    def append_messages(
        self,
        session_id: str,
        turn: int,
        batch: Sequence[tuple[Message, MessageEstimate | None]],
        lease: TurnLease | None = None,
    ) -> list[StoredMessage]:
        """Store ``batch`` as the session's next ``seq`` numbers, in one transaction.

        All or nothing, under the same session lock and fence check as
        :meth:`append_message`: no other writer's message lands between two of the batch.
        A client that re-sends a long history stores it in one commit, not one per message.
        """
        if not batch:
            return []
        for attempt in range(_APPEND_ATTEMPTS):
            try:
                return self._append_surviving_a_disconnect(session_id, turn, batch, lease)
            except IntegrityError:
                if self.session(session_id) is None:
                    raise UnknownSessionError(session_id, database=self.where) from None
                # Another writer took this seq first (SQLite only): take the next ones.
                time.sleep(0.001 * (attempt + 1))
        raise RuntimeError(
            f"could not append to session {session_id!r} after {_APPEND_ATTEMPTS} attempts"
        )

    def _append_surviving_a_disconnect(
        self,
        session_id: str,
        turn: int,
        batch: Sequence[tuple[Message, MessageEstimate | None]],
        lease: TurnLease | None,
    ) -> list[StoredMessage]:
        """``_append_once``, run once more if its connection died, unless it committed.

        A connection can die after the commit reached the server: then the batch's last
        message is the session's last one already, and appending it again would store it
        twice. Two equal messages of one turn in a row are otherwise impossible (roles
        alternate).
        """
        try:
            return self._append_once(session_id, turn, batch, lease)
        except DBAPIError as error:
            if not _disconnected(error):
                raise
            log.warning(
                "database connection lost appending to %s; checking, then retrying", session_id
            )
            last = self._last_message(session_id)
            if last is not None and last.turn == turn and last.message == batch[-1][0]:
                first = last.seq - len(batch) + 1
                return self.messages(session_id, from_seq=first, to_seq=last.seq)
            return self._append_once(session_id, turn, batch, lease)

    def _append_once(
        self,
        session_id: str,
        turn: int,
        batch: Sequence[tuple[Message, MessageEstimate | None]],
        lease: TurnLease | None,
    ) -> list[StoredMessage]:
        with self.engine.begin() as conn:
            _lock_session(conn, session_id)
            if lease is not None:
                check_fence(conn, lease)
            first = _next_seq(conn, session_id)
            now = _now()
            stored, rows = _message_rows(session_id, first, turn, batch, now)
            conn.execute(_INSERT_MESSAGES, rows)
        return stored

    @once_more_on_disconnect
    def messages(
        self, session_id: str, from_seq: int | None = None, to_seq: int | None = None
    ) -> list[StoredMessage]:
        """The session's messages ordered by ``seq``, within the inclusive bounds given."""
        # The content as the text stored, parsed and validated in one pass by pydantic: a
        # restarted process reads a long session at once, and decoding it to dicts first
        # (the JSON type's own processing) was most of that read.
        bounds = {
            "sid": session_id,
            "lo": _ALL_SEQS[0] if from_seq is None else from_seq,
            "hi": _ALL_SEQS[1] if to_seq is None else to_seq,
        }
        # A batch of rows at a time, not all rows first: each row dies soon after its
        # message is made, instead of ten thousand of them living through the collector's
        # passes (and a batch, not a row, per fetch from the driver).
        with self.engine.connect() as conn:
            batches = conn.execute(_MESSAGES_BETWEEN, bounds).partitions(_READ_BATCH)
            return [_read_message(*row) for batch in batches for row in batch]

    @once_more_on_disconnect
    def last_seq(self, session_id: str) -> int:
        """The sequence number of the session's newest message (0: none)."""
        query = select(func.max(messages.c.seq)).where(messages.c.session_id == session_id)
        with self.engine.connect() as conn:
            return int(conn.execute(query).scalar() or 0)

    @once_more_on_disconnect
    def _last_message(self, session_id: str) -> StoredMessage | None:
        query = (
            select(*_MESSAGE_ROW)
            .where(messages.c.session_id == session_id)
            .order_by(messages.c.seq.desc())
            .limit(1)
        )
        with self.engine.connect() as conn:
            row = conn.execute(query).first()
        return None if row is None else _read_message(*row)

    @once_more_on_disconnect
    def message_estimates(
        self, session_id: str, estimator: str, from_seq: int | None = None
    ) -> dict[int, int]:
        """The stored estimates by ``seq`` of the messages estimated by ``estimator``.

        Only figures with exactly this signature: another estimator's (or an older
        version's) would be wrong for the caller, and rows without one are left out.
        """
        query = select(messages.c.seq, messages.c.estimated_tokens).where(
            messages.c.session_id == session_id,
            messages.c.estimator == estimator,
            messages.c.estimated_tokens.is_not(None),
        )
        if from_seq is not None:
            query = query.where(messages.c.seq >= from_seq)
        with self.engine.connect() as conn:
            return {int(seq): int(tokens) for seq, tokens in conn.execute(query)}

    @once_more_on_disconnect
    def last_turn(self, session_id: str) -> int:
        """The highest turn of any message or run of the session; 0 when there is none.

        Read from the session's last message and its highest run, two index lookups: a
        maximum over every message read each of a long session's rows (~25 ms at 10,000
        messages on SQLite, on every turn). The same figure: a turn's messages are
        appended under the turn's run, after every earlier turn's (turns are serialized
        per session), so no earlier message has a higher turn than both.
        """
        bound = {"sid": session_id}
        with self.engine.connect() as conn:
            found = [
                conn.execute(_LAST_MESSAGE_TURN, bound).scalar(),
                conn.execute(_LAST_RUN_TURN, bound).scalar(),
            ]
        return max((int(turn) for turn in found if turn is not None), default=0)

    # -- runs -------------------------------------------------------------------------

    @once_more_on_disconnect
    def start_run(self, session_id: str, turn: int, state: RunState) -> int:
        """The id of the run for (session, turn): created now, or the existing one unchanged."""
        values = {
            "session_id": session_id,
            "turn": turn,
            "status": "running",
            "state": state.model_dump(mode="json"),
            "started_at": _now(),
        }
        with self.engine.begin() as conn:
            _lock_session(conn, session_id)
            statement = conflict_insert(conn.dialect.name, runs).on_conflict_do_nothing(
                index_elements=["session_id", "turn"]
            )
            conn.execute(statement, values)
            existing = conn.execute(_RUN_ID, {"sid": session_id, "run_turn": turn})
            return int(existing.scalar_one())

    @once_more_on_disconnect
    def run(self, session_id: str, turn: int) -> RunInfo | None:
        query = select(runs).where(runs.c.session_id == session_id, runs.c.turn == turn)
        with self.engine.connect() as conn:
            row = conn.execute(query).first()
        return None if row is None else _run_info(row)

    @once_more_on_disconnect
    def latest_run(self, session_id: str) -> RunInfo | None:
        """The session's run with the highest turn (an unfinished one is still "running")."""
        query = (
            select(runs)
            .where(runs.c.session_id == session_id)
            .order_by(runs.c.turn.desc())
            .limit(1)
        )
        with self.engine.connect() as conn:
            row = conn.execute(query).first()
        return None if row is None else _run_info(row)

    @once_more_on_disconnect
    def runs(self, session_id: str) -> list[RunInfo]:
        query = select(runs).where(runs.c.session_id == session_id).order_by(runs.c.turn)
        with self.engine.connect() as conn:
            return [_run_info(row) for row in conn.execute(query)]

    @once_more_on_disconnect
    def save_run_state(self, run_id: int, state: RunState) -> None:
        saved = {"run_id": run_id, "new_state": state.model_dump(mode="json")}
        with self.engine.begin() as conn:
            if conn.execute(_SAVE_STATE, saved).rowcount == 0:
                raise LookupError(f"unknown run id {run_id}")

    def finish_run(self, run_id: int, status: str, error: str | None = None) -> None:
        """Close the run as ``"completed"`` or ``"failed"`` (with its error text)."""
        _check_status(status)
        self._update_run(run_id, status=status, error=error, finished_at=_now())

    @once_more_on_disconnect
    def latest_state(self, session_id: str) -> RunState:
        """The state of the session's run with the highest turn; an empty state if none."""
        with self.engine.connect() as conn:
            found = conn.execute(_LATEST_STATE, {"sid": session_id}).scalar()
        return RunState() if found is None else RunState.model_validate(found)

    @once_more_on_disconnect
    def _update_run(self, run_id: int, **values: Any) -> None:
        with self.engine.begin() as conn:
            changed = conn.execute(update(runs).where(runs.c.id == run_id).values(**values))
            if changed.rowcount == 0:
                raise LookupError(f"unknown run id {run_id}")


def _alembic_config() -> Any:
    from alembic.config import Config as AlembicConfig

    config = AlembicConfig()
    config.set_main_option("script_location", str(migrations_dir()))
    config.set_main_option("path_separator", "os")
    return config


def _current_revision(conn: Connection) -> str | None:
    from alembic.migration import MigrationContext

    return MigrationContext.configure(conn).get_current_revision()


def migrations_dir() -> Path:
    """The Alembic scripts, found through the installed package ``hango.migrations``.

    They ship inside the wheel, so a normal install finds them from any directory (the
    repository's ``migrations/`` folder is that package in a checkout).
    """
    found = importlib.resources.files("hango.migrations")
    if not isinstance(found, Path) or not (found / "env.py").is_file():
        raise FileNotFoundError(f"the package hango.migrations holds no Alembic env.py ({found})")
    return found


@contextlib.contextmanager
def _migration_lock(engine: Engine) -> Iterator[None]:
    """One migration at a time per SQLite file, across processes.

    Every process opening the embedded store migrates it first; on a fresh file they all
    see no schema and all create it (``table sessions already exists``). An exclusive
    ``flock`` on a lock file beside the database serializes them: the first creates the
    schema, the others find it at the head revision. PostgreSQL is migrated by a deploy
    step (``hango migrate``), not by every process.
    """
    database = engine.url.database
    if engine.dialect.name != "sqlite" or not database or database == ":memory:":
        yield
        return
    if database.startswith("file:"):
        yield
        return
    lock_path = Path(database).expanduser().with_name(Path(database).name + ".migrate-lock")
    with open(lock_path, "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def engine_from_url(url: str, *, create_directory: bool = False) -> Engine:
    """An engine for ``url`` set up for this store's access pattern."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_engine(url, parsed.database, create_directory=create_directory)
    if parsed.drivername in ("postgresql", "postgres"):
        # The driver of the [postgres] extra (psycopg2); SQLAlchemy 2.1's default for a
        # bare postgresql:// is psycopg 3, which is not installed.
        parsed = parsed.set(drivername="postgresql+psycopg2")
    try:
        # Looked up on the module at call time, so OpenTelemetry's SQLAlchemy instrumentation
        # (which wraps sqlalchemy.create_engine once tracing starts) sees every engine.
        return sqlalchemy.create_engine(parsed, pool_pre_ping=True)
    except ModuleNotFoundError as exc:
        raise _missing_driver(url, exc) from exc


def _missing_driver(url: str, exc: ModuleNotFoundError) -> Exception:
    if exc.name != "psycopg2":
        return exc
    return ConfigError(
        f"the database URL {make_url(url).render_as_string(hide_password=True)!r} needs the "
        "PostgreSQL driver psycopg2, which is not installed: "
        "pip install 'hango-context[postgres]'",
        variable="HANGO_DATABASE_URL",
    )


def _sqlite_engine(url: str, database: str | None, *, create_directory: bool) -> Engine:
    if database and database != ":memory:" and not database.startswith("file:"):
        directory = Path(database).expanduser().parent
        if create_directory:
            directory.mkdir(parents=True, exist_ok=True)
        elif not directory.is_dir():
            raise ConfigError(
                f"no directory {str(directory)!r} for the SQLite database {url!r}: "
                "create it, or pick another --database-url / HANGO_DATABASE_URL",
                variable="HANGO_DATABASE_URL",
            )
    # Writers queue on SQLite's lock for up to 30 s instead of failing at once.
    engine = sqlalchemy.create_engine(url, connect_args={"timeout": 30})
    event.listen(engine, "connect", _enable_sqlite_foreign_keys)
    return engine


def scratch_sqlite_engine(url: str) -> Engine:
    """A SQLite engine for a database thrown away when its process ends (``hango replay``'s
    own, when no ``--database-url`` is given): commits are not synced to disk.

    Only for a file nobody keeps: a crash of the machine could leave it corrupt, which is
    no loss for a scratch file and would be one for a user's database.
    """
    if make_url(url).get_backend_name() != "sqlite":
        raise ValueError(f"a scratch database is a SQLite file, not {url!r}")
    engine = engine_from_url(url)
    event.listen(engine, "connect", _unsynced)
    return engine


def _unsynced(dbapi_connection: Any, _record: Any) -> None:
    # Runs after the foreign-key listener (listeners run in order): WAL stays, syncs go.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA synchronous=OFF")
    cursor.close()


def _enable_sqlite_foreign_keys(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    # WAL with synchronous=NORMAL survives a crash of the process (not of the machine
    # mid-write) and makes each commit cheap: the loop commits every appended message,
    # and with the default rollback journal each commit cost a full fsync (~16 ms here).
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def _lock_session(conn: Connection, session_id: str) -> None:
    """Lock the session row for this transaction (a no-op on SQLite); fail if it is absent."""
    if conn.execute(_LOCK_SESSION, {"sid": session_id}).first() is None:
        where = conn.engine.url.render_as_string(hide_password=True)
        raise UnknownSessionError(session_id, database=where)


def _check_status(status: str) -> None:
    if status not in FINISHED_STATUSES:
        raise ValueError(f"invalid run status {status!r}: use one of {sorted(FINISHED_STATUSES)}")


def _next_seq(conn: Connection, session_id: str) -> int:
    return int(conn.execute(_NEXT_SEQ, {"sid": session_id}).scalar_one()) + 1


def _message_rows(
    session_id: str,
    first: int,
    turn: int,
    batch: Sequence[tuple[Message, MessageEstimate | None]],
    now: datetime,
) -> tuple[list[StoredMessage], list[dict[str, Any]]]:
    """The batch as stored messages from ``first`` on, and their rows.

    A row's content is the message's compact JSON, the very bytes of its part of a request
    body: the stored message carries them, and the outgoing copy sends them as they are.
    """
    stored, rows = [], []
    for seq, (message, estimate) in enumerate(batch, start=first):
        try:
            part = message_json(message)
        except PydanticSerializationError as error:  # a lone surrogate: not UTF-8 text
            raise InvalidInputError(
                f"session {session_id}: message {seq - first + 1} of the batch cannot be "
                f"sent as JSON ({error}); nothing of the batch was stored"
            ) from None
        figure = (estimate.estimator, estimate.tokens) if estimate else None
        stored.append(StoredMessage.as_stored(seq, turn, message, part, figure))
        rows.append(
            {
                "session_id": session_id,
                "seq": seq,
                "turn": turn,
                "role": message.role,
                "content": part[1:].decode(),
                "created_at": now,
                "estimated_tokens": estimate.tokens if estimate else None,
                "estimator": estimate.estimator if estimate else None,
            }
        )
    return stored, rows


def _read_message(
    seq: int, turn: int, content: str, estimator: str | None, tokens: int | None
) -> StoredMessage:
    """A row read back: its content parsed and validated in one pass by pydantic, with the
    estimate stored beside it.

    Content written by :func:`_message_rows` is the message's compact JSON, which
    serializing the parsed message gives back byte for byte: the copy sends it as it is.
    Rows of older versions (spaced JSON, the JSON type's own dump) are serialized again.
    """
    message = Message.model_validate_json(content)
    part = b"," + content.encode() if content.startswith('{"role":"') else None
    estimate = None if estimator is None or tokens is None else (estimator, int(tokens))
    return StoredMessage.as_stored(seq, turn, message, part, estimate)


def _now() -> datetime:
    return datetime.now(UTC)


def _aware(moment: datetime) -> datetime:
    # SQLite keeps no zone; every time this store writes is UTC.
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _usage_increments(usage: UsageTotals) -> dict[str, Any]:
    """The parameters of ``_WRITE_COUNTERS_AND_USAGE``."""
    return {
        "read": usage.read_tokens,
        "write": usage.write_tokens,
        "uncached": usage.uncached_tokens,
        "output": usage.output_tokens,
        "cost": usage.input_cost_usd,
    }


def _session_info(row: Row[Any]) -> SessionInfo:
    return SessionInfo(
        id=row.id,
        model=row.model,
        created_at=_aware(row.created_at),
        last_input_tokens=row.last_input_tokens,
        compactions=row.compactions,
        usage=UsageTotals(
            read_tokens=row.cache_read_tokens,
            write_tokens=row.cache_write_tokens,
            uncached_tokens=row.uncached_input_tokens,
            output_tokens=row.output_tokens,
            input_cost_usd=row.input_cost_usd,
        ),
    )


def _run_info(row: Row[Any]) -> RunInfo:
    return RunInfo(
        id=row.id,
        session_id=row.session_id,
        turn=row.turn,
        status=row.status,
        state=RunState.model_validate(row.state),
        error=row.error,
    )
