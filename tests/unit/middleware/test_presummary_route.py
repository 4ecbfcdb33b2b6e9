"""Pre-summaries routed by price: on the warm prefix of the request sent last, or the range.

The same scripted session as the trigger's routing tests (``test_summary_route.py``),
with pre-summaries on from a fixed start and judged on a simulated clock (a summary is
ready as soon as it is started, its work awaited), so the first compaction installs one.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from hango.compaction.record import CompactionRecord
from hango.core.messages import Request, Response, TextBlock
from hango.providers.base import Capabilities
from hango.providers.scripted import ScriptedProvider, text_reply, tool_reply
from hango.wiring.agent import Agent, build_agent
from tests.agent_support import TEST_MODEL, make_settings
from tests.unit.middleware.test_summary_route import (
    AGENT_PRICE,
    MARK,
    RANGE_SUMMARY,
    SUMMARY,
    SYSTEM,
    Agentish,
    Clock,
    answers_outlive_the_cache,
)

# Fresh reads at $15 per Mtok: the agent's cache reads at $0.30 are far cheaper.
COSTLY_SUMMARIZER = "claude-opus-4-1"
# Fresh reads at $0.10 per Mtok: cheaper than the agent's cache reads.
CHEAP_SUMMARIZER = "claude-haiku-5-5"


class Observed(Agentish):
    """Also keeps the requests as objects: the agent's, and the prefix summaries'."""

    def __init__(self, steps: int, summary: Response) -> None:
        super().__init__(steps, summary)
        self.agent_requests: list[Request] = []
        self.prefix_requests: list[Request] = []

    def __call__(self, request: Request) -> Response:
        last = request.messages[-1].blocks()[-1]
        if isinstance(last, TextBlock) and last.text.startswith(MARK):
            self.prefix_requests.append(request)
        else:
            self.agent_requests.append(request)
        return super().__call__(request)


def run_paced(
    tmp_path: Path,
    summary: Response,
    *,
    summarizer_model: str,
    clock: Clock | None = None,
    **overrides: Any,
) -> tuple[Agent, Observed, list[CompactionRecord]]:
    overrides.setdefault("summary_route", "auto")
    script = Observed(8, summary)
    provider = ScriptedProvider(fallback=script, capabilities=Capabilities(prompt_caching=True))
    summarizer = ScriptedProvider(fallback=lambda r: text_reply(RANGE_SUMMARY))
    settings = make_settings(
        tmp_path,
        summarizer_model=summarizer_model,
        model_profiles={TEST_MODEL: {"max_input_tokens": 6000, "price": AGENT_PRICE}},
        # The fixed start: dispatched from the first call past 40 % of the window, so the
        # first compaction installs one (the pace would wait for a slower summarizer).
        context_presummarize_frac=0.40,
        context_presummarize_pace=False,
        **overrides,
    )
    agent = build_agent(
        settings,
        provider=provider,
        summarizer_provider=summarizer,
        system_prompt=(TextBlock(text=SYSTEM),),
        clock=clock or Clock(),
        summary_seconds=0.0,
    )
    result = agent.loop.run_turn("route", "Write the files.")
    return agent, script, [r for r in result.compactions if r.reason != "truncate"]


def installed(records: list[CompactionRecord]) -> CompactionRecord:
    """The first compaction, which must have installed a pre-summary."""
    assert records, "the scripted session must compact"
    record = records[0]
    assert record.route is not None and record.route.reason is not None
    assert record.route.reason.startswith("pre-summary: "), record.route.reason
    return record


def test_a_warm_prefix_makes_the_pre_summary_when_it_is_cheaper(tmp_path: Path) -> None:
    agent, script, records = run_paced(
        tmp_path, text_reply(SUMMARY), summarizer_model=COSTLY_SUMMARIZER
    )
    record = installed(records)
    route = record.route
    assert route is not None and route.name == "prefix"
    assert route.expected_prefix_usd is not None and route.expected_range_usd is not None
    assert route.expected_prefix_usd < route.expected_range_usd
    assert record.summary == SUMMARY.strip()
    assert script.prefix_requests, "no prefix summary was asked"
    # Each prefix summary repeats a request the agent sent before it (an answered one,
    # so warm), byte for byte through that request's last block, plus the instruction.
    for prefix in script.prefix_requests:
        body = prefix.to_api()
        sent = [r.to_api() for r in script.agent_requests]
        repeated = [s for s in sent if s["messages"][:-1] == body["messages"][:-1]]
        assert repeated, "the prefix is no request the agent sent"
        last_sent, last_now = repeated[-1]["messages"][-1], body["messages"][-1]
        assert last_now["content"][:-1] == last_sent["content"]
        assert json.dumps(body["tools"]) == json.dumps(repeated[-1]["tools"])
        assert body["system"] == repeated[-1]["system"]
    # The instruction of the installed one keeps verbatim what the record keeps: the
    # request's messages past the cut (no compaction before it: the request opens with
    # every stored message, so the cut's index is the stored position of kept_from_seq).
    stored = agent.store.messages("route")
    cut = next(i for i, m in enumerate(stored) if m.seq == record.kept_from_seq)
    assert any(len(asked.messages) - _kept(asked) == cut for asked in script.prefix_requests)


def _kept(request: Request) -> int:
    instruction = request.messages[-1].blocks()[-1]
    assert isinstance(instruction, TextBlock)
    found = re.search(r"before its last (\d+) messages", instruction.text)
    return int(found.group(1)) if found else 0


def test_a_cheap_summarizer_makes_the_pre_summary_over_the_range(tmp_path: Path) -> None:
    _, script, records = run_paced(tmp_path, text_reply(SUMMARY), summarizer_model=CHEAP_SUMMARIZER)
    record = installed(records)
    route = record.route
    assert route is not None and route.name == "range"
    assert route.expected_prefix_usd is not None and route.expected_range_usd is not None
    assert route.expected_range_usd < route.expected_prefix_usd
    assert not script.prefix_requests
    assert record.summary == RANGE_SUMMARY


def test_a_cold_prefix_never_makes_a_pre_summary(tmp_path: Path) -> None:
    clock = Clock()
    with answers_outlive_the_cache(clock):
        _, script, records = run_paced(
            tmp_path,
            text_reply(SUMMARY),
            summarizer_model=COSTLY_SUMMARIZER,
            clock=clock,
            summary_route="prefix",  # even forced
        )
    route = installed(records).route
    assert route is not None and route.name == "range"
    assert route.reason is not None and "cold prefix" in route.reason
    assert not script.prefix_requests


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
    _, script, records = run_paced(tmp_path, reply, summarizer_model=COSTLY_SUMMARIZER)
    record = installed(records)
    route = record.route
    assert route is not None and route.name == "range"
    assert route.reason is not None
    assert route.reason.startswith("pre-summary: prefix fell back") and why in route.reason
    assert record.summary == RANGE_SUMMARY
    assert script.prefix_requests
    # What the prefix attempts cost stays in the record, beside the range call's.
    assert route.cost_usd is not None and route.cost_usd > 0


def test_the_history_holds_each_evicted_message_once_with_prefix_pre_summaries(
    tmp_path: Path,
) -> None:
    agent, script, records = run_paced(
        tmp_path, text_reply(SUMMARY), summarizer_model=COSTLY_SUMMARIZER
    )
    assert script.prefix_requests and records
    assert any(r.route is not None and r.route.name == "prefix" for r in records)
    text = agent.history.read("/conversation_history/route.md")
    seqs = [int(s) for s in re.findall(r"^### Message (\d+) ", text, re.MULTILINE)]
    last = max(r.kept_from_seq for r in records) - 1
    assert seqs == list(range(1, last + 1))
