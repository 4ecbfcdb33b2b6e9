"""The agent loop: runs turns for a session.

A turn appends the user message, calls the model through the middleware chain, executes
the tools it asks for, appends their results and repeats until the model ends its turn.
Messages are persisted as they are appended and never rewritten; the compaction record
lives in the run's private state. Two things happen only here:

* the overflow ladder — overflow → forced compaction and one retry; a second overflow →
  mechanical truncation and one more retry; only a third failure fails the run;
* the session counters, written exactly once per turn at the turn boundary (with the
  real usage the provider reported for the turn's calls: cache reads and writes, uncached
  input, output and the input cost at the model's price).
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from operator import attrgetter

from hango.compaction.head import head_message
from hango.compaction.outgoing import OutgoingCopy
from hango.compaction.record import CompactionReason, CompactionRecord, RunState
from hango.core.api_rules import message_problem, tool_use_problem
from hango.core.errors import ContextOverflowError, InvalidInputError, InvalidRequestError
from hango.core.identity import IdentityCache, RecentlyUsed
from hango.core.messages import (
    Message,
    Request,
    Response,
    StoredMessage,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    summed_usage,
)
from hango.core.price import Price
from hango.core.profiles import FALLBACK_PRICE
from hango.cost.meter import UsageTotals
from hango.middleware.base import (
    Assembly,
    BatchHook,
    CanCompact,
    Middleware,
    ModelCall,
    Overflow,
    StateHolder,
    ToolResultHook,
)
from hango.middleware.chain import assemble, run_chain
from hango.middleware.observer import LoopObserver, NullObserver
from hango.providers.base import Provider
from hango.store import MessageEstimate, Store
from hango.store.leases import LeasePolicy, SessionLeases, TurnLease
from hango.tokens.base import Estimator, KeepsEstimates
from hango.tools.builtin import NOTHING_TO_COMPACT, ToolRegistry, calling_session

log = logging.getLogger(__name__)

# The overflow ladder (see the module docstring): the first call, then its two retries.
_LADDER: tuple[CompactionReason | None, ...] = (None, "overflow", "truncate")


@dataclass(frozen=True)
class TurnResult:
    session_id: str
    turn: int
    response: Response | None
    model_calls: int
    compactions: tuple[CompactionRecord, ...]
    input_tokens: int
    tool_calls: int
    # The summarizer's usage in this turn, apart from the agent's (None: no model summary).
    summarizer_usage: Usage | None = None
    # The provider's real usage over the turn's model calls, priced.
    usage: UsageTotals = field(default_factory=UsageTotals)


@dataclass(frozen=True)
class InputLimit:
    """The largest user message the loop stores: one that could never be sent is refused."""

    tokens: int
    estimator: Estimator


@dataclass
class SessionMemory:
    """One session's stored messages (the very objects, so their estimates stay remembered)
    and the outgoing copy built from them, kept from call to call."""

    copy: OutgoingCopy
    transcript: list[StoredMessage] = field(default_factory=list)
    # The last ``seq`` dropped from the front of ``transcript`` (0: none). Every request
    # starts at the latest compaction's kept part, so what lies before it is not held:
    # memory stays bounded by the window, not the session (what needs older messages,
    # the summaries and the history, has them from the call or reads the store).
    dropped: int = 0

    @property
    def last_seq(self) -> int:
        """The newest ``seq`` memory has seen (0: none)."""
        return self.transcript[-1].seq if self.transcript else self.dropped

    def drop(self, count: int) -> int:
        """Drop the first ``count`` messages, never the newest; how many were dropped."""
        count = min(count, len(self.transcript) - 1)
        if count <= 0:
            return 0
        self.dropped = self.transcript[count - 1].seq
        del self.transcript[:count]
        return count


# One loop may serve many sessions for as long as its process lives: it remembers only the
# most recently used ones (a forgotten one is read back from the store on its next turn).
SESSIONS_REMEMBERED = 256


@dataclass
class TurnContext:
    """Everything one turn accumulates; owned by the loop."""

    session_id: str
    turn: int
    run_id: int
    holder: StateHolder
    model_calls: int = 0
    tool_calls: int = 0
    input_tokens: int = 0
    last_response: Response | None = None
    # The turn's hold on its session: every append is fenced by it (None: not leased).
    lease: TurnLease | None = None
    usage: UsageTotals = field(default_factory=UsageTotals)
    # The loop's memory of the session, held for the whole turn.
    memory: SessionMemory = field(default_factory=lambda: SessionMemory(OutgoingCopy()))
    # Whether the memory's transcript holds every stored message: read from the store
    # once per turn, then kept in step by the turn's own appends.
    in_step: bool = False
    # The run's row being written beside the turn (``begin_turn`` with ``start_beside``):
    # ``run_id`` is known once it is done (:meth:`AgentLoop.run_id`).
    run_started: Future[int] | None = None
    # The turn's fixed part (all but the messages) and its assembly when the caller brings
    # its own (the gateway: each client request carries it); None: the loop's own.
    base: Request | None = None
    assembly: Assembly | None = None


@dataclass
class PendingAppend:
    """The store's half of :meth:`AgentLoop.append_ahead`: run once, in any thread."""

    loop: AgentLoop
    ctx: TurnContext
    rows: list[tuple[Message, MessageEstimate | None]]
    expected: list[StoredMessage]
    # The turn's state before its first call: what a turn whose append failed keeps.
    initial: RunState

    def store(self) -> list[StoredMessage]:
        """Append the batch; on any failure the memory that ran ahead is dropped."""
        ctx = self.ctx
        try:
            self.loop.run_id(ctx)  # the turn's run first: no message of a turn without one
            stored = self.loop.store.append_messages(ctx.session_id, ctx.turn, self.rows, ctx.lease)
            if [item.seq for item in stored] != [item.seq for item in self.expected]:
                raise RuntimeError(
                    f"session {ctx.session_id}: the batch was stored from seq "
                    f"{stored[0].seq}, not {self.expected[0].seq} as the turn expected"
                )
        except BaseException:
            self.loop.forget(ctx.session_id)
            raise
        return stored

    def failed(self) -> None:
        """The append failed: the turn keeps the state it began with (a compaction made
        meanwhile may count messages the store does not have)."""
        self.ctx.holder = StateHolder(self.initial)


class AgentLoop:
    def __init__(
        self,
        *,
        store: Store,
        provider: Provider,
        chain: Sequence[Middleware],
        tools: ToolRegistry,
        tool_result_hooks: Sequence[ToolResultHook] = (),
        compaction: CanCompact | None = None,
        model: str,
        max_tokens: int = 8192,
        observer: LoopObserver | None = None,
        max_tool_rounds: int = 50,
        system_prompt: Sequence[TextBlock] = (),
        input_limit: InputLimit | None = None,
        lease_policy: LeasePolicy | None = None,
        price: Price = FALLBACK_PRICE,
        estimator: Estimator | None = None,
    ) -> None:
        self.store = store
        self.price = price  # what the session counters charge for real usage
        # The estimator whose per-message figures are stored with each message and counted
        # with on a restart (None, or one that cannot keep estimates: nothing is stored).
        self.estimates: KeepsEstimates | None = (
            estimator if isinstance(estimator, KeepsEstimates) else None
        )
        self.estimator = estimator  # whose figures the outgoing copies keep per message
        self.provider = provider
        # One turn at a time per session, across processes and hosts (None: not enforced,
        # for callers that serialize turns themselves).
        self.lease_policy = lease_policy
        self.leases = SessionLeases(store.engine)
        self.chain = tuple(chain)
        self.tools = tools
        # Each tool result passes through these, in order, before it is stored.
        self.tool_result_hooks = tuple(tool_result_hooks)
        # Asked before a compaction is promised (None: none is ever refused).
        self.compaction = compaction
        self.model = model
        self.max_tokens = max_tokens
        self.observer = observer or NullObserver()
        self.max_tool_rounds = max_tool_rounds
        self.input_limit = input_limit
        prompt = tuple(block for block in system_prompt if block.text.strip())
        self.assembly: Assembly = assemble(self.chain, Assembly(system=prompt))
        self._memory: RecentlyUsed[SessionMemory] = RecentlyUsed(SESSIONS_REMEMBERED)
        self._heads: IdentityCache[CompactionRecord, Message] = IdentityCache()
        # An empty part is an absent key, never "system": null.
        fixed = {"system": self.assembly.system, "tools": self.assembly.tools}
        fixed = {key: part for key, part in fixed.items() if part}
        self._base = Request(model=model, max_tokens=max_tokens, messages=(), **fixed)

    # -- a whole turn -------------------------------------------------------------------

    def run_turn(self, session_id: str, user_input: str | Message) -> TurnResult:
        """One turn, after any turn another process runs on the session (``SessionBusyError``
        when that wait runs out)."""
        message = self._user_message(user_input)
        with self._holding(session_id) as lease:
            if lease is not None:
                # Holding the lease, a run still "running" is one whose process died.
                self._resume_unfinished(session_id, lease)
            ctx = self.begin_turn(session_id)
            ctx.lease = lease
            return self._closing(ctx, partial(self._answer, message))

    @contextmanager
    def _holding(self, session_id: str) -> Iterator[TurnLease | None]:
        if self.lease_policy is None:
            yield None
            return
        self.store.ensure_session(session_id, self.model)
        with self.leases.held(session_id, self.lease_policy) as lease:
            yield lease

    def resume(self, session_id: str) -> TurnResult | None:
        """Finish the session's unfinished turn (its process died), if it has one: same turn,
        run and state, so the same job keys (a summary it dispatched is reused)."""
        with self._holding(session_id) as lease:
            return self._resume_unfinished(session_id, lease)

    def _answer(self, message: Message, ctx: TurnContext) -> None:
        self._close_unanswered_results(ctx)
        self.append(ctx, message)
        self._converse(ctx)

    def _closing(self, ctx: TurnContext, work: Callable[[TurnContext], None]) -> TurnResult:
        """Run ``work`` as the turn, then close it: completed, or failed with its error."""
        with self.observer.turn(ctx.session_id, ctx.turn):
            try:
                work(ctx)
            except BaseException as exc:
                self.end_turn(ctx, status="failed", error=f"{type(exc).__name__}: {exc}")
                raise
            return self.end_turn(ctx)

    def _resume_unfinished(self, session_id: str, lease: TurnLease | None) -> TurnResult | None:
        run = self.store.latest_run(session_id)
        if run is None or run.status != "running":
            return None
        session = self.store.session(session_id)
        ctx = TurnContext(
            session_id=session_id,
            turn=run.turn,
            run_id=run.id,
            holder=StateHolder(run.state),
            input_tokens=session.last_input_tokens if session else 0,
            lease=lease,
            memory=self._memory.get(session_id, self._new_memory),
        )
        log.warning("session %s: resuming turn %d, left unfinished", session_id, run.turn)
        return self._closing(ctx, self._finish_interrupted)

    def _finish_interrupted(self, ctx: TurnContext) -> None:
        """Continue the turn from what it stored: answer it, or close it if it was answered.
        Tool calls stored without results are not run again (their side effects may have
        happened): an error result says so, and the model decides whether to call again."""
        own = [m for m in self._transcript(ctx) if m.turn == ctx.turn]
        if not own:
            return  # the process died before the user's message was stored
        last = own[-1].message
        if last.role == "assistant":
            uses = list(last.tool_uses())
            if not uses:
                return  # the answer is stored; only closing the turn was missing
            results = tuple(
                ToolResultBlock(tool_use_id=use.id, content=INTERRUPTED_TOOL, is_error=True)
                for use in uses
            )
            self.append(ctx, Message(role="user", content=results))
        self._converse(ctx)

    def _close_unanswered_results(self, ctx: TurnContext) -> None:
        """After a turn that failed on tool results, an assistant message closes them.

        Joined onto those results in the outgoing copy, the new user message would make
        one tool group of the old batch and every later question: never evictable, and
        too large for good once the batch is. Stored, the notice keeps them apart.
        """
        transcript = self._transcript(ctx)
        if transcript and any(transcript[-1].message.tool_results()):
            self.append(ctx, Message(role="assistant", content=(TextBlock(text=UNANSWERED),)))

    def _converse(self, ctx: TurnContext) -> None:
        for _ in range(self.max_tool_rounds):
            response = self.call_model(ctx)
            _refuse_unusable(response)
            self.append(ctx, response.as_message())
            uses = response.tool_uses()
            if not uses:
                return
            results = tuple(self.execute_tool(ctx, use) for use in uses)
            results = self.stored_batch(results, ctx.session_id)
            self.append(ctx, Message(role="user", content=results))
        log.warning(
            "session %s turn %d: stopped after %d tool rounds",
            ctx.session_id,
            ctx.turn,
            self.max_tool_rounds,
        )

    def _user_message(self, user_input: str | Message) -> Message:
        """The user's message, refused before it is stored if it could never be sent."""
        message = (
            user_input
            if isinstance(user_input, Message)
            else Message(role="user", content=(TextBlock(text=user_input),))
        )
        if message.role != "user":
            raise InvalidInputError(f"a turn starts with a user message, not {message.role!r}")
        if not message.text().strip() and not any(message.tool_results()):
            raise InvalidInputError("the user message is empty: nothing was stored")
        problem = message_problem(message)
        if problem is not None:
            raise InvalidInputError(f"the user message's {problem}; nothing was stored")
        if self.input_limit is not None:
            tokens = self.input_limit.estimator.estimate_message(message)
            if tokens > self.input_limit.tokens:
                raise InvalidInputError(
                    f"the user message is about {tokens:,} tokens, more than half of the "
                    f"model's window ({2 * self.input_limit.tokens:,}); nothing was stored. "
                    "Write it to a file with the file tools and refer to the path instead"
                )
        return message

    def execute_tool(self, ctx: TurnContext, use: ToolUseBlock) -> ToolResultBlock:
        """Run one tool call of the model (a built-in or a registered one) as ``run_turn``
        does: as the turn's session, its large result offloaded, its compaction scheduled."""
        ctx.tool_calls += 1
        with calling_session(ctx.session_id):
            outcome = self.tools.execute(use)
        if outcome.force_compaction is not None:
            if not self._can_compact(ctx):
                return ToolResultBlock(tool_use_id=use.id, content=NOTHING_TO_COMPACT)
            ctx.holder.force("tool")
            self._save_state(ctx)
        content = self.stored_result(use.id, outcome.content, ctx.session_id)
        if outcome.is_error:
            return ToolResultBlock(tool_use_id=use.id, content=content, is_error=True)
        return ToolResultBlock(tool_use_id=use.id, content=content)

    def _can_compact(self, ctx: TurnContext) -> bool:
        """Whether the next call could evict anything, counting the results about to come
        (not stored yet: a stand-in user message is all the keep boundary looks at)."""
        if self.compaction is None:
            return True
        call = self._outgoing(ctx, None, None)
        pending = Message(role="user", content="(tool results of this batch)")
        messages = (*call.request.messages, pending)
        return self.compaction.can_evict(messages, head_present=call.first_real > 0)

    def stored_result(self, tool_use_id: str, content: str, session_id: str) -> str:
        """What is stored of a tool's result: ``content`` after every tool-result hook."""
        for hook in self.tool_result_hooks:
            content = hook.tool_result(tool_use_id, content, session_id=session_id)
        return content

    def stored_batch(
        self, results: tuple[ToolResultBlock, ...], session_id: str
    ) -> tuple[ToolResultBlock, ...]:
        """What is stored of a parallel batch: its results after every hook that bounds a
        whole batch (the filesystem middleware offloads the largest of an oversized one)."""
        for hook in self.tool_result_hooks:
            if isinstance(hook, BatchHook):
                results = hook.fit_batch(results, session_id=session_id)
        return results

    def _new_memory(self) -> SessionMemory:
        return SessionMemory(OutgoingCopy(self.estimator))

    # -- the lower-level API (also used by `hango replay`) ------------------------------

    def begin_turn(
        self, session_id: str, start_beside: Callable[..., Future[int]] | None = None
    ) -> TurnContext:
        """The turn's context, its run started; with ``start_beside`` (an executor's
        ``submit``) the run's row is written there while the turn goes on."""
        # Read first: a session that exists needs no write to ensure it (nothing deletes one).
        session = self.store.session(session_id)
        if session is None:
            self.store.ensure_session(session_id, self.model)
        turn = self.store.last_turn(session_id) + 1
        state = self.store.latest_state(session_id).next_turn()
        start = partial(self.store.start_run, session_id, turn, state)
        started = start_beside(start) if start_beside is not None else None
        return TurnContext(
            session_id=session_id,
            turn=turn,
            run_id=start() if started is None else 0,
            holder=StateHolder(state),
            # A turn whose every call fails keeps the last figure rather than writing 0.
            input_tokens=session.last_input_tokens if session else 0,
            memory=self._memory.get(session_id, self._new_memory),
            run_started=started,
        )

    def run_id(self, ctx: TurnContext) -> int:
        """The turn's run, waiting for its row if it is being written beside the turn."""
        if ctx.run_started is not None:
            ctx.run_id, ctx.run_started = ctx.run_started.result(), None
        return ctx.run_id

    def append(self, ctx: TurnContext, message: Message) -> StoredMessage:
        return self.append_many(ctx, [message])[0]

    def append_many(self, ctx: TurnContext, batch: Sequence[Message]) -> list[StoredMessage]:
        """Store ``batch`` in one transaction (a client re-sending its history appends many)."""
        stored = self.store.append_messages(ctx.session_id, ctx.turn, self._rows(batch), ctx.lease)
        if stored and ctx.memory.last_seq == stored[0].seq - 1:
            # In step with the store: keep the very same objects.
            ctx.memory.transcript.extend(stored)
        elif stored:
            ctx.in_step = False  # someone else appended too: read the store again
        return stored

    def append_ahead(
        self, ctx: TurnContext, batch: Sequence[Message], parts: Sequence[bytes], stored_last: int
    ) -> PendingAppend | None:
        """``append_many`` in two halves: ``batch`` (with each message's ``message_json``)
        joins the transcript now, so the request is built while :meth:`PendingAppend.store`
        runs beside it. Only for a caller holding the lease that knows the store's newest
        ``seq`` is ``stored_last``; None when the memory is not in step with that (then
        ``append_many``).
        """
        if not batch or ctx.memory.last_seq != stored_last:
            return None
        expected = [
            StoredMessage.as_stored(stored_last + 1 + offset, ctx.turn, message, part)
            for offset, (message, part) in enumerate(zip(batch, parts, strict=True))
        ]
        ctx.memory.transcript.extend(expected)
        ctx.in_step = True  # the store has nothing past stored_last (the lease holds it)
        return PendingAppend(self, ctx, self._rows(batch), expected, ctx.holder.state)

    def forget(self, session_id: str) -> None:
        """Drop what memory holds of the session: its next turn reads the store."""
        self._memory.discard(session_id)

    def _rows(self, batch: Sequence[Message]) -> list[tuple[Message, MessageEstimate | None]]:
        """Each message with the figure stored beside it (none: no estimator keeps them)."""
        keeps = self.estimates
        if keeps is None:
            return [(message, None) for message in batch]
        return [(m, MessageEstimate(keeps.signature, keeps.estimate_message(m))) for m in batch]

    def call_model(self, ctx: TurnContext) -> Response:
        """One model call through the chain, walking the overflow ladder if needed."""
        overflow: ContextOverflowError | None = None
        for rung in _LADDER:
            if overflow is not None:
                self.observer.overflow_retry(ctx.session_id, ctx.turn, rung or "none")
            call = self._outgoing(ctx, rung, overflow)
            try:
                response = run_chain(self.chain, call, partial(self._send, ctx))
            except ContextOverflowError as exc:
                overflow = exc
                log.warning(
                    "session %s turn %d: context overflow (%s)", ctx.session_id, ctx.turn, exc
                )
                continue
            finally:
                if ctx.holder.needs_saving():
                    self._save_state(ctx)
            ctx.last_response = response
            return response
        assert overflow is not None
        raise ContextOverflowError(
            f"session {ctx.session_id} turn {ctx.turn}: the request still overflows the "
            f"model's window after compaction and mechanical truncation ({overflow}); "
            "the model's window may be smaller than its profile says (HANGO_MODEL_PROFILES)",
            tokens=overflow.tokens,
            maximum=overflow.maximum,
            status=overflow.status,
        )

    def end_turn(
        self, ctx: TurnContext, status: str = "completed", error: str | None = None
    ) -> TurnResult:
        """Close the turn: the session counters are written here, once."""
        state = ctx.holder.state
        self._save_state(ctx)
        # One transaction, retried once on a lost connection: idempotent (see close_turn).
        self.store.close_turn(
            self.run_id(ctx),
            ctx.session_id,
            status=status,
            error=error,
            last_input_tokens=ctx.input_tokens,
            compactions=state.compaction_count,
            usage=ctx.usage,
        )
        return TurnResult(
            session_id=ctx.session_id,
            turn=ctx.turn,
            response=ctx.last_response,
            model_calls=ctx.model_calls,
            compactions=state.compactions,
            input_tokens=ctx.input_tokens,
            tool_calls=ctx.tool_calls,
            summarizer_usage=summarizer_usage(state.compactions),
            usage=ctx.usage,
        )

    def _save_state(self, ctx: TurnContext) -> None:
        self.store.save_run_state(self.run_id(ctx), ctx.holder.settled())
        ctx.holder.saved()

    # -- building and sending one request -----------------------------------------------

    def _outgoing(
        self,
        ctx: TurnContext,
        rung: CompactionReason | None,
        overflow: ContextOverflowError | None,
    ) -> ModelCall:
        """The request as the record says: ``[head] + stored messages from kept_from_seq``."""
        record = ctx.holder.state.latest
        copy = ctx.memory.copy
        head = self._heads.get(record, head_message) if record is not None else None
        transcript, first = self._kept_part(ctx, record.kept_from_seq if record else 1)
        messages, seqs = copy.update(transcript, head, first)
        # The fixed part was validated once; only the messages change from call to call.
        base = ctx.base if ctx.base is not None else self._base
        request = base.model_copy(update={"messages": messages})
        # What the pipeline measured for the request that was refused: against the
        # provider's own figure it tells how far the measure undercounts.
        refused = None
        if overflow is not None:
            tokens, maximum = overflow.tokens or None, overflow.maximum or None
            refused = Overflow(ctx.holder.input_tokens, tokens, maximum)
        return ModelCall(
            session_id=ctx.session_id,
            turn=ctx.turn,
            request=request,
            seqs=seqs,
            state=ctx.holder,
            stored=copy.stored,
            force=rung or ctx.holder.state.force_compaction,
            assembly=ctx.assembly if ctx.assembly is not None else self.assembly,
            overflow=refused,
            copy=copy,
        )

    def _send(self, ctx: TurnContext, call: ModelCall) -> Response:
        """The end of the chain: the last guard, then the provider."""
        # The first check of a copy (or after a refusal) covers every message.
        violations = ctx.memory.copy.violations(call.request)
        if violations:
            # The pipeline validates what it builds, so this means the stored transcript
            # itself is broken; sending it would only earn a permanent 400.
            raise InvalidRequestError(
                "refusing to send an invalid request: " + "; ".join(v.detail for v in violations)
            )
        self.observer.request_sent(ctx.session_id, ctx.turn, call.request, call.state.input_tokens)
        ctx.model_calls += 1
        response = self.provider.complete(call.request)
        ctx.usage = ctx.usage.plus(response.usage, self.price)
        measured = response.usage.total_input_tokens()
        ctx.input_tokens = measured if measured > 0 else call.state.input_tokens
        self.observer.response_received(ctx.session_id, ctx.turn, response)
        return response

    def _kept_part(self, ctx: TurnContext, from_seq: int) -> tuple[list[StoredMessage], int]:
        """The session's messages in memory and the index of ``from_seq`` among them,
        after dropping those before it (see :class:`SessionMemory`)."""
        memory = ctx.memory
        if from_seq <= memory.dropped:
            # An older state than the one memory was trimmed for (a turn whose append
            # failed keeps the state it began with): read the messages back.
            memory.transcript.clear()
            memory.dropped = from_seq - 1
            ctx.in_step = False
        transcript = self._transcript(ctx)
        first = bisect.bisect_left(transcript, from_seq, key=attrgetter("seq"))
        return transcript, first - memory.drop(first)

    def _transcript(self, ctx: TurnContext) -> list[StoredMessage]:
        """The session's stored messages, kept in memory and topped up from the store (see
        ``TurnContext.in_step``; the lease fences out anyone else's appends): the same
        objects across calls keep the estimator's cache warm, a call costs O(new messages)."""
        cached = ctx.memory.transcript
        if ctx.in_step:
            return cached
        # Each carries the estimate stored with it, which the copy counts with (seqs from 1).
        cached.extend(self.store.messages(ctx.session_id, from_seq=ctx.memory.last_seq + 1))
        ctx.in_step = True
        return cached


def _refuse_unusable(response: Response) -> None:
    """A reply the API would refuse when sent back (a tool input nested past the limit,
    an id, a name or a number outside its rules) could be neither stored nor sent again:
    the turn fails with what and where, before anything of the reply is stored."""
    for use in response.tool_uses():
        problem = tool_use_problem(use)
        if problem is not None:
            raise InvalidInputError(
                f"the model's {problem}; nothing of this reply was stored, the session is unchanged"
            )


def summarizer_usage(records: Sequence[CompactionRecord]) -> Usage | None:
    """The summarizer's usage over ``records``, added up; ``None`` when none reported any."""
    return summed_usage(*(record.summary_usage for record in records))


UNANSWERED = "[no reply: the previous turn ended before the model answered these tool results]"

INTERRUPTED_TOOL = (
    "not run: the process running this turn stopped before this tool's result was stored; "
    "call it again if it is still needed"
)
