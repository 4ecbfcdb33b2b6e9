"""The instrumented provider and the telemetry observer, driven hook by hook.

Every span, event, attribute and metric is read back from in-memory exporters; the
end-to-end tests through the agent loop are in ``test_telemetry_agent.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from opentelemetry import metrics, trace
from opentelemetry.metrics._internal import _ProxyMeterProvider
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanKind, StatusCode

from hango.compaction.record import CompactionRecord
from hango.core.errors import ContextOverflowError
from hango.core.messages import Message, Request, Response, TextBlock, Usage
from hango.providers.scripted import ScriptedProvider, text_reply
from hango.telemetry import names as t
from hango.telemetry.observer import TelemetryObserver
from hango.telemetry.provider import InstrumentedProvider, instrument_provider
from hango.tokens.base import TokenCounter
from tests.otel_support import Captured, capture, point_with
from tests.scripted_counter import ScriptedCounter

MODEL = "claude-test-1"
SUMMARY_MODEL = "claude-small-1"


@pytest.fixture
def cap() -> Iterator[Captured]:
    captured = capture()
    yield captured
    captured.shutdown()


def request(model: str = MODEL) -> Request:
    return Request(model=model, max_tokens=512, messages=(Message(role="user", content="hi"),))


def reply(
    *, input_tokens: int = 100, output: int = 20, read: int = 0, created: int = 0
) -> Response:
    return Response(
        id="msg_1",
        model=MODEL + "-20260101",
        content=(TextBlock(text="ok"),),
        stop_reason="end_turn",
        usage=Usage(
            input_tokens=input_tokens,
            output_tokens=output,
            cache_read_input_tokens=read,
            cache_creation_input_tokens=created,
        ),
    )


def record(
    reason: str = "threshold", path: str | None = "/conversation_history/s1.md"
) -> CompactionRecord:
    return CompactionRecord.model_validate(
        {
            "at_turn": 3,
            "reason": reason,
            "kept_from_seq": 41,
            "summary": "SUMMARY",
            "offload_path": path,
            "tokens_before": 5200,
            "tokens_after": 900,
            "evicted_messages": 40,
            "summarizer": "inline",
        }
    )


# -- the chat span -------------------------------------------------------------------------


def test_chat_span_carries_semconv_attributes_and_usage_with_cache(cap: Captured) -> None:
    provider = InstrumentedProvider(ScriptedProvider([reply(read=300, created=50)]), cap.telemetry)
    with t.conversation("s1", 3):
        provider.complete(request())

    span = cap.one(f"chat {MODEL}")
    assert span.kind is SpanKind.CLIENT
    assert dict(span.attributes or {}) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "scripted",
        "gen_ai.request.model": MODEL,
        "gen_ai.request.max_tokens": 512,
        "gen_ai.conversation.id": "s1",
        "hango.turn": 3,
        "hango.call.purpose": "chat",
        "gen_ai.response.id": "msg_1",
        "gen_ai.response.model": MODEL + "-20260101",
        "gen_ai.response.finish_reasons": ("end_turn",),
        # semconv: input tokens include cache reads and writes (Anthropic reports them apart)
        "gen_ai.usage.input_tokens": 450,
        "gen_ai.usage.output_tokens": 20,
        "gen_ai.usage.cache_read.input_tokens": 300,
        "gen_ai.usage.cache_creation.input_tokens": 50,
    }
    assert span.status.status_code is StatusCode.UNSET


def test_usage_duration_and_cache_ratio_metrics(cap: Captured) -> None:
    provider = InstrumentedProvider(ScriptedProvider([reply(read=300, created=50)]), cap.telemetry)
    provider.complete(request())

    usage = cap.points("gen_ai.client.token.usage")
    input_point = point_with(usage, gen_ai__token__type="input", hango__call__purpose="chat")
    output_point = point_with(usage, gen_ai__token__type="output", hango__call__purpose="chat")
    assert (input_point.sum, output_point.sum) == (450, 20)
    assert input_point.attributes["gen_ai.provider.name"] == "scripted"
    assert input_point.attributes["gen_ai.request.model"] == MODEL
    assert input_point.explicit_bounds[:3] == (1.0, 4.0, 16.0)  # semconv buckets
    (duration,) = cap.points("gen_ai.client.operation.duration")
    assert duration.count == 1 and 0 <= duration.sum < 5
    assert "error.type" not in duration.attributes
    (ratio,) = cap.points("hango.cache.read_ratio")
    assert ratio.count == 1 and ratio.sum == pytest.approx(300 / 450)


def test_failure_sets_error_type_on_span_and_duration(cap: Captured) -> None:
    overflow = ContextOverflowError("prompt is too long: 7000 tokens > 6000 maximum", status=400)
    provider = InstrumentedProvider(ScriptedProvider([overflow]), cap.telemetry)
    with pytest.raises(ContextOverflowError):
        provider.complete(request())

    span = cap.one(f"chat {MODEL}")
    assert span.attributes is not None
    assert span.attributes["error.type"] == "ContextOverflowError"
    assert span.status.status_code is StatusCode.ERROR
    (duration,) = cap.points("gen_ai.client.operation.duration")
    assert duration.attributes["error.type"] == "ContextOverflowError"
    assert cap.points("gen_ai.client.token.usage") == []


def test_no_conversation_scope_means_no_conversation_id(cap: Captured) -> None:
    InstrumentedProvider(ScriptedProvider([reply()]), cap.telemetry).complete(request())
    attributes = cap.one(f"chat {MODEL}").attributes or {}
    assert "gen_ai.conversation.id" not in attributes
    assert "hango.turn" not in attributes


def test_wrapper_keeps_the_token_counter_ability_only_when_inner_has_it(cap: Captured) -> None:
    counting = instrument_provider(ScriptedCounter(count=lambda r: 77), cap.telemetry)
    plain = instrument_provider(ScriptedProvider(), cap.telemetry)
    assert isinstance(counting, TokenCounter)
    assert counting.count_tokens(request(), timeout=1.0) == 77
    assert not isinstance(plain, TokenCounter)
    assert plain.name == "scripted"


# -- the observer --------------------------------------------------------------------------


def test_turn_span_parents_the_chat_spans_and_counts_model_calls(cap: Captured) -> None:
    observer = TelemetryObserver(cap.telemetry)
    provider = InstrumentedProvider(ScriptedProvider([reply(), reply()]), cap.telemetry)
    with observer.turn("s1", 3):
        for _ in range(2):
            observer.request_sent("s1", 3, request(), 1234)
            provider.complete(request())

    turn = cap.one(t.TURN_SPAN)
    assert turn.name == "invoke_agent hango"
    assert dict(turn.attributes or {}) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "hango",
        "gen_ai.conversation.id": "s1",
        "hango.turn": 3,
        "hango.model_calls": 2,
    }
    chats = cap.named(f"chat {MODEL}")
    assert len(chats) == 2
    assert turn.context is not None
    for chat in chats:
        assert chat.parent is not None and chat.parent.span_id == turn.context.span_id
        assert (chat.attributes or {})["gen_ai.conversation.id"] == "s1"


def test_request_sent_records_input_tokens_by_model(cap: Captured) -> None:
    observer = TelemetryObserver(cap.telemetry)
    observer.request_sent("s1", 1, request(), 1234)
    observer.request_sent("s1", 1, request("other-model"), 10)

    points = cap.points("hango.context.input_tokens")
    assert point_with(points, gen_ai__request__model=MODEL).sum == 1234
    assert point_with(points, gen_ai__request__model="other-model").sum == 10


def test_compaction_event_metrics_log_and_flag_on_next_chat_span(
    cap: Captured, caplog: pytest.LogCaptureFixture
) -> None:
    observer = TelemetryObserver(cap.telemetry)
    summarizer = InstrumentedProvider(
        ScriptedProvider([text_reply("SUMMARY")]), cap.telemetry, purpose="summarize"
    )
    agent = InstrumentedProvider(ScriptedProvider([reply(), reply()]), cap.telemetry)
    caplog.set_level(logging.INFO, logger="hango.compaction")
    with observer.turn("s1", 3):
        summarizer.complete(request(SUMMARY_MODEL))  # the summary is made before the record
        observer.compacted("s1", record())
        agent.complete(request())
        agent.complete(request())

    (event,) = cap.one(t.TURN_SPAN).events
    assert event.name == "gen_ai.conversation.compacted"
    assert dict(event.attributes or {}) == {
        "hango.tokens.before": 5200,
        "hango.tokens.after": 900,
        "hango.messages.evicted": 40,
        "hango.compaction.reason": "threshold",
        "hango.compaction.kept_from_seq": 41,
        "hango.compaction.summarizer": "inline",
        "hango.turn": 3,
        "hango.fs.path": "/conversation_history/s1.md",
    }
    summary_span = cap.one(f"chat {SUMMARY_MODEL}")
    assert (summary_span.attributes or {})["hango.call.purpose"] == "summarize"
    assert "gen_ai.conversation.compacted" not in (summary_span.attributes or {})
    first, second = cap.named(f"chat {MODEL}")
    assert (first.attributes or {})["gen_ai.conversation.compacted"] is True
    assert "gen_ai.conversation.compacted" not in (second.attributes or {})

    (compactions,) = cap.points("hango.context.compactions")
    assert (dict(compactions.attributes), compactions.value) == ({"reason": "threshold"}, 1)
    (evicted,) = cap.points("hango.context.evicted_messages")
    assert (evicted.count, evicted.sum) == (1, 40)

    (line,) = [r for r in caplog.records if r.name == "hango.compaction"]
    assert line.levelno == logging.INFO
    message = line.getMessage()
    for expected in (
        "session_id=s1",
        "tokens_before=5200",
        "tokens_after=900",
        "messages_evicted=40",
        "offload_path=/conversation_history/s1.md",
    ):
        assert expected in message
    assert line.hango["session_id"] == "s1"  # type: ignore[attr-defined]
    assert line.hango["messages_evicted"] == 40  # type: ignore[attr-defined]


def test_summarize_usage_is_accounted_apart_from_chat(cap: Captured) -> None:
    summarizer = InstrumentedProvider(
        ScriptedProvider([reply(input_tokens=4000, output=300)]), cap.telemetry, purpose="summarize"
    )
    agent = InstrumentedProvider(
        ScriptedProvider([reply(input_tokens=900, output=50)]), cap.telemetry
    )
    summarizer.complete(request(SUMMARY_MODEL))
    agent.complete(request())

    usage = cap.points("gen_ai.client.token.usage")
    summary_input = point_with(usage, gen_ai__token__type="input", hango__call__purpose="summarize")
    chat_input = point_with(usage, gen_ai__token__type="input", hango__call__purpose="chat")
    assert (summary_input.sum, chat_input.sum) == (4000, 900)
    assert summary_input.attributes["gen_ai.request.model"] == SUMMARY_MODEL


def test_mechanical_truncation_has_an_empty_path_and_counts_by_reason(cap: Captured) -> None:
    observer = TelemetryObserver(cap.telemetry)
    with observer.turn("s1", 3):
        observer.compacted("s1", record("truncate", path=None))
        observer.compacted("s1", record("overflow"))
    events = cap.one(t.TURN_SPAN).events
    assert [(e.attributes or {})["hango.fs.path"] for e in events] == [
        "",
        "/conversation_history/s1.md",
    ]
    points = cap.points("hango.context.compactions")
    assert point_with(points, reason="truncate").value == 1
    assert point_with(points, reason="overflow").value == 1


def test_overflow_retry_is_an_event_on_the_turn_span(cap: Captured) -> None:
    observer = TelemetryObserver(cap.telemetry)
    with observer.turn("s1", 4):
        observer.overflow_retry("s1", 4, "overflow")
        observer.overflow_retry("s1", 4, "truncate")
    events = cap.one(t.TURN_SPAN).events
    assert [(e.name, dict(e.attributes or {})) for e in events] == [
        ("provider.context_overflow_retry", {"hango.retry.rung": "overflow", "hango.turn": 4}),
        ("provider.context_overflow_retry", {"hango.retry.rung": "truncate", "hango.turn": 4}),
    ]


def test_tool_args_truncated_and_invalid_requests_blocked(cap: Captured) -> None:
    observer = TelemetryObserver(cap.telemetry)
    with observer.turn("s1", 2):
        observer.tool_args_truncated("s1", 2, 3)
        observer.tool_args_truncated("s1", 2, 2)
        observer.invalid_request_blocked("s1", 2, ["orphan tool_result toolu_1", "x"])
    (truncated,) = cap.points("hango.context.tool_args_truncated")
    assert truncated.value == 5
    (blocked,) = cap.points("hango.context.invalid_requests_blocked")
    assert blocked.value == 1
    (event,) = cap.one(t.TURN_SPAN).events
    assert (event.name, dict(event.attributes or {})) == (
        "hango.request.invalid_blocked",
        {"hango.request.violations": 2, "hango.turn": 2},
    )


def test_a_failed_turn_marks_its_span(cap: Captured) -> None:
    observer = TelemetryObserver(cap.telemetry)
    with pytest.raises(RuntimeError), observer.turn("s1", 5):
        raise RuntimeError("tool crashed")
    span = cap.one(t.TURN_SPAN)
    assert (span.attributes or {})["error.type"] == "RuntimeError"
    assert span.status.status_code is StatusCode.ERROR


class _BrokenTelemetry(t.Telemetry):
    def record(
        self, spec: t.MetricSpec, value: float, attributes: t.Attributes | None = None
    ) -> None:
        raise RuntimeError("meter exploded")


def test_hooks_never_raise(caplog: pytest.LogCaptureFixture) -> None:
    # Real providers, so the hooks do record (and the meter explodes).
    observer = TelemetryObserver(_BrokenTelemetry(TracerProvider(), MeterProvider()))
    observer.compacted("s1", record())
    observer.request_sent("s1", 1, request(), 10)
    observer.tool_args_truncated("s1", 1, 2)
    observer.invalid_request_blocked("s1", 1, ["x"])
    failures = [r for r in caplog.records if "telemetry observer hook" in r.getMessage()]
    assert [r.getMessage().split()[3] for r in failures] == [
        "compacted",
        "request_sent",
        "tool_args_truncated",
        "invalid_request_blocked",
    ]


def test_every_declared_metric_is_emitted_with_its_unit_and_kind(cap: Captured) -> None:
    observer = TelemetryObserver(cap.telemetry)
    provider = InstrumentedProvider(ScriptedProvider([reply(read=10)]), cap.telemetry)
    with observer.turn("s1", 1):
        observer.request_sent("s1", 1, request(), 100)
        observer.compacted("s1", record())
        observer.tool_args_truncated("s1", 1, 1)
        observer.invalid_request_blocked("s1", 1, ["x"])
        provider.complete(request())
    cap.telemetry.record(t.QUEUE_WAIT_DURATION, 0.5, {t.HANGO_TASK_NAME: "hango.summarize"})

    emitted = cap.metrics()
    assert set(emitted) == {spec.name for spec in t.METRICS}
    for spec in t.METRICS:
        metric = emitted[spec.name]
        assert metric.unit == spec.unit, spec.name
        kind = type(metric.data).__name__
        assert kind == ("Sum" if spec.kind == "counter" else "Histogram"), spec.name
        if spec.buckets is not None:
            (point, *_) = metric.data.data_points
            assert point.explicit_bounds == spec.buckets, spec.name


# --- nothing configured: no per-call instrumentation -----------------------------------


def test_telemetry_records_only_when_a_real_provider_receives_it(
    cap: Captured, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert cap.telemetry.recording
    assert not t.Telemetry.noop().recording
    assert t.Telemetry(TracerProvider(), metrics.NoOpMeterProvider()).recording
    assert t.Telemetry(trace.NoOpTracerProvider(), MeterProvider()).recording
    # The API's global proxies: nothing set behind them yet, then a real provider set.
    proxies = t.Telemetry(trace.ProxyTracerProvider(), _ProxyMeterProvider())
    monkeypatch.setattr(trace, "get_tracer_provider", trace.ProxyTracerProvider)
    monkeypatch.setattr(metrics, "get_meter_provider", _ProxyMeterProvider)
    assert not proxies.recording
    monkeypatch.setattr(trace, "get_tracer_provider", TracerProvider)
    assert proxies.recording


def test_a_call_nothing_would_observe_goes_straight_through() -> None:
    inner = ScriptedProvider([reply(read=10)])
    provider = InstrumentedProvider(inner, t.Telemetry.noop())
    with t.conversation("s1", 1) as scope:
        scope.compacted_pending = True
        answer = provider.complete(request())
    assert answer.usage.cache_read_input_tokens == 10
    assert [r.model for r in inner.requests] == [MODEL]
    # The call after a compaction was made: a span recorded later must not claim it.
    assert scope.compacted_pending is False
