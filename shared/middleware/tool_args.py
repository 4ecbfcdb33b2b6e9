"""The tool-argument truncation middleware: the cheapest of the three mechanisms.

Large tool inputs and tool results in old messages are cut to a preview plus a size note
on the outgoing copy (the pure work is :func:`hango.compaction.tool_args.truncate_tool_args`).
Often this alone keeps a session under the trigger, and it never touches the stored
messages.

Every change to an early message of the sent copy invalidates the provider's prompt
cache from that message on, so truncation moves in steps, never call by call:

* the decision is one sequence number in the run state (``truncated_before_seq``):
  every message before it is sent truncated, on every later call, for good (sticky);
* it moves forward to the start of the keep window only once the request is past half
  the compaction trigger, and only when the messages it would newly cover clear at least
  ``clear_at_least`` tokens (capped at a tenth of the trigger), like the API's own
  context editing (``trigger`` and ``clear_at_least``).

A step changes the sent copy from the first newly truncated message on; the call says
where (``ModelCall.changed_from``), so the prompt-cache middleware can still read
everything before it. A session pays one cache write of the rest of the conversation
per step instead of one on every call whose keep window slid past a large tool block,
and while the window has room, truncation (which saves little next to a cache read at
a tenth of the price) does not happen at all.
"""

from __future__ import annotations

from hango.compaction.tool_args import TruncationLedger, TruncationMemo
from hango.core.identity import RecentlyUsed
from hango.core.messages import Response
from hango.core.profiles import ModelProfile
from hango.middleware.base import Handler, ModelCall, PassThrough
from hango.middleware.observer import LoopObserver, NullObserver
from hango.tokens.base import Estimator
from hango.tokens.measure import RequestEstimate

DEFAULT_CLEAR_AT_LEAST = 10_000
"""Tokens a truncation step must clear (``HANGO_TOOL_ARG_CLEAR_AT_LEAST``)."""

STEP_ABOVE_TRIGGER_FRAC = 0.5
"""Below this share of the compaction trigger, truncation never takes a step."""


class ToolArgTruncationMiddleware(PassThrough):
    """Sticky, batched truncation of old tool blocks, paying per call only for what changed.

    Per session it keeps a :class:`TruncationLedger` (what truncation makes of each
    outgoing position, with running sums of the blocks cut and tokens saved); the request
    estimate is a :class:`RequestEstimate`, a running total along the copies' lineage. So
    deciding on a step and building the truncated copy cost O(appended) plus O(log n),
    not a pass over the history.
    """

    def __init__(
        self,
        *,
        profile: ModelProfile,
        estimator: Estimator,
        max_tokens: int,
        clear_at_least: int = DEFAULT_CLEAR_AT_LEAST,
        observer: LoopObserver | None = None,
    ) -> None:
        self.profile = profile
        self.estimator = estimator
        self.max_tokens = max_tokens
        self.clear_at_least = clear_at_least
        self.observer = observer or NullObserver()
        self.memo = TruncationMemo()
        self.estimate = RequestEstimate(estimator)
        self._ledgers: RecentlyUsed[TruncationLedger] = RecentlyUsed()

    def wrap(self, call: ModelCall, call_next: Handler) -> Response:
        ledger = self._ledgers.get(call.session_id, self._new_ledger)
        previous = call.state.state.truncated_before_seq
        before_seq = self._step(call, ledger)
        cut = call.index_of_seq(before_seq)
        if cut <= _first_stored(call):
            # Below the cut lies at most the summary message, which has no tool blocks: the
            # copy goes out as it is. The ledger serves positions below a cut only; it
            # catches up with the copies when there is one.
            return call_next(call)
        ledger.update(call.request.messages)
        result = ledger.truncated(cut)
        if result.truncated == 0:
            return call_next(call)
        self.observer.tool_args_truncated(call.session_id, call.turn, result.truncated)
        request = call.request.model_copy(update={"messages": result.messages})
        changed = call.index_of_seq(previous) if before_seq > previous else call.changed_from
        return call_next(call.evolve(request=request, changed_from=changed))

    def _new_ledger(self) -> TruncationLedger:
        return TruncationLedger(
            max_tokens=self.max_tokens, estimator=self.estimator, memo=self.memo
        )

    def _step(self, call: ModelCall, ledger: TruncationLedger) -> int:
        """The sequence number truncation covers up to, moved forward if this call earns it."""
        current = call.state.state.truncated_before_seq
        messages = call.request.messages
        first_real = _first_stored(call)
        protect_from = len(messages) - self.profile.keep_count(len(messages) - first_real)
        target = _seq_from(call, max(first_real, protect_from))
        if target is None or target <= current:
            return current
        start = call.index_of_seq(current)
        if not self._worth_it(call, ledger, start, max(first_real, protect_from)):
            return current
        call.state.truncate_before(target)
        return target

    def _worth_it(self, call: ModelCall, ledger: TruncationLedger, start: int, end: int) -> bool:
        """Whether covering ``messages[start:end]`` clears enough, and the request is large.

        Over the trigger a step that clears too little is not taken either: the session
        has run out of cheap room, and one compaction (one cache write) beats a small
        step (a cache write too) on every call from now on.
        """
        # The cheapest condition first: the running request estimate answers in O(change),
        # while the first look at a range (a restarted process) truncates every message in
        # it. The three conditions are independent, so the order does not change the answer.
        trigger = self.profile.trigger_tokens
        if self.estimate(call.request) <= trigger * STEP_ABOVE_TRIGGER_FRAC:
            return False
        ledger.update(call.request.messages)
        if not ledger.blocks_cut(start, end):
            return False
        return ledger.tokens_saved(start, end) >= min(self.clear_at_least, trigger // 10)


def _first_stored(call: ModelCall) -> int:
    """The position of the first stored message (after the summary message, if any)."""
    return 1 if call.summary_message_present else 0


def _seq_from(call: ModelCall, index: int) -> int | None:
    """The sequence number of the first stored message at or after ``index``."""
    seqs = call.seqs
    for position in range(max(index, 0), len(seqs)):
        seq = seqs[position]
        if seq is not None:
            return seq  # only the summary message (first) has none: at most one step
    return None
