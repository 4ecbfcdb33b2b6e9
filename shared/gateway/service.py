"""One client request as one turn of the library's own loop.

The loop the library runs (``AgentLoop`` with the chain ``build_agent`` assembles:
tool-argument truncation, summarization with history offload and pre-summaries, prompt
cache breakpoints, the validator, the overflow ladder) builds the request that goes
upstream; only its fixed part comes from the client (model, ``max_tokens``, system,
tools and every other field, forwarded as sent), and its provider is the client's
request (:mod:`hango.gateway.provider`). One loop per model, built on first use.

A turn here: place the history on a branch (:mod:`hango.gateway.sessions`), hold the
branch's lease (one turn at a time per branch, across gateway processes), append the new
suffix, make one model call (:meth:`AgentLoop.call_model`; the internal rounds of the
history tool the gateway answers itself run inside it, :mod:`hango.gateway.history_rounds`),
close the turn.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

import anyio.from_thread
import anyio.to_thread
from pydantic import ValidationError
from pydantic_core import PydanticSerializationError

from hango.agent.loop import AgentLoop, PendingAppend, TurnContext
from hango.compaction.head import head_message
from hango.core.errors import (
    HangoError,
    InvalidInputError,
    InvalidRequestError,
    SessionBusyError,
)
from hango.core.messages import JsonObject, Message, Request, StoredMessage, message_json
from hango.core.settings import ProfileOverride, Settings
from hango.gateway.body import Bodies
from hango.gateway.history_rounds import HistoryRounds
from hango.gateway.identity import store_session_id
from hango.gateway.provider import serving
from hango.gateway.sessions import Branches, Placement
from hango.gateway.sse import encode
from hango.gateway.upstream import ClientGoneError, Exchange, Head, error_body
from hango.middleware.base import Assembly
from hango.store import Store
from hango.store.leases import LeasePolicy, SessionLeases, TurnLease
from hango.wiring.agent import lease_policy

log = logging.getLogger(__name__)

LoopFactory = Callable[[Settings], AgentLoop]
# Threads for the store work of turns in flight (an append, a lease tried early), per pool.
TURN_WRITERS = 64


@dataclass(frozen=True)
class Caller:
    """Who sent the request and which of its conversations it continues."""

    tenant: str
    session: str


class Loops:
    """One loop per model the clients use, on the shared store; built on first use."""

    def __init__(self, settings: Settings, build: LoopFactory, window: int | None) -> None:
        self.settings = settings
        self._build = build
        self._window = window
        self._loops: dict[str, AgentLoop] = {}
        self._lock = threading.Lock()

    def for_model(self, model: str) -> AgentLoop:
        with self._lock:
            loop = self._loops.get(model)
            if loop is None:
                loop = self._loops[model] = self._build(self._settings_for(model))
            return loop

    def _settings_for(self, model: str) -> Settings:
        profiles = dict(self.settings.model_profiles)
        if self._window is not None:
            known = profiles.get(model)
            profiles[model] = (
                known.model_copy(update={"max_input_tokens": self._window})
                if known is not None
                else ProfileOverride(max_input_tokens=self._window)
            )
        # A copy, not a re-validation: secrets dump as asterisks.
        return self.settings.model_copy(update={"model": model, "model_profiles": profiles})


def fixed_part(raw: JsonObject) -> Request:
    """The client's request without its messages, as the pipeline measures it."""
    try:
        return Request.model_validate({**raw, "messages": ()})
    except ValidationError as error:
        problem = f"not a Messages API request: {error}"
        raise InvalidInputError(problem) from None


def parsed(messages: list[JsonObject], first_index: int) -> tuple[list[Message], list[bytes]]:
    """The new messages as wire types, and each one's part of a request body (the outgoing
    copy sends it, it does not serialize the message again); a clear 400 naming the first
    that is not a message the API accepts, or that no JSON body can carry (a lone
    surrogate: ``json.loads`` lets a client's ``"\\ud83d"`` escape through)."""
    result, parts = [], []
    for offset, raw in enumerate(messages):
        where = f"messages.{first_index + offset}"
        try:
            message = Message.model_validate(raw)
            parts.append(message_json(message))
        except ValidationError as error:
            raise InvalidInputError(f"{where}: not a message the API accepts: {error}") from None
        except PydanticSerializationError as error:
            raise InvalidInputError(f"{where}: cannot be sent as JSON ({error})") from None
        result.append(message)
    return result, parts


@dataclass(frozen=True)
class Turn:
    """One request as a turn: where its history goes, its new messages, who sent it."""

    placement: Placement
    new: list[Message]
    parts: list[bytes]  # each new message's part of a request body (``message_json``)
    caller: Caller
    exchange: Exchange


@dataclass
class Beside:
    """A turn's store work running while its request goes upstream: its run's row
    (:meth:`AgentLoop.begin_turn` with ``start_beside``) and its new messages
    (:meth:`AgentLoop.append_ahead`), when the branch is stored already.

    The client's first byte waits for it (:meth:`ready`, awaited by the exchange once
    upstream answers): an answer goes out only for a turn whose messages are stored. When
    the append fails, the upstream call is closed, the client gets an API error (500,
    nothing of the answer sent) and sends its request again; the turn is recorded failed
    with the state it began with (:meth:`PendingAppend.failed`), and the loop's memory of
    the session is dropped, so nothing stored is rewritten and nothing is lost quietly.
    """

    run: Future[int] | None = None
    append: PendingAppend | None = None
    stored: Future[list[StoredMessage]] | None = None

    def _futures(self) -> list[Future[Any]]:
        return [future for future in (self.run, self.stored) if future is not None]

    async def ready(self) -> None:
        if not all(future.done() for future in self._futures()):
            await anyio.to_thread.run_sync(wait, self._futures())
        for future in self._futures():
            future.result()

    def join(self) -> BaseException | None:
        """Wait for the work; its first error, if any failed."""
        errors = [future.exception() for future in self._futures()]
        if self.append is not None and self.stored is not None and self.stored.exception():
            self.append.failed()
        return next((error for error in errors if error is not None), None)


@dataclass(frozen=True)
class _Held:
    """A lease taken, its heartbeat running: ``holding`` is entered; exiting releases."""

    lease: TurnLease
    holding: AbstractContextManager[TurnLease]

    @contextmanager
    def continued(self) -> Iterator[TurnLease]:
        """The holding for the rest of the turn."""
        try:
            yield self.lease
        finally:
            self.holding.__exit__(None, None, None)


def _try_holding(leases: SessionLeases, session_id: str, policy: LeasePolicy) -> _Held | None:
    lease = leases.try_acquire(session_id, policy.ttl)
    if lease is None:
        return None
    holding = leases.holding(lease, policy)
    holding.__enter__()  # the heartbeat starts here, in this thread, not in the turn's
    return _Held(lease, holding)


class EarlyLease:
    """The lease of the branch a named session's request most likely continues, tried
    while the request's body is still arriving (the session is named in its headers).

    One attempt, no waiting: taken if the branch is free, else the turn waits for it as
    usual. The turn takes it over if it continues that branch (:meth:`take`); otherwise,
    and for a request that never becomes a turn, it is released (:meth:`discard`).
    """

    def __init__(self, session_id: str, tried: Future[_Held | None]) -> None:
        self.session_id = session_id
        self._tried: Future[_Held | None] | None = tried

    @property
    def pending(self) -> bool:
        """Neither taken over nor discarded yet."""
        return self._tried is not None

    def outcome(self) -> TurnLease | None:
        """The lease if the try took it (waiting for the try), still held here."""
        held = None if self._tried is None else self._tried.result()
        return None if held is None else held.lease

    def take(self, session_id: str) -> _Held | None:
        """The holding, if the lease was taken and is the one of ``session_id``; else None."""
        if self._tried is None or session_id != self.session_id:
            self.discard()
            return None
        held, self._tried = self._tried.result(), None
        return held

    def discard(self) -> None:
        tried, self._tried = self._tried, None
        held = None if tried is None or tried.exception() else tried.result()
        if held is not None:
            held.holding.__exit__(None, None, None)


class Gateway:
    """Runs client requests as turns; called in a worker thread per request."""

    def __init__(self, store: Store, loops: Loops, history: HistoryRounds | None = None) -> None:
        self.store = store
        self.loops = loops
        self.branches = Branches(store)
        # The history tool the gateway answers itself (hango.gateway.history_rounds).
        self.history = history
        self.bodies = Bodies()
        # Appends that run beside their turn's upstream call (StoredBeside), leases tried
        # while a body arrives (EarlyLease): one pool each, so neither waits for the other.
        self._writer = ThreadPoolExecutor(TURN_WRITERS, thread_name_prefix="hango-gw-append")
        self._early = ThreadPoolExecutor(TURN_WRITERS, thread_name_prefix="hango-gw-lease")
        self._leases = SessionLeases(store.engine)
        self._policy = lease_policy(loops.settings)

    def close(self) -> None:
        """Let the store work in flight finish, and end the threads that ran it."""
        self._early.shutdown()
        self._writer.shutdown()

    def early_lease(self, caller: Caller) -> EarlyLease | None:
        """Try the lease of the branch the session's latest request here continued."""
        session_id = self.branches.latest(caller_base(caller))
        if session_id is None:
            return None
        tried = self._early.submit(_try_holding, self._leases, session_id, self._policy)
        return EarlyLease(session_id, tried)

    def serve(self, exchange: Exchange, caller: Caller, early: EarlyLease | None = None) -> None:
        """Answer ``exchange`` (in this worker thread); the answer always ends."""
        try:
            with serving(exchange):
                self._turn(exchange, caller, early)
        except ClientGoneError:
            log.info("client disconnected; its upstream call was cancelled")
        except HangoError as error:
            self._refuse(exchange, error)
        except Exception as error:
            log.exception("gateway turn failed")
            self._refuse(exchange, error)
        finally:
            if early is not None:
                early.discard()
            anyio.from_thread.run_sync(exchange.end)

    def _turn(self, exchange: Exchange, caller: Caller, early: EarlyLease | None) -> None:
        raw = exchange.raw
        sent = raw.get("messages")
        if not isinstance(sent, list) or not isinstance(raw.get("model"), str):
            raise InvalidInputError("the body needs a model and a list of messages")
        if not set(map(type, sent)) <= {dict}:  # in C: a long history is checked every call
            odd = next(i for i, m in enumerate(sent) if not isinstance(m, dict))
            raise InvalidInputError(f"messages.{odd}: a message is an object")
        loop = self.loops.for_model(raw["model"])
        base = fixed_part(raw)
        held_early = early.outcome() if early is not None else None
        placement = self.branches.place(caller_base(caller), sent)
        new, parts = parsed(placement.new, len(sent) - len(placement.new))
        if not placement.stored:  # one write transaction fewer on a session's every call
            loop.store.ensure_session(placement.session_id, raw["model"])
        if placement.diverged_from is not None and placement.diverged_at is not None:
            loop.store.record_branch(
                placement.session_id, placement.diverged_from, placement.diverged_at
            )
        with self._lease(loop, placement.session_id, early) as lease:
            if lease is not held_early:  # taken after the placement: placed again under it
                placement = self._still_placed(caller, sent, placement)
            beside = Beside()
            if placement.stored:  # the run's row beside the call (Beside)
                ctx = loop.begin_turn(placement.session_id, self._writer.submit)
                beside.run = ctx.run_started
                exchange.ready = beside.ready
            else:
                ctx = loop.begin_turn(placement.session_id)
            ctx.lease, ctx.base = lease, base
            ctx.assembly = Assembly(system=base.system_blocks(), tools=base.tool_definitions())
            self._answer(loop, ctx, Turn(placement, new, parts, caller, exchange), beside)

    def _lease(
        self, loop: AgentLoop, session_id: str, early: EarlyLease | None
    ) -> AbstractContextManager[TurnLease]:
        """The branch's lease for the turn: the one taken early if it is this branch's."""
        assert loop.lease_policy is not None
        taken = early.take(session_id) if early is not None else None
        if taken is None:
            return loop.leases.held(session_id, loop.lease_policy)
        return taken.continued()

    def _still_placed(
        self, caller: Caller, sent: list[JsonObject], placement: Placement
    ) -> Placement:
        """Under the lease, what the branch holds now (another process may have appended)."""
        if self.branches.still_holds(placement):
            return placement
        again = self.branches.place(caller_base(caller), sent)
        if again.session_id != placement.session_id or len(again.new) != len(placement.new):
            raise SessionBusyError(
                f"session {placement.session_id} changed while this request waited for it; "
                "send the request again",
                session_id=placement.session_id,
            )
        return again

    def _append(self, loop: AgentLoop, ctx: TurnContext, turn: Turn, beside: Beside) -> None:
        """Store the request's new messages: beside the upstream call when the branch is
        stored and the loop's memory in step with it, else now."""
        placement = turn.placement
        ahead = placement.stored  # the memory may still not be in step: then None
        pending = loop.append_ahead(ctx, turn.new, turn.parts, placement.held) if ahead else None
        if pending is None:
            loop.append_many(ctx, turn.new)
            self.branches.appended(placement.session_id, placement.new)
            return
        beside.append, beside.stored = pending, self._writer.submit(pending.store)
        turn.exchange.ready = beside.ready

    def _answer(self, loop: AgentLoop, ctx: TurnContext, turn: Turn, beside: Beside) -> None:
        try:
            self._append(loop, ctx, turn, beside)
            if self.history is None:
                loop.call_model(ctx)
            else:
                with self.history.turn(loop, ctx, turn.caller.tenant):
                    loop.call_model(ctx)
            self._settle(beside, turn.placement, raising=True)
        except BaseException as exc:
            self._settle(beside, turn.placement, raising=False)
            loop.end_turn(ctx, status="failed", error=type(exc).__name__)
            raise
        loop.end_turn(ctx)

    def _settle(self, beside: Beside, placement: Placement, raising: bool) -> None:
        """Wait for the store work beside the call; the messages stored join the branch."""
        error = beside.join()
        if beside.stored is not None and beside.stored.exception() is None:
            self.branches.appended(placement.session_id, placement.new)
        if error is not None and raising:
            raise error

    def as_sent(self, raw: JsonObject, caller: Caller) -> JsonObject:
        """``raw`` with the messages hango would send now: for ``count_tokens``.

        After a compaction that is the summary message, the stored messages kept since and
        the request's new messages, and the history tool among the tools; before one (or on
        a new branch), the request itself.
        Nothing is stored or compacted by counting.
        """
        sent = raw.get("messages")
        if not isinstance(sent, list):
            return raw
        placement = self.branches.place(caller_base(caller), sent)
        if placement.diverged_from is not None or len(placement.new) == len(sent):
            return raw
        record = self.store.latest_state(placement.session_id).latest
        if record is None:
            return raw
        known = self.branches.known(placement.session_id)
        kept = known[record.kept_from_seq - 1 :]
        head = head_message(record).to_api()
        body = {**raw, "messages": [head, *kept, *placement.new]}
        if self.history is None or not isinstance(raw.get("model"), str):
            return body
        return self.history.as_sent(body, self.loops.for_model(raw["model"]))

    def _refuse(self, exchange: Exchange, error: Exception) -> None:
        status, kind = _status_of(error)
        message = f"hango gateway: {error}"
        if exchange.head_sent:
            if exchange.streaming:
                frame = {"type": "error", "error": {"type": kind, "message": message}}
                anyio.from_thread.run_sync(exchange.put, encode("error", frame))
            return
        head = Head(status, [(b"content-type", b"application/json")])
        anyio.from_thread.run_sync(exchange.put, head)
        anyio.from_thread.run_sync(exchange.put, error_body(status, kind, message))


def caller_base(caller: Caller) -> str:
    return store_session_id(caller.tenant, caller.session)


def _status_of(error: Exception) -> tuple[int, str]:
    if isinstance(error, InvalidInputError | InvalidRequestError):
        return 400, "invalid_request_error"
    if isinstance(error, SessionBusyError):
        return 429, "rate_limit_error"
    status = getattr(error, "status", None)
    if isinstance(status, int) and status == 400:
        return 400, "invalid_request_error"
    return 500, "api_error"
