"""Telemetry of real turns: the agent loop with the instrumented provider and the observer.

The agent runs on the embedded default (SQLite, local history) with scripted models, or
with the real Anthropic SDK against the loopback fake for the secrets test. Wiring is the
one ``build_agent`` gets in production: the agent's provider and the summarizer's
provider each wrapped by ``instrument_provider`` (purposes ``chat`` and ``summarize``),
and a ``TelemetryObserver`` on the loop.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan

from hango.core.errors import ContextOverflowError
from hango.core.messages import Usage
from hango.providers.anthropic import AnthropicProvider
from hango.providers.base import Provider
from hango.providers.scripted import ScriptedProvider, text_reply
from hango.telemetry import names as t
from hango.telemetry.observer import TelemetryObserver
from hango.telemetry.provider import instrument_provider
from hango.wiring.agent import Agent, build_agent
from tests.agent_support import TEST_MODEL, make_settings
from tests.fakeapi import FakeAnthropicAPI, fake_api
from tests.fakeapi import text_reply as api_text_reply
from tests.otel_support import Captured, capture, point_with

__all__ = ["fake_api"]  # the fixture, imported so pytest finds it here

SUMMARY_MODEL = "test-summarizer"
SECRET = "sk-ant-api03-TELEMETRY-MUST-NOT-SHOW-0123456789"
SUMMARY = (
    "Briefing: the user asked us to remember a series of numbered facts; each fact names a "
    "deploy key id of the form key-NNNN. Facts so far are recorded verbatim in the history "
    "file; read it with read_file when an exact id is needed. No open questions remain."
)
FACT = "Please remember fact {i}: the deploy key id is key-{i:04d}. " + "context " * 180


@pytest.fixture
def cap() -> Iterator[Captured]:
    captured = capture()
    yield captured
    captured.shutdown()


def instrumented_agent(
    tmp_path: Path, cap: Captured, chat: Provider, summarizer: Provider, **overrides: Any
) -> Agent:
    settings = make_settings(tmp_path, summarizer_model=SUMMARY_MODEL, **overrides)
    return build_agent(
        settings,
        provider=instrument_provider(chat, cap.telemetry),
        summarizer_provider=instrument_provider(summarizer, cap.telemetry, purpose="summarize"),
        observers=[TelemetryObserver(cap.telemetry)],
    )


def scripted_summarizer() -> ScriptedProvider:
    return ScriptedProvider(fallback=lambda r: text_reply(SUMMARY, model=r.model))


def turn_spans(cap: Captured) -> list[ReadableSpan]:
    return sorted(cap.named(t.TURN_SPAN), key=lambda s: (s.attributes or {})["hango.turn"])


def children(cap: Captured, parent: ReadableSpan) -> list[ReadableSpan]:
    assert parent.context is not None
    found = [
        s
        for s in cap.spans()
        if s.parent is not None and s.parent.span_id == parent.context.span_id
    ]
    return sorted(found, key=lambda s: s.start_time or 0)


def attrs(span: Any) -> dict[str, Any]:
    return dict(span.attributes or {})


def test_compacted_turn(tmp_path: Path, cap: Captured, caplog: pytest.LogCaptureFixture) -> None:
    chat = ScriptedProvider(fallback=lambda r: text_reply("noted", model=r.model))
    # Summarized at the trigger, inside the compacting turn (a pre-summary's span belongs
    # to the turn that dispatched it).
    agent = instrumented_agent(
        tmp_path, cap, chat, scripted_summarizer(), context_presummarize_frac=1
    )
    caplog.set_level(logging.INFO, logger="hango.compaction")
    results = [agent.loop.run_turn("s-tel", FACT.format(i=i)) for i in range(16)]

    compacted = [r for r in results if r.compactions]
    assert compacted, "the session must go over the trigger"
    result = compacted[0]
    (record,) = result.compactions
    turn = turn_spans(cap)[result.turn - 1]
    assert attrs(turn)["hango.turn"] == result.turn
    assert attrs(turn)["gen_ai.conversation.id"] == "s-tel"
    assert attrs(turn)["hango.model_calls"] == result.model_calls

    (event,) = [e for e in turn.events if e.name == "gen_ai.conversation.compacted"]
    assert record.route is not None
    assert attrs(event) == {
        "hango.tokens.before": record.tokens_before,
        "hango.tokens.after": record.tokens_after,
        "hango.messages.evicted": record.evicted_messages,
        "hango.compaction.reason": "threshold",
        "hango.compaction.kept_from_seq": record.kept_from_seq,
        "hango.compaction.summarizer": record.summarizer,
        "hango.turn": result.turn,
        "hango.fs.path": "/conversation_history/s-tel.md",
        # The range route (the tests' settings force it), its estimate and real cost.
        "hango.compaction.route": "range",
        "hango.compaction.route_reason": "HANGO_SUMMARY_ROUTE=range",
        "hango.compaction.expected_range_usd": record.route.expected_range_usd,
        "hango.compaction.summary_cost_usd": record.route.cost_usd,
    }
    assert (record.route.expected_range_usd or 0) > 0
    assert record.tokens_after < record.tokens_before

    # Within the turn: the summarizer's own chat span, then the agent's flagged chat span.
    summary_span, chat_span = children(cap, turn)
    assert summary_span.name == f"chat {SUMMARY_MODEL}"
    assert attrs(summary_span)["hango.call.purpose"] == "summarize"
    assert attrs(summary_span)["gen_ai.conversation.id"] == "s-tel"
    assert chat_span.name == f"chat {TEST_MODEL}"
    assert attrs(chat_span)["gen_ai.conversation.compacted"] is True
    assert attrs(chat_span)["hango.call.purpose"] == "chat"
    flagged = [s for s in cap.spans() if attrs(s).get("gen_ai.conversation.compacted")]
    assert len(flagged) == sum(len(r.compactions) for r in results)

    all_records = [c for r in results for c in r.compactions]
    points = cap.points("hango.context.compactions")
    assert point_with(points, reason="threshold").value == len(all_records)
    (evicted,) = cap.points("hango.context.evicted_messages")
    assert evicted.sum == sum(c.evicted_messages for c in all_records)
    (input_tokens,) = cap.points("hango.context.input_tokens")
    assert input_tokens.count == len(chat.requests)
    assert input_tokens.attributes == {"gen_ai.request.model": TEST_MODEL}
    usage = cap.points("gen_ai.client.token.usage")
    summary_output = point_with(
        usage, gen_ai__token__type="output", hango__call__purpose="summarize"
    )
    assert summary_output.count == len(all_records)

    lines = [r for r in caplog.records if r.name == "hango.compaction"]
    assert len(lines) == len(all_records)
    assert f"tokens_before={record.tokens_before}" in lines[0].getMessage()
    assert "session_id=s-tel" in lines[0].getMessage()


def test_overflow_retry_turn(tmp_path: Path, cap: Captured) -> None:
    chat = ScriptedProvider(fallback=lambda r: text_reply("noted", model=r.model))
    agent = instrumented_agent(tmp_path, cap, chat, scripted_summarizer())
    for i in range(4):
        agent.loop.run_turn("s-over", FACT.format(i=i))
    overflow = ContextOverflowError("prompt is too long: 7000 tokens > 6000 maximum",
                                    tokens=7000, maximum=6000, status=400)  # fmt: skip
    chat.push(overflow, text_reply("answered after the retry", model=TEST_MODEL))
    result = agent.loop.run_turn("s-over", "one more")

    (record,) = result.compactions
    assert record.reason == "overflow"
    turn = turn_spans(cap)[-1]
    names = [e.name for e in turn.events]
    assert names == ["provider.context_overflow_retry", "gen_ai.conversation.compacted"]
    assert attrs(turn.events[0]) == {"hango.retry.rung": "overflow", "hango.turn": result.turn}
    assert attrs(turn.events[1])["hango.compaction.reason"] == "overflow"

    chats = [s for s in children(cap, turn) if attrs(s)["hango.call.purpose"] == "chat"]
    failed, retried = chats
    assert attrs(failed)["error.type"] == "ContextOverflowError"
    assert "gen_ai.conversation.compacted" not in attrs(failed)
    assert attrs(retried)["gen_ai.conversation.compacted"] is True
    assert "error.type" not in attrs(retried)
    points = cap.points("hango.context.compactions")
    assert point_with(points, reason="overflow").value == 1
    durations = cap.points("gen_ai.client.operation.duration")
    assert point_with(durations, error__type="ContextOverflowError").count == 1


def test_no_secret_in_logs_spans_or_metrics(
    tmp_path: Path, cap: Captured, caplog: pytest.LogCaptureFixture, fake_api: FakeAnthropicAPI
) -> None:
    fake_api.responder = lambda body: api_text_reply("noted")
    overrides = {"anthropic_api_key": SECRET, "anthropic_base_url": fake_api.base_url}
    settings = make_settings(tmp_path, **overrides)
    real = AnthropicProvider.from_settings(settings)
    caplog.set_level(logging.DEBUG)
    agent = instrumented_agent(tmp_path, cap, real, real, **overrides)
    results = [agent.loop.run_turn("s-secret", FACT.format(i=i)) for i in range(14)]

    assert any(r.compactions for r in results)
    assert any(SECRET in r.headers.get("authorization", "") for r in fake_api.requests)  # used
    assert any(s.name == f"chat {SUMMARY_MODEL}" for s in cap.spans())
    seen: list[str] = [caplog.text]
    seen += [repr(vars(r)) for r in caplog.records]
    for span in cap.spans():
        seen += [span.name, repr(attrs(span)), repr(dict(span.resource.attributes))]
        seen += [f"{e.name} {attrs(e)}" for e in span.events]
        seen.append(span.status.description or "")
    for metric in cap.metrics().values():
        seen += [repr(dict(p.attributes)) for p in metric.data.data_points]
    leaked = [text for text in seen if SECRET in text or SECRET[-20:] in text]
    assert leaked == []


# -- the summarizer's usage, apart from the agent's (issue 14, defect 6) --------------------


def test_build_agent_accounts_for_the_summarizer_apart_without_the_cli(
    tmp_path: Path, cap: Captured
) -> None:
    summary_usage = Usage(input_tokens=1234, output_tokens=56)
    chat = ScriptedProvider(fallback=lambda r: text_reply("noted"))
    summarizer = ScriptedProvider(
        fallback=lambda r: text_reply("A briefing long enough to be a summary. " * 3).model_copy(
            update={"usage": summary_usage}
        )
    )
    # Plain providers: build_agent instruments them itself.
    agent = build_agent(
        make_settings(tmp_path),
        provider=chat,
        summarizer_provider=summarizer,
        telemetry=cap.telemetry,
    )
    results = [
        agent.loop.run_turn("s", f"Remember fact {i}. " + "detail " * 150) for i in range(16)
    ]
    compacted = [r for r in results if any(c.summarizer == "llm" for c in r.compactions)]
    assert compacted, "no model summary: the test proves nothing"
    record = next(c for c in compacted[0].compactions if c.summarizer == "llm")
    # A pre-summary extended before the trigger carries the usage of every call it took.
    assert record.summary_usage is not None
    calls = record.summary_usage.input_tokens // summary_usage.input_tokens
    assert calls >= 1
    assert record.summary_usage == Usage(
        input_tokens=summary_usage.input_tokens * calls,
        output_tokens=summary_usage.output_tokens * calls,
    )
    assert compacted[0].summarizer_usage == record.summary_usage
    assert all(r.summarizer_usage is None for r in results if not r.compactions)
    stored = [c for run in agent.store.runs("s") for c in run.state.compactions]
    assert any(c.summary_usage == record.summary_usage for c in stored)
    tokens = cap.points(t.CLIENT_TOKEN_USAGE.name)
    summarize = point_with(
        tokens, **{t.HANGO_CALL_PURPOSE: t.PURPOSE_SUMMARIZE, t.GEN_AI_TOKEN_TYPE: "input"}
    )
    llm = [c for r in compacted for c in r.compactions if c.summarizer == "llm"]
    recorded = sum(c.summary_usage.input_tokens for c in llm if c.summary_usage)
    # Telemetry counts every summarizer call, the records those whose summary was used.
    assert summarize.sum % summary_usage.input_tokens == 0
    assert summarize.sum >= recorded
    assert point_with(
        tokens, **{t.HANGO_CALL_PURPOSE: t.PURPOSE_CHAT, t.GEN_AI_TOKEN_TYPE: "input"}
    )
