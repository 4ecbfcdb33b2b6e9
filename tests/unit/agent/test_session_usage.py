"""Real usage wins: the provider's cache figures reach the session counters and telemetry.

The session counters add, once per turn, the usage every model call reported (cache
reads, cache writes, uncached input, output) and its input cost at the model's price.
The end-to-end test runs the real Anthropic SDK against the loopback fake, whose own
prefix cache decides the figures, and checks the counters, the chat spans and the
``hango.cache.read_ratio`` metric against the usage the provider returned.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from hango.core.messages import Request, Response, TextBlock, Usage
from hango.core.price import Price
from hango.providers.anthropic import AnthropicProvider
from hango.providers.base import Capabilities, Provider
from hango.providers.scripted import ScriptedProvider, text_reply
from hango.telemetry.observer import TelemetryObserver
from hango.telemetry.provider import instrument_provider
from hango.wiring.agent import build_agent
from tests.agent_support import TEST_MODEL, make_settings
from tests.fakeapi import FakeAnthropicAPI, fake_api
from tests.fakeapi import text_reply as api_text_reply
from tests.otel_support import Captured, capture

__all__ = ["fake_api"]  # the fixture, imported so pytest finds it here

PRICE = {"base_input": 3.0, "cache_write_5m": 3.75, "cache_read": 0.3, "output": 15.0}


def reply(read: int | None, write: int | None, uncached: int, output: int) -> Response:
    return Response(
        id="msg_u",
        model=TEST_MODEL,
        content=(TextBlock(text="done"),),
        stop_reason="end_turn",
        usage=Usage(
            input_tokens=uncached,
            output_tokens=output,
            cache_read_input_tokens=read,
            cache_creation_input_tokens=write,
        ),
    )


@dataclass
class Recording:
    """A provider that passes every call on and keeps the usage it got back."""

    inner: Provider
    usages: list[Usage] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def capabilities(self) -> Capabilities:
        return self.inner.capabilities

    def complete(self, request: Request) -> Response:
        response = self.inner.complete(request)
        self.usages.append(response.usage)
        return response

    def count_tokens(self, request: Request) -> int:
        return self.inner.count_tokens(request)  # type: ignore[attr-defined, no-any-return]


def test_the_counters_add_each_turns_real_usage_priced_at_the_model(tmp_path: Path) -> None:
    provider = ScriptedProvider(
        [reply(0, 4000, 10, 50), reply(4000, 300, 12, 70), reply(None, None, 900, 5)]
    )
    profiles = {TEST_MODEL: {"max_input_tokens": 200_000, "price": PRICE}}
    agent = build_agent(make_settings(tmp_path, model_profiles=profiles), provider=provider)

    first = agent.loop.run_turn("s-usage", "start")
    agent.loop.run_turn("s-usage", "go on")
    agent.loop.run_turn("s-usage", "and a provider that reports no cache fields")

    price = Price.model_validate(PRICE)
    assert (first.usage.read_tokens, first.usage.write_tokens) == (0, 4000)
    info = agent.store.session("s-usage")
    assert info is not None
    usage = info.usage
    assert (usage.read_tokens, usage.write_tokens, usage.uncached_tokens) == (4000, 4300, 922)
    assert usage.output_tokens == 125
    expected = price.input_cost(4000, 4300, 922)
    assert usage.input_cost_usd == pytest.approx(expected)
    assert expected == pytest.approx((4000 * 0.3 + 4300 * 3.75 + 922 * 3.0) / 1e6)
    assert usage.read_ratio == pytest.approx(4000 / 9222)


def test_a_turn_without_usage_leaves_the_sums_alone(tmp_path: Path) -> None:
    provider = ScriptedProvider([text_reply("hi")])
    agent = build_agent(make_settings(tmp_path), provider=provider)
    agent.loop.run_turn("s-none", "hello")

    info = agent.store.session("s-none")
    assert info is not None
    assert info.usage.prompt_tokens == 0 and info.usage.read_ratio is None
    assert info.usage.output_tokens > 0  # the scripted reply reports output only


@pytest.fixture
def cap() -> Iterator[Captured]:
    captured = capture()
    yield captured
    captured.shutdown()


def test_real_cache_usage_from_the_api_reaches_counters_spans_and_metric(
    tmp_path: Path, cap: Captured, fake_api: FakeAnthropicAPI
) -> None:
    fake_api.responder = lambda body: api_text_reply("noted " * 30)
    overrides = {"anthropic_api_key": "sk-test", "anthropic_base_url": fake_api.base_url}
    settings = make_settings(tmp_path, window=200_000, **overrides)
    real = Recording(AnthropicProvider.from_settings(settings))
    agent = build_agent(
        settings,
        provider=instrument_provider(real, cap.telemetry),
        observers=[TelemetryObserver(cap.telemetry)],
    )
    for i in range(6):
        agent.loop.run_turn("s-real", f"Step {i}: " + "remember this detail. " * 80)

    reads = [u.cache_read_input_tokens or 0 for u in real.usages]
    writes = [u.cache_creation_input_tokens or 0 for u in real.usages]
    assert sum(reads) > 0 and sum(writes) > 0  # the fake's cache really served the calls
    info = agent.store.session("s-real")
    assert info is not None
    assert (info.usage.read_tokens, info.usage.write_tokens) == (sum(reads), sum(writes))
    assert info.usage.uncached_tokens == sum(u.input_tokens for u in real.usages)
    assert info.usage.output_tokens == sum(u.output_tokens for u in real.usages)
    spans = sorted(cap.named(f"chat {TEST_MODEL}"), key=lambda s: s.start_time or 0)
    assert [
        (
            (s.attributes or {})["gen_ai.usage.cache_read.input_tokens"],
            (s.attributes or {})["gen_ai.usage.cache_creation.input_tokens"],
        )
        for s in spans
    ] == list(zip(reads, writes, strict=True))
    (ratio,) = cap.points("hango.cache.read_ratio")
    totals = [u.total_input_tokens() for u in real.usages]
    assert ratio.count == len(real.usages)
    assert ratio.sum == pytest.approx(sum(r / t for r, t in zip(reads, totals, strict=True)))
