"""The request's size is anchored on the provider's usage, through the real SDK.

The loopback API counts with its own tokenizer, 1.3 times the estimator's figure (a
model whose tokenizer yields more tokens than the estimator assumes). After the first
response the middleware knows the real size of what it sent and how far the estimate is
off, so it needs no ``count_tokens`` round trip far from the trigger, and still compacts
when the real size crosses the trigger, not 30% later.
"""

from __future__ import annotations

from pathlib import Path

from hango.compaction.extractive import ExtractiveSummarizer
from hango.core.messages import Message, Request
from hango.providers.anthropic import AnthropicProvider
from hango.tokens import HeuristicEstimator
from hango.wiring.agent import Agent, build_agent
from tests.agent_support import make_settings
from tests.fakeapi import Body, FakeAnthropicAPI
from tests.histories import payload

FACTOR = 1.3
WINDOW = 100_000
TRIGGER = int(WINDOW * 0.85)
ESTIMATOR = HeuristicEstimator()


def real_tokens(body: Body) -> int:
    return round(FACTOR * ESTIMATOR.estimate_request(Request.model_validate(body)))


def agent_on(api: FakeAnthropicAPI, tmp_path: Path, band: float) -> Agent:
    settings = make_settings(
        tmp_path, window=WINDOW, count_tokens_band=band, anthropic_base_url=api.base_url
    )
    provider = AnthropicProvider(api_key="sk-ant-test", base_url=api.base_url, max_retries=0)
    return build_agent(settings, provider=provider, summarizer=ExtractiveSummarizer())


def drive(agent: Agent, api: FakeAnthropicAPI) -> list[tuple[int, int, bool]]:
    """Grow one session call by call until it compacts.

    For each call: the real size of the last request sent before it, the count_tokens
    calls it made, and whether it compacted.
    """
    loop = agent.loop
    ctx = loop.begin_turn("anchored")
    calls: list[tuple[int, int, bool]] = []
    for step in range(200):
        loop.append(ctx, Message(role="user", content=payload(3_000, salt=f"s{step}")))
        before = (len(api.count_requests()), ctx.holder.state.compaction_count)
        sent_before = api.message_requests()
        last_real = real_tokens(sent_before[-1].body) if sent_before else 0
        loop.append(ctx, loop.call_model(ctx).as_message())
        compacted = ctx.holder.state.compaction_count > before[1]
        calls.append((last_real, len(api.count_requests()) - before[0], compacted))
        if compacted:
            break
    loop.end_turn(ctx)
    return calls


def the_compaction(agent: Agent) -> int:
    (record,) = [r for run in agent.store.runs("anchored") for r in run.state.compactions]
    return record.tokens_before


def test_no_count_far_from_the_trigger_and_the_trigger_holds(tmp_path: Path) -> None:
    with FakeAnthropicAPI(tokenizer=real_tokens) as api:
        agent = agent_on(api, tmp_path, band=0.10)
        calls = drive(agent, api)
    assert calls[-1][2], "the session never compacted"
    assert calls[0][1] == 1  # no anchor yet: the provider counts
    far = [counted for real, counted, _ in calls[1:] if real < 0.85 * TRIGGER]
    assert len(far) > 20 and sum(far) == 0
    assert TRIGGER <= the_compaction(agent) <= TRIGGER * 1.03


def test_without_counting_the_anchor_alone_fires_on_time(tmp_path: Path) -> None:
    with FakeAnthropicAPI(tokenizer=real_tokens) as api:
        agent = agent_on(api, tmp_path, band=0.0)
        calls = drive(agent, api)
    assert sum(counted for _, counted, _ in calls[1:-1]) == 0
    fired_at = the_compaction(agent)
    assert TRIGGER * 0.97 <= fired_at <= TRIGGER * 1.03
    # The size the middleware acted on is the real one, not the estimate 30% below it.
    assert calls[-1][0] < TRIGGER <= fired_at
    latest = agent.store.latest_state("anchored")
    assert abs(latest.token_corrections["test-model"] - FACTOR) < 0.02
