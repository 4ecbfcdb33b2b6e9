"""The outgoing copy is made sendable; the stored messages are left as they are."""

from __future__ import annotations

from hango.compaction.outgoing import OutgoingCopy
from hango.compaction.repair import EMPTY_PLACEHOLDER, MISSING_RESULT
from hango.compaction.validate import validate_messages
from hango.core.messages import (
    CacheControl,
    Message,
    StoredMessage,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from hango.queue.keys import JobKey
from tests.outgoing_reference import merge_consecutive, sendable

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


# -- a reused tool_use id (issue 14, defect 10) --------------------------------------------


def _reused_id_transcript() -> tuple[Message, ...]:
    return (
        Message(role="user", content="first"),
        Message(role="assistant", content=(call("toolu_1"),)),
        Message(role="user", content=(ToolResultBlock(tool_use_id="toolu_1", content="a"),)),
        Message(role="assistant", content=(TextBlock(text="done"),)),
        Message(role="user", content="again"),
        Message(role="assistant", content=(call("toolu_1"), call("toolu_1_2"), call("toolu_1"))),
        Message(
            role="user",
            content=(
                ToolResultBlock(tool_use_id="toolu_1", content="b"),
                ToolResultBlock(tool_use_id="toolu_1_2", content="c"),
                ToolResultBlock(tool_use_id="toolu_1", content="d"),
            ),
        ),
    )


def test_a_reused_tool_use_id_is_made_unique_in_the_sent_copy() -> None:
    messages = _reused_id_transcript()
    assert validate_messages(messages), "the transcript must be invalid as stored"
    repaired = sendable(messages)
    assert validate_messages(repaired) == []
    ids = [use.id for m in repaired for use in m.tool_uses()]
    assert len(ids) == len(set(ids)) == 4
    assert ids[0] == "toolu_1"
    answers = [(r.tool_use_id, r.content) for r in repaired[6].tool_results()]
    assert answers == list(zip(ids[1:], ["b", "c", "d"], strict=True))
    assert next(messages[5].tool_uses()).id == "toolu_1"  # the stored message is untouched
    assert sendable(messages) == repaired  # the same bytes on every call


def test_the_incremental_copy_makes_reused_ids_unique_like_the_whole_one() -> None:
    messages = _reused_id_transcript()
    stored = [StoredMessage(seq=i + 1, turn=1, message=m) for i, m in enumerate(messages)]
    copy = OutgoingCopy()
    for end in range(1, len(stored) + 1):
        grown, _ = copy.update(stored[:end])
        assert grown == sendable(messages[:end])


def test_a_head_read_back_from_the_store_does_not_restart_the_copy() -> None:
    """A new turn reads its compaction record back, so its head is a new, equal object:
    the copy goes on (the same objects, a lineage step), not rebuilt from scratch."""
    head = Message(role="user", content="[summary of messages 1-4]")
    messages = _reused_id_transcript()
    stored = [StoredMessage(seq=i + 1, turn=1, message=m) for i, m in enumerate(messages)]
    copy = OutgoingCopy()
    first, seqs = copy.update(stored, head, 1)  # kept from the first assistant message
    again = Message.model_validate(head.to_api())
    assert again == head and again is not head
    reply = Message(role="assistant", content="next")
    grown = [*stored, StoredMessage(seq=len(stored) + 1, turn=2, message=reply)]
    second, _ = copy.update(grown, again, 1)
    assert second[0] is head
    assert all(a is b for a, b in zip(first, second, strict=False))
    assert second == (head, *sendable(merge_consecutive(grown[1:])[0]))
    assert tuple(seqs) == (None, *(m.seq for m in stored[1:]))
    different = Message(role="user", content="[another summary]")
    third, _ = copy.update(grown, different, 1)
    assert third[0] is different  # another record: the copy starts over
