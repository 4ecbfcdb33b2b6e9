"""Long synthetic sessions keep the prompt cache: the read-ratio bounds of issue 9.

A scripted coding session (parallel tool batches of up to 14 calls, large file writes,
large tool results) runs through the real agent loop and middleware with prompt caching
on; every request that reached the provider then goes through the prefix-cache
simulator (20-block look-back, the model's minimum). Without compaction at least 90% of
all prompt tokens must be cache reads; with several compactions and truncation steps, at
least 85%. Every request stays valid with at most 4 breakpoints.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from hango.compaction.validate import count_breakpoints, validate_request
from hango.core.messages import Request, Response, TextBlock, ToolDefinition
from hango.cost.meter import CacheMeter, estimated_sizes
from hango.providers.scripted import text_reply, tool_reply
from hango.tokens import make_estimator
from hango.tools.builtin import Tool, ToolOutcome
from hango.wiring.agent import Agent
from tests.agent_support import build

SYSTEM = "You are a careful coding agent. " * 200  # a stable prompt over the minimum


def grep(arguments: Mapping[str, Any]) -> ToolOutcome:
    """A deterministic search whose output size depends on its pattern."""
    pattern = str(arguments.get("pattern", ""))
    lines = 5 + (sum(map(ord, pattern)) % 7) * (40 if pattern.startswith("big") else 3)
    return ToolOutcome("\n".join(f"src/{pattern}_{n}.py:{n}: match" for n in range(lines)))


GREP = Tool(
    ToolDefinition(
        name="grep",
        description="Search the code.",
        input_schema={"type": "object", "properties": {"pattern": {"type": "string"}}},
    ),
    grep,
)


def turn_replies(rng: random.Random, turn: int) -> list[Response]:
    """One user turn: a parallel batch, sometimes a large write, then an answer."""
    replies = []
    for step in range(rng.randint(1, 3)):
        width = rng.choice((1, 2, 4, 14))
        prefix = "big" if rng.random() < 0.3 else "sym"
        calls = [("grep", {"pattern": f"{prefix}{turn}x{step}y{n}"}) for n in range(width)]
        replies.append(tool_reply(*calls, text=f"Searching ({turn}.{step})."))
    if rng.random() < 0.5:
        body = "\n".join(f"def f{turn}_{n}(): return {n}" for n in range(rng.randint(50, 400)))
        replies.append(tool_reply(("write_file", {"path": f"/work/m{turn}.py", "content": body})))
    replies.append(text_reply(f"Done with step {turn}."))
    return replies


def run_session(tmp_path: Path, *, window: int, turns: int) -> tuple[Agent, list[Request]]:
    agent, provider = build(
        tmp_path,
        window=window,
        caching=True,
        extra_tools=[GREP],
        system_prompt=[TextBlock(text=SYSTEM)],
        tool_arg_max_tokens=300,
        tool_arg_clear_at_least=3_000,
    )
    rng = random.Random(9)
    for turn in range(turns):
        provider.push(*turn_replies(rng, turn))
        agent.loop.run_turn("cache", f"Task {turn}: change module {turn}.")
    requests = list(provider.requests)
    agent.store.engine.dispose()
    return agent, requests


def simulated(agent: Agent, requests: list[Request]) -> CacheMeter:
    meter = CacheMeter(agent.profile, estimated_sizes(make_estimator("heuristic")))
    for request in requests:
        assert validate_request(request) == []
        assert count_breakpoints(request) <= 4
        meter.add(request)
    return meter


@pytest.mark.parametrize(("window", "turns"), [(2_000_000, 40)])
def test_without_compaction_nine_tenths_of_the_prompt_is_read(
    tmp_path: Path, window: int, turns: int
) -> None:
    agent, requests = run_session(tmp_path, window=window, turns=turns)
    assert agent.store.session("cache").compactions == 0  # type: ignore[union-attr]
    widest = max(len(r.messages[-1].blocks()) for r in requests)
    assert widest >= 14, "the session must contain large parallel batches"
    report = simulated(agent, requests).report
    assert report.requests == len(requests) > 100
    assert report.read_ratio >= 0.90, report


def test_with_compactions_and_truncation_steps_most_of_the_prompt_is_read(
    tmp_path: Path,
) -> None:
    agent, requests = run_session(tmp_path, window=60_000, turns=60)
    session = agent.store.session("cache")
    assert session is not None and session.compactions >= 2
    state = agent.store.latest_state("cache")
    assert state.truncated_before_seq > 0, "truncation must have moved at least once"
    report = simulated(agent, requests).report
    assert report.read_ratio >= 0.85, report


def test_truncation_changes_the_sent_history_only_in_steps(tmp_path: Path) -> None:
    """A message once sent is sent again byte for byte, except at the calls where
    truncation took a step (past half the trigger), and each step clears at least the
    configured amount (3,000 tokens here): never a small change at a new place per call."""
    agent, requests = run_session(tmp_path, window=150_000, turns=40)
    assert agent.store.session("cache").compactions == 0  # type: ignore[union-attr]
    estimate = make_estimator("heuristic").estimate_message
    steps = []
    for before, after in itertools.pairwise(requests):
        old = [_unmarked(m.to_api()) for m in before.messages]
        new = [_unmarked(m.to_api()) for m in after.messages[: len(old)]]
        if old != new:
            kept = len(old)
            steps.append(
                sum(map(estimate, before.messages)) - sum(map(estimate, after.messages[:kept]))
            )
    assert steps, "truncation must have taken at least one step"
    assert min(steps) >= 3_000, steps
    assert len(steps) <= len(requests) // 5


def _unmarked(message: dict[str, Any]) -> dict[str, Any]:
    content = message["content"]
    if isinstance(content, list):
        content = [{k: v for k, v in b.items() if k != "cache_control"} for b in content]
        if len(content) == 1 and content[0].get("type") == "text":
            content = content[0]["text"]
    return {**message, "content": content}
