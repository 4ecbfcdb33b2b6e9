"""The tool-argument truncation middleware: the cheapest of the three mechanisms.

Large tool inputs and tool results in old messages are cut to a preview plus a size note
on the outgoing copy (:func:`hango.compaction.tool_args.truncate_tool_args`); often this
alone keeps a session under the trigger, and it never touches the stored messages.

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

from collections.abc import Sequence

from hango.compaction.tool_args import Truncation, truncate_tool_args
from hango.core.messages import Message, Response
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
    """Sticky, batched truncation of old tool blocks, paying per call only for what changed:
    the session's outgoing copy (``call.copy``) keeps each position's truncated form and
    running sums of what truncation saves (``outgoing.py``); messages it did not make are
    truncated by the plain function."""

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
        self.truncation = Truncation(max_tokens=max_tokens, estimator=estimator)
        self.estimate = RequestEstimate(estimator)

    def wrap(self, call: ModelCall, call_next: Handler) -> Response:
        previous = call.run_state.truncated_before_seq
        before_seq = self._step(call)
        cut = call.index_of_seq(before_seq)
        # Below a cut at the first stored message lies at most the summary message, which
        # has no tool blocks: nothing is truncated.
        messages, count = self._truncated(call, cut if cut > call.first_real else 0)
        if count:
            self.observer.tool_args_truncated(call.session_id, call.turn, count)
        if messages is call.request.messages:
            return call_next(call)
        request = call.request.model_copy(update={"messages": messages})
        changed = call.index_of_seq(previous) if before_seq > previous else call.changed_from
        return call_next(call.evolve(request=request, changed_from=changed))

    def _truncated(self, call: ModelCall, cut: int) -> tuple[Sequence[Message], int]:
        """The messages with everything below ``cut`` truncated, and the blocks cut."""
        copy = call.copy
        if copy is not None and copy.made(call.request.messages):
            messages = copy.truncate_below(cut, self.truncation)
            return messages, copy.truncation_gain(0, cut, self.truncation)[0] if cut else 0
        result = truncate_tool_args(
            call.request.messages,
            protect_from=cut,
            max_tokens=self.max_tokens,
            estimator=self.estimator,
        )
        return result.messages, result.truncated

    def _step(self, call: ModelCall) -> int:
        """The sequence number truncation covers up to, moved forward if this call earns it."""
        current = call.run_state.truncated_before_seq
        count, first_real = len(call.request.messages), call.first_real
        protect_from = max(first_real, self.profile.kept_from(count, first_real))
        # The first stored message of the window (the summary message lies below it).
        target = call.seqs[protect_from] if protect_from < len(call.seqs) else None
        if target is None or target <= current:
            return current
        if not self._worth_it(call, call.index_of_seq(current), protect_from):
            return current
        call.state.truncate_before(target)
        return target

    def _worth_it(self, call: ModelCall, start: int, end: int) -> bool:
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
        blocks, saved = self._gain(call, start, end)
        return blocks > 0 and saved >= min(self.clear_at_least, trigger // 10)

    def _gain(self, call: ModelCall, start: int, end: int) -> tuple[int, int]:
        """Blocks truncation would cut in ``messages[start:end]`` and the tokens it saves."""
        copy = call.copy
        if copy is not None and copy.made(call.request.messages):
            return copy.truncation_gain(start, end, self.truncation)
        truncate, estimate = self.truncation, self.truncation.estimator.estimate_message
        worked = [truncate(m, estimate(m)) for m in call.request.messages[start:end]]
        return sum(w[1] for w in worked), sum(w[2] for w in worked)
