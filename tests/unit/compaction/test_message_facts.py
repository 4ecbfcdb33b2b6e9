"""The outgoing copy's running breakpoint count, with marks placed on its view, reads what
the full count reads in the same messages."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hango.compaction.outgoing import OutgoingCopy
from hango.compaction.validate import count_breakpoints
from hango.core.messages import (
    CacheControl,
    ContentBlock,
    ImageBlock,
    Message,
    Request,
    StoredMessage,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from tests.properties import examples

MARK = CacheControl()
IMAGE = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}

PARTS = (
    TextBlock(text="part"),
    TextBlock(text=" "),
    TextBlock(text="marked part", cache_control=MARK),
    ImageBlock(source=IMAGE),
    ImageBlock(source=IMAGE, cache_control=MARK),
)
BLOCKS: tuple[ContentBlock, ...] = (
    TextBlock(text="hello"),
    TextBlock(text=""),
    TextBlock(text="\n\t"),
    TextBlock(text="marked", cache_control=MARK),
    ImageBlock(source=IMAGE),
    ToolUseBlock(id="toolu_a", name="bash", input={"n": 1}),
    ToolUseBlock(id="toolu_b", name="bash", input={}, cache_control=MARK),
    ToolResultBlock(tool_use_id="toolu_a", content="done"),
    ToolResultBlock(tool_use_id="toolu_b", content="", is_error=True, cache_control=MARK),
    ToolResultBlock(tool_use_id="toolu_c"),
)

results_with_parts = st.builds(
    lambda n, parts: ToolResultBlock(tool_use_id=f"toolu_{n}", content=tuple(parts)),
    st.integers(min_value=0, max_value=3),
    st.lists(st.sampled_from(PARTS), max_size=4),
)
blocks = st.lists(st.one_of(st.sampled_from(BLOCKS), results_with_parts), max_size=6)
messages = st.one_of(
    st.builds(Message, role=st.sampled_from(["user", "assistant"]), content=blocks.map(tuple)),
    st.builds(
        Message,
        role=st.sampled_from(["user", "assistant"]),
        content=st.sampled_from(["text", "", "  "]),
    ),
)


@given(messages, messages)
@settings(deadline=None, max_examples=examples(200))
def test_the_counted_breakpoints_equal_what_the_request_holds(
    first: Message, second: Message
) -> None:
    copy = OutgoingCopy()
    stored = [
        StoredMessage(seq=1, turn=1, message=Message(role="user", content="go")),
        StoredMessage(seq=2, turn=1, message=Message(role="assistant", content="ok")),
    ]
    view, _ = copy.update(stored)
    unmarked = Request(model="m", max_tokens=1, messages=()).model_copy(update={"messages": view})
    request = unmarked.with_marks({0: first}).with_marks({1: second})
    plain = Request(model="m", max_tokens=1, messages=(first, second))
    assert request.messages.live() and request.messages is view  # type: ignore[attr-defined]
    assert count_breakpoints(request) == count_breakpoints(plain)
