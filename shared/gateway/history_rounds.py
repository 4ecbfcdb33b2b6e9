"""The history tool, offered and answered by the gateway itself.

After a compaction the evicted messages are out of the request, and the client's agent
cannot read hango's store. So on a compacted session the gateway adds the history tool
(:mod:`hango.tools.history`) to the request, and when the model calls it, answers it:

1. the request goes upstream with the tool's definition after the client's tools (named
   ``session_history``, or ``hango_session_history…`` when the client has a tool of that
   name: the client's tool wins);
2. an answer that calls *only* the history tool is an internal round: the gateway runs
   each call (:meth:`HistoryTool.answer` over this session of this tenant), appends the
   model's message and the results to the request, and calls upstream again; at most
   ``gateway_history_rounds`` internal rounds per client request, after which the model's
   text so far ends the answer;
3. an answer that calls the client's own tools too goes to the client with the history
   calls taken out (the client runs its tools; the model may search again next turn);
4. the client receives one message (:mod:`hango.gateway.splice`): every round's blocks
   but the tool's calls, renumbered; the stop reason of the last round (``end_turn`` when
   it called only the history tool: the client has no call to answer); usage with the
   last round's input figures (what the model read for the answer the client got) and
   the output of every round.

Nothing of an internal round is stored as a message (the client never sends it back, and
the store keeps the client's transcript); it is in the session record as usage (every
round is added to the session's usage sums) and in telemetry: an INFO line on this
module's logger and a ``hango.gateway.history_round`` event on the current span, per
round. A client disconnect during a round cancels its upstream call; a later round that
overflows the window ends the answer with what the client has, one that fails otherwise
ends it with an ``error`` event (streaming) or the API's error (not streaming).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import anyio.from_thread
from opentelemetry import trace

from hango.agent.loop import AgentLoop, TurnContext
from hango.core.errors import ContextOverflowError, ProviderError, ToolInputError
from hango.core.messages import (
    JsonObject,
    Message,
    Request,
    Response,
    StoredMessage,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    message_json,
)
from hango.gateway.history_offer import (
    ending_of,
    fitted,
    for_loop,
    internal_round_follows,
    offered_name,
    offers,
    room,
    with_tool,
)
from hango.gateway.provider import GatewayProvider, current_exchange
from hango.gateway.splice import Splice
from hango.gateway.upstream import ClientGoneError, Exchange, fields_frame, framed
from hango.store import Store
from hango.tools.history import HistoryScope, HistoryTool
from hango.tools.history_calls import split_history_calls

log = logging.getLogger(__name__)

EVENT_HISTORY_ROUND = "hango.gateway.history_round"


@dataclass
class Plan:
    """One client request's offer of the tool, and what its internal rounds cost."""

    tool: HistoryTool
    scope: HistoryScope
    rounds: int
    compacted: Callable[[], bool]
    window: int | None = None
    extra_usage: list[Usage] = field(default_factory=list)
    calls: int = 0

    def offered(self, raw: Mapping[str, Any]) -> bool:
        return offers(self.rounds, raw) and self.compacted()


_PLAN: ContextVar[Plan | None] = ContextVar("hango_gateway_history_plan", default=None)


class TenantTranscripts:
    """The store as the tool's source, for the scopes a request of their tenant is serving.

    The gateway's session ids are derived from the tenant, and a scope is only ever made
    for the session of the request being served; this source checks it besides.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self._serving: Counter[HistoryScope] = Counter()
        self._lock = threading.Lock()

    @contextmanager
    def serving(self, scope: HistoryScope) -> Iterator[None]:
        with self._lock:
            self._serving[scope] += 1
        try:
            yield
        finally:
            with self._lock:
                self._serving[scope] -= 1
                if self._serving[scope] <= 0:
                    del self._serving[scope]

    def messages(
        self, scope: HistoryScope, from_seq: int | None = None, to_seq: int | None = None
    ) -> list[StoredMessage]:
        with self._lock:
            served = scope.tenant is not None and scope in self._serving
        if not served:
            raise ToolInputError(f"session {scope.session_id} is not this tenant's session")
        return self.store.messages(scope.session_id, from_seq, to_seq)


class HistoryRounds:
    """The gateway's history tool: one per gateway, shared by its requests."""

    def __init__(self, store: Store, rounds: int, page_chars: int) -> None:
        self.source = TenantTranscripts(store)
        self.tool = HistoryTool(self.source, page_chars=page_chars)
        self.rounds = rounds
        self._rounds_of: dict[int, tuple[int, int]] = {}

    def allow(self, loop: AgentLoop, rounds: int, window: int) -> None:
        """``loop`` may offer the tool for up to ``rounds`` internal rounds (0: never), its
        results fitting its model's ``window``."""
        self._rounds_of[id(loop)] = (rounds, window)

    def as_sent(self, body: JsonObject, loop: AgentLoop) -> JsonObject:
        """``body`` (a compacted request) with the tool, when ``loop`` would offer it."""
        rounds, _ = self._rounds_of.get(id(loop), (self.rounds, None))
        return with_tool(body, offered_name(body.get("tools"))) if offers(rounds, body) else body

    @contextmanager
    def turn(self, loop: AgentLoop, ctx: TurnContext, tenant: str) -> Iterator[None]:
        """The model calls of ``ctx`` (in this thread) may be answered with the tool."""
        scope = HistoryScope(ctx.session_id, tenant)
        rounds, window = self._rounds_of.get(id(loop), (self.rounds, None))

        def compacted() -> bool:
            return ctx.holder.state.latest is not None

        plan = Plan(self.tool, scope, rounds, compacted, window)
        token = _PLAN.set(plan)
        try:
            with self.source.serving(scope):
                yield
        finally:
            _PLAN.reset(token)
            for usage in plan.extra_usage:  # the session record counts every round
                ctx.usage = ctx.usage.plus(usage, loop.price)
            ctx.model_calls += len(plan.extra_usage)
            ctx.tool_calls += plan.calls


class HistoryAnswering:
    """The gateway's provider: the client's upstream call, with the tool answered inside."""

    name = "anthropic"

    def __init__(self, inner: GatewayProvider) -> None:
        self.inner = inner
        self.capabilities = inner.capabilities

    def complete(self, request: Request) -> Response:
        plan = _PLAN.get()
        exchange = current_exchange()
        if plan is None or exchange is None or not plan.offered(exchange.raw):
            return self.inner.complete(request)
        return Rounds(plan, exchange).run(request)


@dataclass
class Rounds:
    """One client request answered through as many upstream calls as the tool needs."""

    plan: Plan
    exchange: Exchange

    def run(self, request: Request) -> Response:
        exchange = self.exchange
        name = offered_name(exchange.raw.get("tools"))
        raw = with_tool(exchange.raw, name)
        splice = Splice(name, exchange.streaming, exchange.put, lambda: exchange.head_sent)
        exchange.splice = splice
        try:
            responses = self._rounds(raw, request, splice, name)
        finally:
            exchange.splice = None
        ending = ending_of(responses, name)
        anyio.from_thread.run_sync(splice.finish, ending)
        self.plan.extra_usage.extend(r.usage for r in responses[1:])
        return for_loop(responses, name, ending)

    def _rounds(
        self, raw: JsonObject, request: Request, splice: Splice, name: str
    ) -> list[Response]:
        # The request's messages as the provider's kept parts, each round's two added at
        # the end: a round serializes only what it adds, not the history again.
        parts, frame = request.messages_parts(), fields_frame(raw)
        responses: list[Response] = []
        while True:
            body = framed(frame, parts)
            outcome = anyio.from_thread.run(self.exchange.forward, body)
            if isinstance(outcome, ProviderError):
                if responses and isinstance(outcome, ContextOverflowError):
                    log.warning("%s: an internal round overflowed: %s", self.where, outcome)
                    return responses  # the client keeps what it has
                raise _after(responses, outcome)
            responses.append(outcome)
            if not internal_round_follows(outcome, name, len(responses) - 1, self.plan.rounds):
                return responses
            calls = split_history_calls(outcome.content, name).history
            results = self._answered(calls, len(responses), room(outcome, self.plan.window))
            parts[-1:] = [message_json(outcome.as_message()), message_json(results), b"]"]
            splice.next_round()

    def _answered(self, calls: tuple[Any, ...], round_number: int, room: int | None) -> Message:
        outcomes = []
        for call in calls:
            assert isinstance(call, ToolUseBlock)
            outcomes.append(self.plan.tool.answer(call.input, self.plan.scope))
        outcomes = fitted(outcomes, room)
        results = []
        for call, outcome in zip(calls, outcomes, strict=True):
            error = {"is_error": True} if outcome.is_error else {}
            results.append(ToolResultBlock(tool_use_id=call.id, content=outcome.content, **error))
            self._observe(round_number, call, outcome.is_error)
        self.plan.calls += len(calls)
        return Message(role="user", content=tuple(results))

    def _observe(self, round_number: int, call: ToolUseBlock, failed: bool) -> None:
        command = str(call.input.get("command"))
        log.info(
            "%s: internal round %d answered %s %s%s",
            self.where, round_number, call.name, command, " (an error)" if failed else "",
        )  # fmt: skip
        attributes: dict[str, str | int] = {
            "hango.round": round_number,
            "hango.history.command": command,
        }
        trace.get_current_span().add_event(EVENT_HISTORY_ROUND, attributes)

    @property
    def where(self) -> str:
        return f"session {self.plan.scope.session_id}"


def _after(responses: list[Response], error: ProviderError) -> ProviderError:
    """The error to raise: a later round's overflow must not send the loop's ladder to
    build the request again (the client's answer has begun)."""
    if not responses or isinstance(error, ClientGoneError):
        return error
    return ProviderError(f"internal round {len(responses)}: {error}", status=error.status)
