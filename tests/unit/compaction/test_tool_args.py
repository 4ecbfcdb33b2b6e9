"""Tool-argument truncation: shrinks old large blocks, keeps every id, is stable."""

from __future__ import annotations

import json
import re

import pytest

from hango.compaction.tool_args import TRUNCATION_MARKER, Truncation, truncate_tool_args
from hango.compaction.validate import validate_messages
from hango.core.messages import (
    ImageBlock,
    Message,
    Request,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from hango.tokens import make_estimator
from hango.tokens.base import Estimator
from hango.tokens.framing import FramedEstimator
from tests.histories import (
    TINY_PNG,
    CharEstimator,
    HistoryBuilder,
    call,
    calls,
    payload,
    request_of,
    result,
    results,
    shape,
    user,
)

ESTIMATOR = CharEstimator()


def borderline_history() -> tuple[Message, ...]:
    """An old 8k-char write_file and an old 12k-char test log, then small recent steps."""
    builder = HistoryBuilder().user("Implement the tokenizer and make the tests pass.")
    builder.batch(1, name="write_file", arg_chars=8_000, result_chars=30)
    builder.batch(1, name="bash", arg_chars=20, result_chars=12_000)
    for _ in range(6):
        builder.batch(2, arg_chars=60, result_chars=200)
    builder.say("Tests pass now.").user("Great, summarise what changed.")
    return builder.build()


def dumps(messages: tuple[Message, ...]) -> str:
    return json.dumps([m.to_api() for m in messages], ensure_ascii=False)


def test_truncation_alone_brings_a_borderline_request_under_the_threshold() -> None:
    messages = borderline_history()
    before = ESTIMATOR.estimate_request(request_of(messages))
    threshold = int(before * 0.80)
    assert before > threshold

    truncated = truncate_tool_args(
        messages, protect_from=len(messages) - 4, max_tokens=500, estimator=ESTIMATOR
    )

    after = ESTIMATOR.estimate_request(request_of(truncated.messages))
    assert after < threshold
    assert truncated.truncated == 2  # the write_file input and the test log
    assert shape(truncated.messages) == shape(messages)  # ids, names, keys, roles, order
    assert validate_messages(truncated.messages) == []


def test_input_is_untouched_and_output_is_stable_and_idempotent() -> None:
    messages = borderline_history()
    snapshot = dumps(messages)

    first = truncate_tool_args(messages, protect_from=8, max_tokens=300, estimator=ESTIMATOR)
    second = truncate_tool_args(messages, protect_from=8, max_tokens=300, estimator=ESTIMATOR)
    again = truncate_tool_args(first.messages, protect_from=8, max_tokens=300, estimator=ESTIMATOR)

    assert dumps(messages) == snapshot
    assert first.truncated
    assert dumps(first.messages) == dumps(second.messages)
    assert again.messages is first.messages
    assert again.truncated == 0


@pytest.mark.parametrize("max_tokens", [0, 5, 50])
def test_previews_still_over_budget_are_not_cut_again(max_tokens: int) -> None:
    # With a tiny budget the previews themselves stay "over budget"; the marker, not the
    # estimate, is what keeps a second pass from cutting the cut text again.
    messages = borderline_history()
    first = truncate_tool_args(messages, protect_from=8, max_tokens=max_tokens, estimator=ESTIMATOR)
    again = truncate_tool_args(
        first.messages, protect_from=8, max_tokens=max_tokens, estimator=ESTIMATOR
    )
    assert first.truncated >= 2
    assert again.messages is first.messages


def test_nothing_to_do_returns_the_very_same_tuple() -> None:
    messages = borderline_history()
    result_ = truncate_tool_args(
        messages, protect_from=len(messages), max_tokens=10_000, estimator=ESTIMATOR
    )
    assert result_.messages is messages
    assert result_.truncated == 0
    assert not result_.truncated


def test_messages_in_the_keep_window_are_never_touched() -> None:
    messages = borderline_history()
    truncated = truncate_tool_args(messages, protect_from=3, max_tokens=10, estimator=ESTIMATOR)
    assert truncated.messages[1] is not messages[1]  # old write_file shortened
    assert all(a is b for a, b in zip(truncated.messages[3:], messages[3:], strict=True))


def test_tool_input_keeps_its_keys_and_small_values_and_notes_the_size() -> None:
    body = payload(8_000, "w")
    messages = (
        user("go"),
        calls(call("toolu_w", "write_file", path="/src/a.py", content=body, mode=420)),
        results(result("toolu_w")),
        calls(call("toolu_r")),
        results(result("toolu_r")),
    )
    truncated = truncate_tool_args(messages, protect_from=3, max_tokens=100, estimator=ESTIMATOR)

    [use] = truncated.messages[1].tool_uses()
    assert (use.id, use.name) == ("toolu_w", "write_file")
    assert list(use.input) == ["path", "content", "mode"]
    assert use.input["path"] == "/src/a.py"
    assert use.input["mode"] == 420
    tokens = ESTIMATOR.estimate(body)
    assert use.input["content"] == (
        body[:200]
        + f"…[truncated: 8000 chars, ~{tokens} tokens; full content in the stored transcript]"
    )


def test_tool_result_keeps_head_and_tail_and_error_flag() -> None:
    log = "HEAD-OF-LOG " + payload(20_000, "log") + " FINAL: 3 failed"
    messages = (
        user("go"),
        calls(call("toolu_t", "bash", command="pytest")),
        results(result("toolu_t", log, is_error=True)),
        calls(call("toolu_r")),
        results(result("toolu_r")),
    )
    truncated = truncate_tool_args(messages, protect_from=3, max_tokens=100, estimator=ESTIMATOR)
    [answer] = truncated.messages[2].tool_results()
    assert answer.is_error is True
    assert answer.tool_use_id == "toolu_t"
    text = answer.text()
    assert text.startswith(log[:200])
    assert text.endswith(log[-200:])
    assert f"…[truncated: {len(log)} chars, ~{ESTIMATOR.estimate(log)} tokens;" in text
    assert len(text) < 600


def test_multi_block_result_keeps_block_count_and_images() -> None:
    parts = (
        TextBlock(text=payload(6_000, "a")),
        ImageBlock(source=TINY_PNG),
        TextBlock(text="short"),
    )
    messages = (
        user("go"),
        calls(call("toolu_m")),
        results(result("toolu_m", parts)),
        calls(call("toolu_r")),
        results(result("toolu_r")),
    )
    truncated = truncate_tool_args(messages, protect_from=3, max_tokens=100, estimator=ESTIMATOR)
    [answer] = truncated.messages[2].tool_results()
    assert isinstance(answer.content, tuple)
    assert [b.type for b in answer.content] == ["text", "image", "text"]
    assert answer.content[1] is parts[1]
    assert answer.content[2] is parts[2]
    first = answer.content[0]
    assert isinstance(first, TextBlock)
    assert TRUNCATION_MARKER.search(first.text)


def test_nested_structures_are_cut_string_by_string() -> None:
    edits = [
        {"old": payload(3_000, f"o{n}"), "new": payload(3_000, f"n{n}"), "line": n}
        for n in range(3)
    ]
    messages = (
        user("go"),
        calls(call("toolu_e", "edit_file", path="/a.py", edits=edits)),
        results(result("toolu_e")),
        calls(call("toolu_r")),
        results(result("toolu_r")),
    )
    truncated = truncate_tool_args(messages, protect_from=3, max_tokens=1_000, estimator=ESTIMATOR)
    [use] = truncated.messages[1].tool_uses()
    assert [e["line"] for e in use.input["edits"]] == [0, 1, 2]
    assert all(list(e) == ["old", "new", "line"] for e in use.input["edits"])
    assert all(TRUNCATION_MARKER.search(e["old"]) for e in use.input["edits"])
    assert edits[0]["old"] == payload(3_000, "o0")  # the original dict was not mutated


def test_large_non_string_values_collapse_to_a_preview_but_keep_their_key() -> None:
    numbers = list(range(5_000))
    messages = (
        user("go"),
        calls(call("toolu_n", "plot", values=numbers, title="t")),
        results(result("toolu_n")),
        calls(call("toolu_r")),
        results(result("toolu_r")),
    )
    truncated = truncate_tool_args(messages, protect_from=3, max_tokens=200, estimator=ESTIMATOR)
    [use] = truncated.messages[1].tool_uses()
    assert list(use.input) == ["values", "title"]
    assert use.input["title"] == "t"
    collapsed = use.input["values"]
    assert isinstance(collapsed, str)
    assert collapsed.startswith(json.dumps(numbers)[:200])
    assert re.search(
        r"…\[truncated: \d+ chars, ~\d+ tokens; full content in the stored transcript\]$", collapsed
    )
    # Stable: running again changes nothing.
    again = truncate_tool_args(
        truncated.messages, protect_from=3, max_tokens=200, estimator=ESTIMATOR
    )
    assert again.messages is truncated.messages


def test_non_dict_input_and_huge_non_json_text_are_handled() -> None:
    raw = "\x00not json {{{ " + payload(10_000, "raw")
    # A stored block whose input is not an object (built without validation on purpose).
    odd = ToolUseBlock.model_construct(
        id="toolu_odd",
        name="bash",
        input=raw,  # type: ignore[arg-type]
        type="tool_use",
    )
    messages = (
        user("go"),
        Message.model_construct(role="assistant", content=(odd,)),
        results(result("toolu_odd")),
        calls(call("toolu_r")),
        results(result("toolu_r")),
    )
    truncated = truncate_tool_args(messages, protect_from=3, max_tokens=100, estimator=ESTIMATOR)
    [use] = truncated.messages[1].tool_uses()
    assert use.id == "toolu_odd"
    assert isinstance(use.input, str)
    assert use.input.startswith(raw[:200])
    assert TRUNCATION_MARKER.search(use.input)


def test_a_value_is_never_replaced_by_something_longer() -> None:
    messages = (
        user("go"),
        calls(call("toolu_s", "write_file", a="x" * 210, b="y" * 210, c="z" * 210)),
        results(result("toolu_s", "r" * 250)),
        calls(call("toolu_r")),
        results(result("toolu_r")),
    )
    # Everything is "over budget", but every value is too short to gain from a preview.
    truncated = truncate_tool_args(messages, protect_from=3, max_tokens=1, estimator=ESTIMATOR)
    assert truncated.messages is messages


def test_empty_or_absent_result_content_is_left_alone() -> None:
    empty = ToolResultBlock(tool_use_id="toolu_a")
    messages = (user("go"), calls(call("toolu_a")), results(empty))
    truncated = truncate_tool_args(messages, protect_from=3, max_tokens=0, estimator=ESTIMATOR)
    assert truncated.messages is messages


@pytest.mark.parametrize(
    ("keyword", "value"), [("protect_from", -1), ("max_tokens", -1), ("preview_chars", -1)]
)
def test_bad_arguments_are_named(keyword: str, value: int) -> None:
    arguments = {"protect_from": 1, "max_tokens": 10, "preview_chars": 10, keyword: value}
    with pytest.raises(ValueError, match=keyword):
        truncate_tool_args(
            (user("go"),),
            protect_from=arguments["protect_from"],
            max_tokens=arguments["max_tokens"],
            preview_chars=arguments["preview_chars"],
            estimator=ESTIMATOR,
        )


class CountingEstimator(CharEstimator):
    def __init__(self) -> None:
        self.calls = 0

    def estimate(self, text: str) -> int:
        self.calls += 1
        return super().estimate(text)


# --- the message bound: a message estimated within the budget has no block over it ----------


class Unbounded:
    """The estimator it wraps, counting every block: no message estimate bounds them."""

    def __init__(self, inner: Estimator) -> None:
        self.inner = inner
        self.name = inner.name
        self.counted: list[str] = []

    def estimate(self, text: str) -> int:
        self.counted.append(text)
        return self.inner.estimate(text)

    def estimate_message(self, message: Message) -> int:
        return self.inner.estimate_message(message)

    def estimate_request(self, request: Request) -> int:
        return self.inner.estimate_request(request)


def counting(kind: str) -> tuple[FramedEstimator, list[str]]:
    """A real estimator (its message figures bound its blocks) and the texts it counts."""
    estimator = make_estimator(kind)  # type: ignore[arg-type]
    assert isinstance(estimator, FramedEstimator)
    count, counted = estimator._count_text, []

    def noting(text: str) -> float:
        counted.append(text)
        return count(text)

    estimator._count_text = noting
    return estimator, counted


def mixed_history() -> tuple[Message, ...]:
    """Tool blocks around every budget below: ASCII, CJK (3 bytes a character), emoji,
    nested inputs, a non-dict input and multi-part results."""
    odd = ToolUseBlock.model_construct(
        id="toolu_odd",
        name="bash",
        input="}{" * 900,
        type="tool_use",  # type: ignore[arg-type]
    )
    parts = (TextBlock(text="日志" * 300), TextBlock(text="ok " * 400))
    return (
        user("go"),
        calls(call("toolu_a", content="x" * 1_500), call("toolu_b", content="模型" * 700)),
        results(result("toolu_a", "y" * 6_000), result("toolu_b", "🙂" * 900)),
        calls(call("toolu_c", nested={"deep": ["z" * 2_500, {"k": "窗口" * 400}]})),
        Message(role="user", content=(ToolResultBlock(tool_use_id="toolu_c", content=parts),)),
        Message.model_construct(role="assistant", content=(odd,)),
        results(result("toolu_odd", "done")),
        calls(call("toolu_r")),
        results(result("toolu_r")),
    )


@pytest.mark.parametrize("kind", ["tiktoken", "heuristic"])
@pytest.mark.parametrize("max_tokens", [0, 50, 300, 700, 1_000, 2_000, 5_000])
def test_the_message_bound_changes_nothing_but_what_is_counted(kind: str, max_tokens: int) -> None:
    bounded, _ = counting(kind)
    unbounded = Unbounded(bounded)
    messages = mixed_history()
    expected = truncate_tool_args(
        messages, protect_from=7, max_tokens=max_tokens, estimator=unbounded
    )
    found = truncate_tool_args(messages, protect_from=7, max_tokens=max_tokens, estimator=bounded)
    assert found == expected
    truncation = Truncation(max_tokens=max_tokens, estimator=bounded)
    plain = Truncation(max_tokens=max_tokens, estimator=unbounded)
    estimate = bounded.estimate_message
    assert [truncation(m, estimate(m)) for m in messages] == [
        plain(m, estimate(m)) for m in messages
    ]


def test_the_blocks_of_a_message_within_budget_are_not_counted_again() -> None:
    estimator, counted = counting("tiktoken")
    messages = mixed_history()
    for message in messages:
        estimator.estimate_message(message)  # cached for the object, as a session's are
    counted.clear()
    truncate_tool_args(messages, protect_from=7, max_tokens=5_000, estimator=estimator)
    # Every message is within 5,000 tokens, but a result of several text parts is judged
    # on their joined text, which the message's estimate did not count.
    assert counted == [JOINED]


def test_truncation_judges_a_message_by_the_estimate_it_is_given() -> None:
    estimator, counted = counting("tiktoken")
    messages = mixed_history()
    # Each message's estimate as the copy holds it (counted when it joined, or stored), by
    # another estimator object: this one's cache is empty, and it counts no message again.
    figures = [counting("tiktoken")[0].estimate_message(message) for message in messages]
    truncation = Truncation(max_tokens=5_000, estimator=estimator)
    for message, tokens in zip(messages, figures, strict=True):
        truncation(message, tokens)
    assert counted == [JOINED]


JOINED = "日志" * 300 + "\n" + "ok " * 400  # a result's two text parts, judged joined


def test_a_text_over_budget_is_still_counted_and_cut() -> None:
    # 700 characters of CJK, about 1.1k tokens: its message is over 800, so it is counted.
    estimator, counted = counting("tiktoken")
    text = "模型上下文窗口" * 100
    messages = (user("go"), calls(call("toolu_a")), results(result("toolu_a", text)), user("next"))
    truncated = truncate_tool_args(messages, protect_from=3, max_tokens=800, estimator=estimator)
    assert truncated.truncated == 1
    assert text in counted
