"""The summarization middleware: keeps the outgoing request under the trigger.

It measures the whole outgoing request (``token_figure.py``). Over the trigger, or when
forced (overflow, the ``compact_conversation`` tool), it evicts the oldest atomic tool
groups: first offloads them to the history file (nothing leaves the request that was not
offloaded), then obtains the summary, builds ``[summary message] + kept``, validates it
and records the compaction in the run's private state. A request that fails validation
is never sent: mechanical truncation is used instead. The stored messages are never
touched; only the copy on its way to the provider changes.

Ahead of the trigger, when the pace says so (``pacing.py``), the summary a compaction at
the trigger will need is dispatched without waiting (``presummary.py``); at the trigger,
one that still matches and fits is installed at once. The rungs that change the copy are
in ``compacting.py`` and ``truncating.py``, what they evict in ``evicted.py``; this module
decides when each runs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from functools import partial

from hango.compaction.boundary import keep_boundary
from hango.compaction.groups import group_starts
from hango.compaction.jobs import HistoryOffloader, Summarizer
from hango.compaction.record import CompactionReason
from hango.compaction.validate import validate_messages
from hango.core.messages import Message, Response
from hango.core.profiles import ModelProfile
from hango.middleware.base import Handler, ModelCall, PassThrough
from hango.middleware.compacting import Compacting, Plan
from hango.middleware.observer import LoopObserver, NullObserver
from hango.middleware.pacing import Clock, Pacer, Timed
from hango.middleware.presummary import Presummaries
from hango.middleware.summary_route import SummaryRouter
from hango.middleware.token_figure import TokenFigure
from hango.providers.base import Provider
from hango.tokens.base import Estimator

log = logging.getLogger(__name__)


class SummarizationMiddleware(Compacting, PassThrough):
    def __init__(
        self,
        *,
        profile: ModelProfile,
        estimator: Estimator,
        counter: Provider,
        count_timeout: float,
        summarizer: Summarizer,
        offloader: HistoryOffloader,
        observer: LoopObserver | None = None,
        count_band: float = 0.10,
        presummarize_frac: float | None = None,
        presummarize_pace: bool = True,
        clock: Clock = time.monotonic,
        summary_seconds: float | None = None,
        router: SummaryRouter,
    ) -> None:
        self.profile = profile
        self.router = router
        self.estimator = estimator
        self.pacer = Pacer(
            watermark=_watermark(profile, presummarize_frac),
            adaptive=presummarize_pace,
            clock=clock,
            summary_seconds=summary_seconds,
        )
        # Timed: each summary's latency, per summarizer model, feeds the pace's start rule.
        self.summarizer = Timed(summarizer, self.pacer)
        self.offloader = offloader
        self.observer = observer or NullObserver()
        self.validator = validate_messages
        self.figure = TokenFigure(
            profile=profile,
            estimator=estimator,
            counter=counter,
            count_timeout=count_timeout,
            observer=self.observer,
            count_band=count_band,
        )
        self.presummaries = Presummaries(
            profile=profile,
            estimator=estimator,
            estimate=self.figure.estimate,
            work=self._summary,
            pacer=self.pacer,
            router=self.router,
        )

    def wrap(self, call: ModelCall, call_next: Handler) -> Response:
        tokens = self.figure.measure(call)
        call.state.input_tokens = tokens
        reason = self._reason(call, tokens)
        self.pacer.observe(call.session_id, tokens)
        if reason is None and self._presummary_due(call, tokens):
            boundary = partial(self._boundary, call.request.messages, call.first_real)
            self.presummaries.dispatch(call, tokens, boundary)
        outgoing = call if reason is None else self._compacted(call, reason, tokens)
        self.pacer.sent(call.session_id, outgoing.state.input_tokens)
        response = call_next(outgoing)
        self.figure.learn(outgoing, response)
        return response

    def _compacted(self, call: ModelCall, reason: CompactionReason, tokens: int) -> ModelCall:
        compacted = self._compact(call, reason, tokens)
        if reason != "truncate" and compacted.state.input_tokens > self.profile.max_input_tokens:
            # A summary that still leaves the request over the window would only earn a
            # refusal: truncate now instead of after a wasted round trip.
            compacted = self._truncate(compacted, compacted.state.input_tokens)
        return compacted

    def _reason(self, call: ModelCall, tokens: int) -> CompactionReason | None:
        summarized_this_turn = any(
            record.at_turn == call.turn and record.reason != "truncate"
            for record in call.run_state.compactions
        )
        if call.force == "truncate":
            return "truncate"
        if call.force == "overflow":
            # One summary per (session, turn): a second overflow in a turn that already
            # summarized goes straight to mechanical truncation.
            return "truncate" if summarized_this_turn else "overflow"
        if summarized_this_turn:
            # The turn's one summary is spent; a request measured over the window would
            # only be refused, so it goes straight to mechanical truncation.
            return "truncate" if tokens > self.profile.max_input_tokens else None
        if call.force == "tool":
            return "tool"
        return "threshold" if tokens > self.profile.trigger_tokens else None

    def _compact(self, call: ModelCall, reason: CompactionReason, tokens: int) -> ModelCall:
        if reason == "truncate":
            return self._truncate(call, tokens)
        plan = self._plan(call)
        if plan is None and reason == "tool":
            # The model asked for it, but everything left is kept verbatim: the request is
            # void, not pending (its tool result already said so when the loop could tell).
            call.state.force(None)
            log.info("session %s turn %d: nothing to compact yet", call.session_id, call.turn)
            return call
        if plan is None:
            log.warning(
                "session %s turn %d: over the trigger but nothing can be evicted",
                call.session_id,
                call.turn,
            )
            return self._truncate(call, tokens) if reason == "overflow" else call
        return self._summarize(call, reason, tokens, plan)

    def _plan(self, call: ModelCall) -> Plan | None:
        """The keep boundary: the raw keep window moved back to a group start. It keeps at
        least ``keep_frac`` of the messages, as documented, and never moves forward to reach
        a token target: a kept part still over the window is truncated (``_compacted``)."""
        starts = group_starts(call.request.messages)
        boundary = self._boundary(call.request.messages, call.first_real, starts=starts)
        # The boundary is one of the group starts, so there is a newest one.
        return None if boundary is None else Plan(boundary=boundary, newest_start=starts[-1])

    def _boundary(
        self,
        messages: Sequence[Message],
        first_real: int,
        ahead: int = 0,
        starts: Sequence[int] | None = None,
    ) -> int | None:
        # ``ahead``: messages still to come before the cut (a pre-summary's plan for the
        # trigger); the trigger keeps its share of them too, and they are all kept.
        keep = len(messages) - self.profile.kept_from(len(messages), first_real, ahead)
        return keep_boundary(messages, keep, min_index=first_real + 1, starts=starts)

    def can_evict(self, messages: Sequence[Message], *, head_present: bool) -> bool:
        """The ``compact_conversation`` tool asks this (:class:`CanCompact`) before promising a
        compaction: one that cannot be honoured is answered in its result, not left pending."""
        return self._boundary(messages, 1 if head_present else 0) is not None

    def _presummary_due(self, call: ModelCall, tokens: int) -> bool:
        summarizer = self.profile.summarizer_model or call.request.model
        return self.pacer.due(call.session_id, tokens, self.profile.trigger_tokens, summarizer)


def _watermark(profile: ModelProfile, frac: float | None) -> int | None:
    """Input tokens past which pre-summaries are dispatched; ``None`` when off."""
    if frac is None or frac >= profile.trigger_frac:
        return None
    return int(profile.max_input_tokens * frac + 1e-6)
