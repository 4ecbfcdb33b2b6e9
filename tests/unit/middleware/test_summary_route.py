"""Price-aware summary routing: the warm prefix or the evicted range, per compaction."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hango.compaction.record import CompactionRecord
from hango.compaction.route import usage_cost
from hango.core.messages import Request, Response, TextBlock, Usage
from hango.core.profiles import PRICES
from hango.providers.base import Capabilities
from hango.providers.scripted import ScriptedProvider, text_reply, tool_reply
from hango.wiring.agent import Agent, build_agent
from tests.agent_support import TEST_MODEL, make_settings, writer_reply

SUMMARY = "## Goal and user requests\nWrite the files.\n## Current state\nfile_0 written."
RANGE_SUMMARY = "SUMMARY of earlier work (range route): wrote /work/file_0.txt and more"
MARK = "[Context maintenance"
# A costly agent cache read would make the range cheaper; these make the prefix cheaper.
AGENT_PRICE = {"base_input": 3.0, "cache_write_5m": 3.75, "cache_read": 0.3, "output": 15.0}
SYSTEM = "You are a careful coding agent. " * 200  # a stable prompt over the cache minimum


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@contextlib.contextmanager
def answers_outlive_the_cache(clock: Clock) -> Iterator[None]:
    """Every scripted answer moves ``clock`` past the prompt cache's lifetime (300 s)."""
    original = ScriptedProvider.complete

    def slow(self: ScriptedProvider, request: Request) -> Response:
        clock.now += 301.0
        return original(self, request)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ScriptedProvider, "complete", slow)
        yield


def is_prefix_summary(request: Request) -> bool:
    last = request.messages[-1].blocks()[-1]
    return isinstance(last, TextBlock) and last.text.startswith(MARK)


class Agentish:
    """Writes files for ``steps`` calls, then answers; a prefix summary request gets
    ``summary`` (a Response); every request is kept as the JSON the API would get."""

    def __init__(self, steps: int, summary: Response) -> None:
        self.steps = steps
        self.summary = summary
        self.sent: list[str] = []
        # The messages as the Anthropic provider sends them (the body opens with them).
        self.wire: list[bytes] = []
        self.agent_calls = 0

    def __call__(self, request: Request) -> Response:
        self.sent.append(json.dumps(request.to_api()))
        self.wire.append(b"".join(request.messages_parts()))
        if is_prefix_summary(request):
            return self.summary
        self.agent_calls += 1
        if self.agent_calls <= self.steps:
            return writer_reply(self.agent_calls)
        return text_reply("done")


def run(
    tmp_path: Path,
    summary: Response,
    *,
    summarizer_model: str,
    caching: bool = True,
    clock: Clock | None = None,
    steps: int = 8,
    **overrides: Any,
) -> tuple[Agent, Agentish, list[CompactionRecord]]:
    overrides.setdefault("summary_route", "auto")
    script = Agentish(steps, summary)
    provider = ScriptedProvider(fallback=script, capabilities=Capabilities(prompt_caching=caching))
    summarizer = ScriptedProvider(fallback=lambda r: text_reply(RANGE_SUMMARY))
    settings = make_settings(
        tmp_path,
        summarizer_model=summarizer_model,
        model_profiles={TEST_MODEL: {"max_input_tokens": 6000, "price": AGENT_PRICE}},
        context_presummarize_frac=0.99,  # no pre-summaries: every summary is made now
        **overrides,
    )
    agent = build_agent(
        settings,
        provider=provider,
        summarizer_provider=summarizer,
        system_prompt=(TextBlock(text=SYSTEM),),
        clock=clock or time.monotonic,
    )
    result = agent.loop.run_turn("route", "Write the files.")
    return agent, script, list(result.compactions)


def summaries(records: list[CompactionRecord]) -> list[CompactionRecord]:
    return [r for r in records if r.reason != "truncate"]


def test_prefix_request_is_the_previous_request_byte_for_byte_up_to_the_breakpoint(
    tmp_path: Path,
) -> None:
    # A costly summarizer (Opus 4.1 at $15 per Mtok) against a cache read at $0.30.
    _, script, records = run(tmp_path, text_reply(SUMMARY), summarizer_model="claude-opus-4-1")
    assert summaries(records), "the scripted session must compact"
    at = next(i for i, body in enumerate(script.sent) if MARK in body)
    previous, prefix = json.loads(script.sent[at - 1]), json.loads(script.sent[at])
    # The provider's prefix runs tools, system, messages: each as bytes, the messages
    # through the end of the previous request's last marked block.
    marker = '"cache_control": {"type": "ephemeral"}}'
    for key in ("tools", "system"):
        assert json.dumps(prefix.get(key)) == json.dumps(previous.get(key)), key
    sent_before, sent_now = json.dumps(previous["messages"]), json.dumps(prefix["messages"])
    cut = sent_before.rindex(marker) + len(marker)
    assert sent_now[:cut] == sent_before[:cut]
    # The same on the wire, from the bytes the Anthropic provider sends.
    wire_before, wire_marker = script.wire[at - 1], b'"cache_control":{"type":"ephemeral"}}'
    wire_cut = wire_before.rindex(wire_marker) + len(wire_marker)
    assert script.wire[at][:wire_cut] == wire_before[:wire_cut]
    # After the breakpoint: only the instruction, one text block closing the last message.
    last = prefix["messages"][-1]["content"]
    assert last[-1]["type"] == "text" and last[-1]["text"].startswith(MARK)
    assert len(last) == len(previous["messages"][-1]["content"]) + 1
    assert len(prefix["messages"]) == len(previous["messages"])
    for key in ("model", "tool_choice", "thinking"):
        assert prefix.get(key) == previous.get(key), key
    record = summaries(records)[0]
    assert record.route is not None and record.route.name == "prefix"
    assert record.summary == SUMMARY.strip()


def test_choice_follows_the_prices_cheap_summarizer_takes_the_range(tmp_path: Path) -> None:
    # Haiku 5.5 reads at $0.10 per Mtok fresh: cheaper than $0.30 cache reads of the prefix.
    _, script, records = run(tmp_path, text_reply(SUMMARY), summarizer_model="claude-haiku-5-5")
    record = summaries(records)[0]
    route = record.route
    assert route is not None and route.name == "range"
    assert route.expected_prefix_usd is not None and route.expected_range_usd is not None
    assert route.expected_range_usd < route.expected_prefix_usd
    assert not any(MARK in body for body in script.sent)
    assert record.summary == RANGE_SUMMARY


def test_warm_long_prefix_with_a_costly_summarizer_takes_the_prefix(tmp_path: Path) -> None:
    _, _, records = run(tmp_path, text_reply(SUMMARY), summarizer_model="claude-opus-4-1")
    route = summaries(records)[0].route
    assert route is not None and route.name == "prefix"
    assert route.expected_prefix_usd is not None and route.expected_range_usd is not None
    assert route.expected_prefix_usd < route.expected_range_usd


def test_a_cold_prefix_never_takes_the_prefix_route(tmp_path: Path) -> None:
    clock = Clock()
    with answers_outlive_the_cache(clock):
        _, script, records = run(
            tmp_path,
            text_reply(SUMMARY),
            summarizer_model="claude-opus-4-1",
            clock=clock,
            summary_route="prefix",  # even forced
        )
    route = summaries(records)[0].route
    assert route is not None and route.name == "range"
    assert route.reason is not None and "cold prefix" in route.reason
    assert not any(MARK in body for body in script.sent)


def test_a_provider_without_prompt_caching_never_takes_the_prefix(tmp_path: Path) -> None:
    _, script, records = run(
        tmp_path, text_reply(SUMMARY), summarizer_model="claude-opus-4-1", caching=False
    )
    route = summaries(records)[0].route
    assert route is not None and route.name == "range"
    assert route.reason == "the provider does not cache prompts"
    assert not any(MARK in body for body in script.sent)


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        (tool_reply(("write_file", {"path": "/x", "content": "y"})), "tool call"),
        (text_reply(""), "empty summary"),
    ],
)
def test_a_tool_calling_or_empty_prefix_reply_falls_back_to_the_range(
    tmp_path: Path, reply: Response, why: str
) -> None:
    _, script, records = run(tmp_path, reply, summarizer_model="claude-opus-4-1")
    record = summaries(records)[0]
    route = record.route
    assert route is not None and route.name == "range"
    assert route.reason is not None and route.reason.startswith("prefix fell back")
    assert why in route.reason
    assert record.summary == RANGE_SUMMARY
    assert any(MARK in body for body in script.sent)


def test_forced_range_never_asks_the_prefix(tmp_path: Path) -> None:
    _, script, records = run(
        tmp_path, text_reply(SUMMARY), summarizer_model="claude-opus-4-1", summary_route="range"
    )
    route = summaries(records)[0].route
    assert route is not None and route.name == "range"
    assert route.reason == "HANGO_SUMMARY_ROUTE=range"
    assert not any(MARK in body for body in script.sent)


def test_the_record_prices_the_real_usage_on_each_route(tmp_path: Path) -> None:
    usage = Usage(input_tokens=900, cache_read_input_tokens=4000, output_tokens=300)
    reply = text_reply(SUMMARY).model_copy(update={"usage": usage})
    _, _, records = run(tmp_path, reply, summarizer_model="claude-opus-4-1")
    route = summaries(records)[0].route
    assert route is not None and route.name == "prefix"
    # 4000 reads at $0.30, 900 fresh at $3, 300 out at $15 (per Mtok).
    expected = (4000 * 0.3 + 900 * 3.0 + 300 * 15.0) / 1e6
    assert route.cost_usd == pytest.approx(expected)


def test_the_range_cost_is_priced_at_the_summarizer_model(tmp_path: Path) -> None:
    _, _, records = run(
        tmp_path, text_reply(SUMMARY), summarizer_model="claude-haiku-4-5", summary_route="range"
    )
    record = summaries(records)[0]
    assert record.route is not None and record.summary_usage is not None
    price = PRICES["claude-haiku-4-5"]
    assert record.route.cost_usd == pytest.approx(usage_cost(record.summary_usage, price))


def test_records_stored_before_the_route_still_load() -> None:
    stored = {
        "at_turn": 1,
        "reason": "threshold",
        "kept_from_seq": 5,
        "summary": "s",
        "offload_path": None,
        "tokens_before": 10,
        "tokens_after": 5,
        "evicted_messages": 4,
    }
    assert CompactionRecord.model_validate(stored).route is None
