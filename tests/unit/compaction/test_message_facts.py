"""The checker's one-pass facts of a message equal what the rules read of it one by one."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hango.compaction.validate import (
    _facts,
    _leading_result_ids,
    _message_breakpoints,
    _text_problem,
    _texts,
)
from hango.core.messages import (
    CacheControl,
    ContentBlock,
    ImageBlock,
    Message,
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


@given(messages)
@settings(deadline=None, max_examples=examples(200))
def test_one_pass_facts_equal_the_rules_reading(message: Message) -> None:
    facts = _facts(message)
    assert facts.role == message.role
    assert facts.uses == tuple(use.id for use in message.tool_uses())
    assert facts.results == tuple(block.tool_use_id for block in message.tool_results())
    assert facts.leading == frozenset(_leading_result_ids(message))
    assert facts.empty == (not message.content)
    assert facts.bad_text == any(_text_problem(text) is not None for text in _texts(message))
    assert facts.breakpoints == _message_breakpoints(message)
