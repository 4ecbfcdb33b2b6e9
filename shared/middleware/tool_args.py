"""The tool-argument truncation middleware: the cheapest of the three mechanisms.

Before anything is counted, large tool inputs and tool results in messages older than
the keep window are cut to a preview plus a size note on the outgoing copy (the pure
work is :func:`shared.compaction.tool_args.truncate_tool_args`). Often this alone keeps a
session under the trigger, and it never touches the stored messages.
"""

from __future__ import annotations

from shared.compaction.tool_args import TruncationMemo, truncate_tool_args
from shared.core.messages import Response
from shared.core.profiles import ModelProfile
from shared.middleware.base import Handler, ModelCall, PassThrough
from shared.middleware.observer import LoopObserver, NullObserver
from shared.tokens.base import Estimator


class ToolArgTruncationMiddleware(PassThrough):
    def __init__(
        self,
        *,
        profile: ModelProfile,
        estimator: Estimator,
        max_tokens: int,
        observer: LoopObserver | None = None,
    ) -> None:
        self.profile = profile
        self.estimator = estimator
        self.max_tokens = max_tokens
        self.observer = observer or NullObserver()
        self.memo = TruncationMemo()

    def wrap(self, call: ModelCall, call_next: Handler) -> Response:
        messages = call.request.messages
        first_real = 1 if call.summary_message_present else 0
        keep = self.profile.keep_count(len(messages) - first_real)
        result = truncate_tool_args(
            messages,
            protect_from=max(first_real, len(messages) - keep),
            max_tokens=self.max_tokens,
            estimator=self.estimator,
            memo=self.memo,
        )
        if result.truncated == 0:
            return call_next(call)
        self.observer.tool_args_truncated(call.session_id, call.turn, result.truncated)
        request = call.request.model_copy(update={"messages": result.messages})
        return call_next(call.evolve(request=request))
