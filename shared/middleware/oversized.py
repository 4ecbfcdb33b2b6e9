"""The last rung for a newest tool group over the window by itself: previews in the copy.

Used by :class:`~hango.middleware.truncating.Truncating` when no cut can bring the
request under the window (a parallel batch stored before batches were bounded): the
group's tool inputs and results go out cut to a head, a tail and a size note, with
budgets halving until the request fits. The store keeps them whole.
"""

from __future__ import annotations

from collections.abc import Iterator

from hango.compaction.tool_args import DEFAULT_PREVIEW_CHARS, truncate_tool_args
from hango.core.messages import Request
from hango.tokens.base import Estimator

# The budgets per tool block halve down to this size, then only size notes are left.
MIN_PREVIEW_TOKENS = 100


def shrinking(window: int) -> Iterator[int]:
    """Per-block token budgets for the last rung, from a tenth of the window down."""
    per_block = max(window // 10, 1)
    while per_block >= MIN_PREVIEW_TOKENS:
        yield per_block
        per_block //= 2
    yield 0


def tool_blocks_cut(request: Request, per_block: int, estimator: Estimator) -> Request:
    """The request with every tool input and result over ``per_block`` tokens cut."""
    preview = DEFAULT_PREVIEW_CHARS if per_block >= MIN_PREVIEW_TOKENS else 0
    cut = truncate_tool_args(
        request.messages,
        protect_from=len(request.messages),
        max_tokens=per_block,
        estimator=estimator,
        preview_chars=preview,
    )
    return request.model_copy(update={"messages": tuple(cut.messages)})
