"""Atomic tool groups: where a list of messages may be cut.

A compacted request is ``[head user message] + kept``, so a cut falls on an assistant
message; an assistant message's calls and the user message answering them go together.
Under strict alternation every assistant message starts a group, but the rule is written
for any list: an assistant index ``i`` is a cut point only when no ``tool_result`` at or
after ``i`` answers a ``tool_use`` before ``i``. So even a malformed run such as
``AI(call a), AI(call b), results(a, b)`` (langchain#38352) is never cut between the two
calls, where a backward search over id intersections would leave an orphan result.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate

from hango.core.messages import Message, ToolResultBlock, ToolUseBlock


def _forbidden_cuts(messages: Sequence[Message]) -> list[bool]:
    """``forbidden[i]`` is true when cutting before message ``i`` splits a use from its result."""
    # Difference array over cut positions: a tool_result at r answering a tool_use at u < r
    # forbids every cut in u+1 .. r.
    depth = [0] * (len(messages) + 1)
    used_at: dict[str, int] = {}
    for index, message in enumerate(messages):
        # One pass over the blocks (a history of 10,000 messages is walked on every
        # compaction); a use and a result of one message never pair (``use_index < index``).
        for block in () if isinstance(message.content, str) else message.content:
            if isinstance(block, ToolResultBlock):
                use_index = used_at.get(block.tool_use_id)
                if use_index is not None and use_index < index:
                    depth[use_index + 1] += 1
                    depth[index + 1] -= 1
            elif isinstance(block, ToolUseBlock):
                # The first occurrence anchors the id; a duplicate is the validator's business.
                used_at.setdefault(block.id, index)
    return [open_spans > 0 for open_spans in accumulate(depth[: len(messages)])]


def group_starts(messages: Sequence[Message]) -> list[int]:
    """Indices where a keep boundary may fall, ascending: assistant messages no
    tool_use/tool_result pair straddles (0 too, when the list opens with one)."""
    forbidden = _forbidden_cuts(messages)
    return [
        index
        for index, message in enumerate(messages)
        if message.role == "assistant" and not forbidden[index]
    ]
