"""Estimators, their per-object cache, the tiktoken fallback and the counted measurement."""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from hango.core.errors import TransientProviderError
from hango.core.messages import (
    ImageBlock,
    Message,
    OtherBlock,
    Request,
    TextBlock,
    ThinkingBlock,
    ToolDefinition,
    ToolResultBlock,
    ToolUseBlock,
)
from hango.providers.base import Capabilities
from hango.providers.scripted import ScriptedProvider
from hango.tokens import (
    EncodingSource,
    Estimator,
    FramedEstimator,
    HeuristicEstimator,
    TiktokenEstimator,
    make_estimator,
)
from hango.tokens.framing import IMAGE_TOKENS, TOOLS_PREAMBLE, compact_json
from hango.tokens.heuristic import BYTES_PER_TOKEN, utf8_length
from hango.tokens.measure import measure_input_tokens
from hango.tokens.tiktoken_estimator import LARGE_TEXT_CHARS, TokenEncoding
from tests.scripted_counter import ScriptedCounter

PLAIN = Capabilities()


@dataclass
class CountingTextCounter:
    """A text counter (one token per 4 characters) that records every text it counted."""

    texts: list[str] = field(default_factory=list)

    def __call__(self, text: str) -> float:
        self.texts.append(text)
        return len(text) / 4


def tool_turn(index: int) -> tuple[Message, Message]:
    call_id = f"toolu_{index:04d}"
    use = ToolUseBlock(id=call_id, name="read_file", input={"path": f"src/module_{index}.py"})
    result = ToolResultBlock(tool_use_id=call_id, content=f"contents of module {index}\n" * 20)
    return Message(role="assistant", content=(use,)), Message(role="user", content=(result,))


def conversation(turns: int) -> tuple[Message, ...]:
    messages: list[Message] = [Message(role="user", content="Refactor the modules.")]
    for index in range(turns):
        messages.extend(tool_turn(index))
    return tuple(messages)


def request(messages: tuple[Message, ...], **fields: object) -> Request:
    return Request.model_validate(
        {"model": "claude-sonnet-4-5", "max_tokens": 1024, "messages": messages, **fields}
    )


def tool(name: str) -> ToolDefinition:
    return ToolDefinition(
        name=name,
        description=f"The {name} tool, which does a {name} operation on the workspace.",
        input_schema={"type": "object", "properties": {"path": {"type": "string"}}},
    )


ESTIMATORS: list[Callable[[], Estimator]] = [HeuristicEstimator, lambda: make_estimator("tiktoken")]


# --- what a request estimate counts -------------------------------------------------------


@pytest.mark.parametrize("build", ESTIMATORS)
def test_estimate_grows_when_only_the_tool_list_grows(build: Callable[[], Estimator]) -> None:
    estimator = build()
    messages = conversation(3)
    none = estimator.estimate_request(request(messages))
    one = estimator.estimate_request(request(messages, tools=(tool("grep"),)))
    two = estimator.estimate_request(request(messages, tools=(tool("grep"), tool("glob"))))
    assert one >= none + TOOLS_PREAMBLE + estimator.estimate(tool("grep").description or "")
    assert two > one


@pytest.mark.parametrize("build", ESTIMATORS)
def test_estimate_grows_when_only_a_system_block_grows(build: Callable[[], Estimator]) -> None:
    estimator = build()
    messages = conversation(3)
    short = (TextBlock(text="You are a coding agent."),)
    longer = (*short, TextBlock(text="Memory: the user prefers small commits. " * 50))
    base = estimator.estimate_request(request(messages))
    with_short = estimator.estimate_request(request(messages, system=short))
    with_longer = estimator.estimate_request(request(messages, system=longer))
    assert base < with_short < with_longer
    assert with_longer - with_short >= estimator.estimate(longer[1].text)
    as_string = estimator.estimate_request(request(messages, system=short[0].text))
    assert as_string == with_short


def test_every_block_kind_is_counted_with_its_framing() -> None:
    counter = CountingTextCounter()
    estimator = FramedEstimator("counting", counter)
    image = ImageBlock(source={"type": "base64", "media_type": "image/png", "data": "A" * 9000})
    blocks = (
        TextBlock(text="look at this"),
        image,
        ThinkingBlock(thinking="the image shows a stack trace", signature="sig"),
        OtherBlock.model_validate({"type": "document", "source": {"type": "text", "data": "hi"}}),
    )
    message = Message(role="user", content=blocks)
    tokens = estimator.estimate_message(message)
    # The image is a flat charge: its base64 payload is never counted as text.
    assert all("AAAA" not in text for text in counter.texts)
    assert "the image shows a stack trace" in counter.texts
    assert any('"type":"document"' in text for text in counter.texts)
    assert tokens > IMAGE_TOKENS + sum(len(t) for t in counter.texts) / 4


def test_a_tool_call_pair_costs_about_90_tokens_beyond_its_text() -> None:
    counter = CountingTextCounter()
    estimator = FramedEstimator("counting", counter)
    use, result = tool_turn(1)
    total = estimator.estimate_message(use) + estimator.estimate_message(result)
    content = sum(len(text) for text in counter.texts) / 4
    assert total - content >= 90


def test_heuristic_counts_utf8_bytes_so_non_latin_text_costs_more() -> None:
    estimator = HeuristicEstimator()
    ascii_text = "a" * 300
    cjk_text = "語" * 300
    assert estimator.estimate(ascii_text) == math.ceil(300 / BYTES_PER_TOKEN)
    assert estimator.estimate(cjk_text) >= 3 * estimator.estimate(ascii_text) - 1
    assert estimator.estimate("") == 0


def test_tiktoken_is_cl100k_scaled_to_claude() -> None:
    estimator = make_estimator("tiktoken")
    assert isinstance(estimator, TiktokenEstimator)
    # "hello world" is 2 cl100k tokens; x 1.11 rounds up to 3.
    assert estimator.estimate("hello world") == 3


# --- per-object caching ---------------------------------------------------------------------


def test_a_grown_request_only_counts_the_new_messages() -> None:
    counter = CountingTextCounter()
    estimator = FramedEstimator("counting", counter)
    system = (TextBlock(text="You are a coding agent."),)
    tools = (tool("grep"), tool("read_file"))
    messages = conversation(10)
    first = estimator.estimate_request(request(messages, system=system, tools=tools))
    counted_before = len(counter.texts)

    new_use, new_result = tool_turn(99)
    grown = request((*messages, new_use, new_result), system=system, tools=tools)
    second = estimator.estimate_request(grown)

    new_texts = counter.texts[counted_before:]
    assert len(new_texts) == 2  # the new tool_use input and the new tool_result text
    assert "contents of module 99" in new_texts[1]
    expected = estimator.estimate_message(new_use) + estimator.estimate_message(new_result)
    assert second == first + expected


def test_rebuilt_messages_are_counted_again_and_agree() -> None:
    counter = CountingTextCounter()
    estimator = FramedEstimator("counting", counter)
    original = request(conversation(5))
    first = estimator.estimate_request(original)
    counted_once = len(counter.texts)

    rebuilt = Request.model_validate(original.to_api())  # as if reloaded from storage
    assert estimator.estimate_request(rebuilt) == first
    assert len(counter.texts) == 2 * counted_once


@dataclass
class CountingEncoding:
    """A fake encoding: one token per word, recording each text it encoded."""

    texts: list[str] = field(default_factory=list)

    def encode_ordinary(self, text: str) -> list[int]:
        self.texts.append(text)
        return [0] * len(text.split())


def test_tiktoken_does_not_retokenize_the_long_texts_of_rebuilt_messages() -> None:
    encoding = CountingEncoding()
    estimator = TiktokenEstimator(encoding)
    original = request(conversation(5))
    first = estimator.estimate_request(original)
    long_texts = [t for t in encoding.texts if len(t) >= 64]
    assert long_texts  # the tool results

    encoding.texts.clear()
    assert estimator.estimate_request(Request.model_validate(original.to_api())) == first
    assert encoding.texts  # short texts are simply counted again ...
    assert all(len(t) < 64 for t in encoding.texts)  # ... long ones come from the memo


def test_tiktoken_scales_its_counts_to_claude_tokens() -> None:
    estimator = TiktokenEstimator(CountingEncoding())
    assert estimator.estimate("word " * 100) == 111


def test_cache_entries_die_with_their_messages() -> None:
    estimator = HeuristicEstimator()
    message = Message(role="user", content="a message that will be dropped")
    estimator.estimate_message(message)
    assert len(estimator._messages) == 1
    del message
    assert len(estimator._messages) == 0


# --- tiktoken fallback ----------------------------------------------------------------------


def test_tiktoken_degrades_to_the_heuristic_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    loads: list[int] = []

    def broken_loader() -> TokenEncoding:
        loads.append(1)
        raise OSError("encoding data missing")

    encodings = EncodingSource(broken_loader)
    with caplog.at_level(logging.WARNING, logger="hango.tokens.tiktoken_estimator"):
        first = make_estimator("tiktoken", encodings=encodings)
        second = make_estimator("tiktoken", encodings=encodings)

    assert isinstance(first, HeuristicEstimator)
    assert isinstance(second, HeuristicEstimator)
    assert loads == [1]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "encoding data missing" in warnings[0].getMessage()


def test_make_estimator_rejects_an_unknown_kind() -> None:
    with pytest.raises(ValueError, match="'bytes'"):
        make_estimator("bytes")  # type: ignore[arg-type]


# --- measure_input_tokens -------------------------------------------------------------------


def test_measure_uses_the_providers_count() -> None:
    counter = ScriptedCounter(count=lambda req: 4321)
    measured = measure_input_tokens(
        request(conversation(2)), estimator=HeuristicEstimator(), provider=counter, timeout=5
    )
    assert (measured.tokens, measured.source, measured.fallback_reason) == (
        4321,
        "count_tokens",
        None,
    )
    assert counter.count_calls == 1


def test_measure_estimates_when_the_provider_cannot_count() -> None:
    estimator = HeuristicEstimator()
    req = request(conversation(2))
    not_a_counter = ScriptedProvider()
    measured = measure_input_tokens(req, estimator=estimator, provider=not_a_counter, timeout=5)
    assert measured.tokens == estimator.estimate_request(req)
    assert (measured.source, measured.fallback_reason) == ("estimate", None)


def test_measure_falls_back_when_counting_fails(caplog: pytest.LogCaptureFixture) -> None:
    estimator = HeuristicEstimator()
    req = request(conversation(2))
    counter = ScriptedCounter(count_error=TransientProviderError("overloaded", status=529))
    with caplog.at_level(logging.WARNING, logger="hango.tokens.measure"):
        measured = measure_input_tokens(req, estimator=estimator, provider=counter, timeout=5)
    assert (measured.tokens, measured.source) == (estimator.estimate_request(req), "estimate")
    assert measured.fallback_reason is not None
    assert "TransientProviderError" in measured.fallback_reason
    assert "overloaded" in measured.fallback_reason
    assert measured.fallback_reason in caplog.text


def test_measure_rejects_a_nonsense_count() -> None:
    counter = ScriptedCounter(count=lambda req: -5)
    measured = measure_input_tokens(
        request(conversation(1)), estimator=HeuristicEstimator(), provider=counter, timeout=5
    )
    assert measured.source == "estimate"
    assert measured.fallback_reason is not None and "-5" in measured.fallback_reason


def test_measure_does_not_wait_for_a_slow_counter() -> None:
    estimator = HeuristicEstimator()
    req = request(conversation(2))
    counter = ScriptedCounter(count=lambda r: 1, count_delay=1.0)
    started = time.monotonic()
    measured = measure_input_tokens(req, estimator=estimator, provider=counter, timeout=0.05)
    elapsed = time.monotonic() - started
    assert (measured.tokens, measured.source) == (estimator.estimate_request(req), "estimate")
    assert measured.fallback_reason == "count_tokens gave no answer within 0.05s"
    assert elapsed < counter.count_delay  # returned on its deadline, not the counter's


@dataclass
class BlockedCounter:
    """A counter that hangs until released: proves the caller never waited for it."""

    capabilities: Capabilities = PLAIN
    started: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)

    def count_tokens(self, request: Request, *, timeout: float) -> int:
        self.started.set()
        self.release.wait(30)
        return 1


def test_a_hung_counter_does_not_block_the_caller() -> None:
    counter = BlockedCounter()
    try:
        measured = measure_input_tokens(
            request(conversation(1)), estimator=HeuristicEstimator(), provider=counter, timeout=0.1
        )
        assert measured.source == "estimate"
        assert counter.started.is_set()
        assert not counter.release.is_set()  # still hung when the caller got its answer
    finally:
        counter.release.set()


def test_measure_rejects_a_timeout_that_is_not_a_deadline() -> None:
    with pytest.raises(ValueError, match="inf"):
        measure_input_tokens(
            request(conversation(1)),
            estimator=HeuristicEstimator(),
            provider=ScriptedCounter(),
            timeout=float("inf"),
        )


def test_counting_still_works_in_a_forked_child() -> None:
    # Celery's prefork pool forks after the parent may already have counted.
    counter = ScriptedCounter(count=lambda r: 7)
    req = request(conversation(1))
    in_parent = measure_input_tokens(
        req, estimator=HeuristicEstimator(), provider=counter, timeout=5
    )
    assert in_parent.source == "count_tokens"
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        measured = measure_input_tokens(
            req, estimator=HeuristicEstimator(), provider=counter, timeout=5
        )
        os._exit(0 if (measured.tokens, measured.source) == (7, "count_tokens") else 1)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0


# -- very large texts (issue 14, defect 13) -------------------------------------------------


def test_a_very_large_text_is_estimated_by_the_heuristic_without_tokenizing() -> None:
    encoding = CountingEncoding()
    estimator = TiktokenEstimator(encoding)
    huge = "x" * (LARGE_TEXT_CHARS + 1)
    assert estimator.estimate(huge) == HeuristicEstimator().estimate(huge)
    assert encoding.texts == []


def test_large_texts_are_not_memoized_and_small_ones_are() -> None:
    encoding = CountingEncoding()
    estimator = TiktokenEstimator(encoding)
    large, small = "word " * 40_000, "word " * 1_000
    for _ in range(2):
        estimator.estimate(large)
        estimator.estimate(small)
    assert [len(t) for t in encoding.texts].count(len(large)) == 2  # counted each time
    assert [len(t) for t in encoding.texts].count(len(small)) == 1  # from the memo


def test_the_heuristic_measures_non_ascii_text_by_slices_exactly() -> None:
    text = "naïve 日本語 🙂 " * 200_000
    assert utf8_length(text) == len(text.encode("utf-8"))


# --- a message's estimate bounds the estimate of each text in it ------------------------------

# Texts where a token per character, or fewer bytes than characters would suggest, is likely:
# punctuation runs, digits, CJK, emoji (astral), lone surrogates, control characters.
BOUND_TEXTS = (
    "",
    "a",
    "hello world",
    "}{][" * 500,
    "".join(chr(33 + (i * 7919) % 94) for i in range(3_000)),
    "0123456789" * 300,
    "模型上下文窗口" * 400,
    "🙂🚀" * 500,
    "\ud800x\udfff" * 300,
    "\x00\x01\x1f\t\n" * 400,
    '{"path": "src/a.py", "content": "' + "def f(x):\n    return x\n" * 200 + '"}',
)


@pytest.mark.parametrize("kind", ["tiktoken", "heuristic"])
@pytest.mark.parametrize("text", BOUND_TEXTS, ids=range(len(BOUND_TEXTS)))
def test_a_message_estimate_bounds_each_tool_block_text_in_it(kind: str, text: str) -> None:
    # Tool-argument truncation relies on it: a message estimated within the budget has no
    # tool block over it (compaction/tool_args.py).
    estimator = make_estimator(kind)  # type: ignore[arg-type]
    use = ToolUseBlock(id="toolu_a", name="write", input={"path": "a.py", "body": text})
    result = ToolResultBlock(tool_use_id="toolu_a", content=text)
    calls = Message(role="assistant", content=(TextBlock(text="x" * 3_000), use))
    answers = Message(role="user", content=(result, TextBlock(text=text)))
    assert estimator.estimate(compact_json(use.input)) <= estimator.estimate_message(calls)
    assert estimator.estimate(result.text()) <= estimator.estimate_message(answers)
