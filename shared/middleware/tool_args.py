"""The tool-argument truncation middleware: the cheapest of the three mechanisms.

Large tool inputs and tool results in old messages are cut to a preview plus a size note
on the outgoing copy (the pure work is :func:`shared.compaction.tool_args.truncate_tool_args`).
Often this alone keeps a session under the trigger, and it never touches the stored
messages.

Every change to an early message of the sent copy invalidates the provider's prompt
cache from that message on, so truncation moves in steps, never call by call:

* the decision is one sequence number in the run state (``truncated_before_seq``):
  every message before it is sent truncated, on every later call, for good (sticky);
* it moves forward to the start of the keep window only when the messages it would newly
  cover clear at least ``clear_at_least`` tokens (like the API's own ``clear_at_least``),
  or when the request is over the trigger (a truncation is cheaper than a compaction).

So a session pays one cache write of the conversation after each step instead of one on
every call whose keep window slid past a large tool block.
"""

from __future__ import annotations

from shared.compaction.tool_args import TruncationMemo, truncate_tool_args
from shared.core.messages import Message, Response
from shared.core.profiles import ModelProfile
from shared.middleware.base import Handler, ModelCall, PassThrough
from shared.middleware.observer import LoopObserver, NullObserver
from shared.tokens.base import Estimator

DEFAULT_CLEAR_AT_LEAST = 10_000
"""Tokens a truncation step must clear (``HANGO_TOOL_ARG_CLEAR_AT_LEAST``)."""


class ToolArgTruncationMiddleware(PassThrough):
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

    def wrap(self, call: ModelCall, call_next: Handler) -> Response:
        before_seq = self._step(call)
        cut = _index_of_seq(call, before_seq)
        result = truncate_tool_args(
            call.request.messages,
            protect_from=cut,
            max_tokens=self.max_tokens,
            estimator=self.estimator,
            memo=self.memo,
        )
        if result.truncated == 0:
            return call_next(call)
        self.observer.tool_args_truncated(call.session_id, call.turn, result.truncated)
        request = call.request.model_copy(update={"messages": result.messages})
        return call_next(call.evolve(request=request))

    def _step(self, call: ModelCall) -> int:
        """The sequence number truncation covers up to, moved forward if this call earns it."""
        current = call.state.state.truncated_before_seq
        messages = call.request.messages
        first_real = 1 if call.summary_message_present else 0
        protect_from = len(messages) - self.profile.keep_count(len(messages) - first_real)
        target = _seq_from(call, max(first_real, protect_from))
        if target is None or target <= current:
            return current
        start = _index_of_seq(call, current)
        if not self._worth_it(call, messages, start, max(first_real, protect_from)):
            return current
        call.state.truncate_before(target)
        return target

    def _worth_it(
        self, call: ModelCall, messages: tuple[Message, ...], start: int, end: int
    ) -> bool:
        """Whether covering ``messages[start:end]`` clears enough, or the request needs it."""
        pending = messages[start:end]
        cut = truncate_tool_args(
            pending,
            protect_from=len(pending),
            max_tokens=self.max_tokens,
            estimator=self.estimator,
            memo=self.memo,
        )
        if not cut.changed:
            return False
        estimate = self.estimator.estimate_message
        saved = sum(estimate(a) - estimate(b) for a, b in zip(pending, cut.messages, strict=True))
        if saved >= self.clear_at_least:
            return True
        return self.estimator.estimate_request(call.request) > self.profile.trigger_tokens


def _seq_from(call: ModelCall, index: int) -> int | None:
    """The sequence number of the first stored message at or after ``index``."""
    return next((seq for seq in call.seqs[index:] if seq is not None), None)


def _index_of_seq(call: ModelCall, seq: int) -> int:
    """The index of the first outgoing message at or after sequence number ``seq``."""
    return next((n for n, s in enumerate(call.seqs) if s is not None and s >= seq), len(call.seqs))
