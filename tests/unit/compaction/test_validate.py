"""The validator reproduces the Messages API's structural 400 texts, and never raises."""

from __future__ import annotations

import dataclasses

import pytest

from hango.compaction.validate import (
    Violation,
    format_violations,
    validate_messages,
    validate_request,
)
from hango.core.messages import ImageBlock, Message, TextBlock
from tests.histories import (
    TINY_PNG,
    HistoryBuilder,
    assistant,
    call,
    calls,
    request_of,
    result,
    results,
    user,
)


def test_a_valid_history_has_no_violations() -> None:
    messages = HistoryBuilder().user("go").batch(3, errors=[1]).say("done").user("ok").build()
    assert validate_messages(messages) == []
    assert validate_request(request_of(messages)) == []


def test_missing_tool_result_reproduces_the_api_text() -> None:
    messages = (
        user("go"),
        assistant("thinking"),
        user("and?"),
        calls(call("toolu_x")),
        user("I never ran it"),
    )
    assert validate_messages(messages) == [
        Violation(
            "missing_tool_result",
            3,
            "messages.3: `tool_use` ids were found without `tool_result` blocks immediately "
            "after: toolu_x. Each `tool_use` block must have a corresponding `tool_result` "
            "block in the next message.",
        )
    ]


def test_missing_results_of_a_parallel_batch_are_listed_together() -> None:
    messages = (
        user("go"),
        calls(call("toolu_a"), call("toolu_b"), call("toolu_c")),
        results(result("toolu_b")),
    )
    [violation] = validate_messages(messages)
    assert violation.kind == "missing_tool_result"
    assert "immediately after: toolu_a, toolu_c. Each" in violation.detail


def test_a_trailing_tool_use_has_no_result() -> None:
    [violation] = validate_messages((user("go"), calls(call("toolu_end"))))
    assert violation == Violation(
        "missing_tool_result",
        1,
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately "
        "after: toolu_end. Each `tool_use` block must have a corresponding `tool_result` "
        "block in the next message.",
    )


def test_orphan_tool_result_reproduces_the_api_text_with_block_index() -> None:
    messages = (
        user("go"),
        calls(call("toolu_a")),
        results(result("toolu_a"), result("toolu_y")),
    )
    assert validate_messages(messages) == [
        Violation(
            "orphan_tool_result",
            2,
            "messages.2.content.1: unexpected `tool_use_id` found in `tool_result` blocks: "
            "toolu_y. Each `tool_result` block must have a corresponding `tool_use` block in "
            "the previous message.",
        )
    ]


def test_summary_head_followed_by_results_is_an_orphan_and_an_alternation_error() -> None:
    messages = (user("summary"), results(result("toolu_gone")))
    kinds = [(v.kind, v.message_index) for v in validate_messages(messages)]
    assert kinds == [("alternation", 1), ("orphan_tool_result", 1)]


def test_result_after_text_does_not_answer_the_call() -> None:
    messages = (
        user("go"),
        calls(call("toolu_a")),
        Message(role="user", content=(TextBlock(text="here:"), result("toolu_a"))),
    )
    kinds = [v.kind for v in validate_messages(messages)]
    assert kinds == ["missing_tool_result"]


def test_duplicate_tool_use_ids_reproduce_the_api_text() -> None:
    messages = (
        user("go"),
        calls(call("toolu_a")),
        results(result("toolu_a")),
        calls(call("toolu_b"), call("toolu_a"), text="again"),
        results(result("toolu_b"), result("toolu_a")),
    )
    assert validate_messages(messages) == [
        Violation("duplicate_tool_use_id", 3, "messages.3.content.2: `tool_use` ids must be unique")
    ]


def test_alternation_reproduces_the_api_text() -> None:
    messages = (user("a"), user("b"), assistant("c"), assistant("d"), user("e"))
    assert validate_messages(messages) == [
        Violation(
            "alternation",
            1,
            'messages: roles must alternate between "user" and "assistant", '
            'but found multiple "user" roles in a row',
        ),
        Violation(
            "alternation",
            3,
            'messages: roles must alternate between "user" and "assistant", '
            'but found multiple "assistant" roles in a row',
        ),
    ]


def test_first_message_must_be_user() -> None:
    assert validate_messages((assistant("hi"), user("hello"))) == [
        Violation("first_not_user", 0, 'messages: first message must use the "user" role')
    ]


def test_no_messages_at_all() -> None:
    assert validate_messages(()) == [
        Violation("first_not_user", 0, "messages: at least one message is required")
    ]


def test_empty_content_reproduces_the_api_text() -> None:
    messages = (user("go"), Message(role="assistant", content=()), user("hm"))
    assert validate_messages(messages) == [
        Violation(
            "empty_content",
            1,
            "messages.1: all messages must have non-empty content except for the optional "
            "final assistant message",
        )
    ]
    assert [v.kind for v in validate_messages((user(""),))] == ["empty_content"]


def test_a_final_assistant_message_may_be_empty() -> None:
    assert validate_messages((user("go"), Message(role="assistant", content=""))) == []


def test_empty_and_blank_text_blocks() -> None:
    blank = Message(role="user", content=(TextBlock(text="  \n"),))
    empty = Message(role="user", content=(TextBlock(text=""),))
    assert [v.detail for v in validate_messages((blank,))] == [
        "messages: text content blocks must contain non-whitespace text"
    ]
    assert [v.detail for v in validate_messages((empty,))] == [
        "messages: text content blocks must be non-empty"
    ]


def test_empty_text_inside_a_tool_result_is_caught() -> None:
    messages = (
        user("go"),
        calls(call("toolu_a")),
        results(result("toolu_a", [TextBlock(text=""), ImageBlock(source=TINY_PNG)])),
    )
    assert [(v.kind, v.message_index) for v in validate_messages(messages)] == [
        ("empty_content", 2)
    ]


def test_tool_result_in_an_assistant_message_is_reported_not_raised() -> None:
    messages = (
        user("go"),
        Message(role="assistant", content=(result("toolu_q"),)),
        user("?"),
    )
    assert [v.kind for v in validate_messages(messages)] == ["orphan_tool_result"]


def test_violations_are_frozen_and_format_for_logs() -> None:
    violation = validate_messages((assistant("x"),))[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        violation.kind = "alternation"  # type: ignore[misc]
    line = format_violations([violation])
    assert line == '[first_not_user at messages.0] messages: first message must use the "user" role'
