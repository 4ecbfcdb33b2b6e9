"""The keep boundary: the index from which messages are kept verbatim.

The compacted request is ``[head] + messages[boundary:]``. The boundary is always a group
start (:mod:`hango.compaction.groups`), so the kept part opens with an assistant message
right after the user-role head and carries every tool_use together with its tool_result.
The raw boundary is moved *back* when it is not a group start: keeping a few more messages
is always safe, keeping fewer could split a batch.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

from hango.compaction.groups import group_starts
from hango.core.messages import Message


def keep_boundary(
    messages: Sequence[Message],
    keep_count: int,
    *,
    min_index: int = 1,
    starts: Sequence[int] | None = None,
) -> int | None:
    """The largest group start in ``[min_index, len(messages) - keep_count]``, or ``None``
    (nothing can be evicted).

    ``min_index`` is 1 by default, so the opening user message of a stored history is never
    the first kept message; a previous compaction's boundary only ever moves forward.
    ``starts``: ``group_starts(messages)`` when the caller has it.
    """
    if keep_count < 0:
        raise ValueError(f"keep_count must be >= 0, got {keep_count}")
    if min_index < 0:
        raise ValueError(f"min_index must be >= 0, got {min_index}")
    raw = len(messages) - keep_count
    starts = group_starts(messages) if starts is None else starts
    # Every start is < len(messages), so a kept part is never empty.
    position = bisect_right(starts, raw) - 1
    return None if position < 0 or starts[position] < min_index else starts[position]
