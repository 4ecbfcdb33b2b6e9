"""The outgoing copy is made sendable; the stored messages are left as they are."""

from __future__ import annotations

from shared.compaction.repair import EMPTY_PLACEHOLDER, MISSING_RESULT, sendable
from shared.compaction.validate import validate_messages
from shared.core.messages import CacheControl, Message, TextBlock, ToolResultBlock, ToolUseBlock
from shared.queue.keys import JobKey

MARK = CacheControl(type="ephemeral")


def call(tool_id: str) -> ToolUseBlock:
    return ToolUseBlock(id=tool_id, name="ls", input={"path": "/"})


def test_valid_messages_come_back_as_the_same_objects() -> None:
    messages = (
        Message(role="user", content="hi"),
        Message(role="assistant", content=(call("t1"),)),
        Message(role="user", content=(ToolResultBlock(tool_use_id="t1", content="a.py"),)),
    )
    repaired = sendable(messages)
    assert all(a is b for a, b in zip(repaired, messages, strict=True))


def test_empty_content_gets_a_placeholder_and_empty_text_is_dropped() -> None:
    messages = (
        Message(role="user", content=(TextBlock(text=" "), TextBlock(text="go"))),
        Message(role="assistant", content=()),
        Message(role="user", content=""),
    )
    repaired = sendable(messages)
    assert repaired[0].blocks() == (TextBlock(text="go"),)
    assert repaired[1].text() == EMPTY_PLACEHOLDER == repaired[2].text()
    assert validate_messages(repaired) == []
    assert messages[1].content == ()


def test_results_answer_exactly_the_previous_calls_in_order_and_first() -> None:
    messages = (
        Message(role="user", content="go"),
        Message(role="assistant", content=(call("t1"), call("t2"))),
        Message(
            role="user",
            content=(
                TextBlock(text="also this"),
                ToolResultBlock(tool_use_id="t2", content="b"),
                ToolResultBlock(tool_use_id="t2", content="b again"),
                ToolResultBlock(tool_use_id="stale", content="x"),
            ),
        ),
    )
    last = sendable(messages)[2].blocks()
    assert [type(b).__name__ for b in last] == ["ToolResultBlock", "ToolResultBlock", "TextBlock"]
    first, second = last[0], last[1]
    assert isinstance(first, ToolResultBlock) and first.tool_use_id == "t1"
    assert first.is_error and first.content == MISSING_RESULT
    assert isinstance(second, ToolResultBlock) and second.content == "b"
    assert validate_messages(sendable(messages)) == []


def test_cache_markers_on_messages_are_removed_without_leaving_null_keys() -> None:
    nested = ToolResultBlock(
        tool_use_id="t1", content=(TextBlock(text="r", cache_control=MARK),), cache_control=MARK
    )
    messages = (
        Message(role="user", content=(TextBlock(text="hi", cache_control=MARK),)),
        Message(role="assistant", content=(call("t1"),)),
        Message(role="user", content=(nested,)),
    )
    dumped = str([m.to_api() for m in sendable(messages)])
    assert "cache_control" not in dumped


def test_offload_jobs_of_one_turn_are_told_apart_by_their_range() -> None:
    first = JobKey("offload", "s1", 7, (1, 40))
    second = JobKey("offload", "s1", 7, (41, 60))
    assert first.result != second.result and "1-40" in first.result
    assert JobKey("summary", "s1", 7).result == "hango:summary:{s1}:7:result"
