"""One trace from the agent's turn to the summarizer's call on a real worker process.

The agent runs in this process with in-memory telemetry and the publishing side traced;
the worker is ``celery -A hango_worker worker -P prefork``, set up from the standard ``OTEL_*``
variables in ``worker_process_init`` and exporting OTLP/HTTP to a loopback receiver. The
turn span, the publish span, the worker's ``run`` span and the summarizer's ``chat`` span
on the worker must share one trace id and chain parent to child.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from hango.providers.scripted import ScriptedProvider, text_reply
from hango.queue.celery_config import SUMMARIZE_TASK
from hango.store import Store
from hango.telemetry import names as t
from hango.telemetry.observer import TelemetryObserver
from hango.telemetry.provider import instrument_provider
from hango.telemetry.publish import CeleryPublishTracer
from hango.wiring.agent import build_agent
from tests.agent_support import TEST_MODEL
from tests.integration.worker_support import (
    ProviderProbe,
    claimed_redis_db,
    clear_job_keys,
    queue_settings,
    redis_url,
    running_worker,
    wait_until,
)
from tests.otel_support import Captured, OtlpReceiver, ReceivedSpan, capture

pytestmark = pytest.mark.integration

SESSION = "s-traced"
SUMMARY_MODEL = "summ-traced"
FACT = "Please remember fact {i}: the deploy key id is key-{i:04d}. " + "context " * 180
SPAN_KIND_CLIENT = 3  # opentelemetry.proto.trace.v1.Span.SpanKind


@pytest.fixture
def cap() -> Iterator[Captured]:
    captured = capture()
    tracer = CeleryPublishTracer(captured.telemetry.tracer).connect()
    yield captured
    tracer.disconnect()
    captured.shutdown()


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[OtlpReceiver]:
    """The worker's collector; the variables reach the worker through its environment."""
    with OtlpReceiver() as running:
        monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
        monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", running.endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "200")
        monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "500")
        yield running


def hex_id(value: int, width: int) -> str:
    return f"{value:0{width}x}"


@pytest.fixture
def redis_db() -> Iterator[int]:
    """A Redis database no other test run's worker listens on."""
    with claimed_redis_db() as db:
        yield db


def one(spans: list[ReceivedSpan], name: str) -> ReceivedSpan:
    found = [span for span in spans if span.name == name]
    assert len(found) == 1, f"expected one {name!r}, got {[s.name for s in spans]}"
    return found[0]


def test_turn_publish_worker_run_and_summarizer_share_one_trace(
    cap: Captured,
    receiver: OtlpReceiver,
    pg_url: str,
    pg_store: Store,
    tmp_path: Path,
    redis_db: int,
) -> None:
    client = redis.Redis.from_url(redis_url(redis_db))
    settings = queue_settings(
        redis=redis_url(redis_db),
        database_url=pg_url,
        history_root=tmp_path / "history",
        model=TEST_MODEL,
        model_profiles={TEST_MODEL: {"max_input_tokens": 6000}},
        summarizer_model=SUMMARY_MODEL,
        # Published at the trigger, inside the compacting turn's trace.
        context_presummarize_frac=1,
    )
    chat = ScriptedProvider(fallback=lambda r: text_reply("noted", model=r.model))
    inline = ScriptedProvider(fallback=lambda r: text_reply("inline summary, unexpected"))
    agent = build_agent(
        settings,
        provider=instrument_provider(chat, cap.telemetry),
        summarizer_provider=instrument_provider(inline, cap.telemetry, purpose="summarize"),
        observers=[TelemetryObserver(cap.telemetry)],
        store=pg_store,
    )
    with running_worker(settings, tmp_path / "worker.log", name="otel", concurrency=1) as worker:
        clear_job_keys(client)
        result = None
        for i in range(20):
            result = agent.loop.run_turn(SESSION, FACT.format(i=i))
            if result.compactions:
                break
        assert result is not None and result.compactions, "the session must compact"
        (record,) = result.compactions
        assert record.fallback_reason is None, record.fallback_reason
        assert ProviderProbe(client).calls() >= 1, worker.log_tail()
        spans = receiver.wait_for_spans({f"run/{SUMMARIZE_TASK}", f"chat {SUMMARY_MODEL}"})
        wait_until(
            lambda: (
                {"gen_ai.client.token.usage", "hango.queue.wait.duration"}
                <= set(receiver.metric_names())
            ),
            20,
            "the worker's metrics never arrived",
        )

    turn = [s for s in cap.named(t.TURN_SPAN) if (s.attributes or {})["hango.turn"] == result.turn]
    assert len(turn) == 1 and turn[0].context is not None
    trace_id = hex_id(turn[0].context.trace_id, 32)
    (compacted,) = [e for e in turn[0].events if e.name == "gen_ai.conversation.compacted"]
    assert (compacted.attributes or {})["hango.compaction.summarizer"] == record.summarizer

    publishes = [
        s
        for s in cap.named(f"apply_async/{SUMMARIZE_TASK}")
        if s.context is not None and hex_id(s.context.trace_id, 32) == trace_id
    ]
    assert len(publishes) == 1
    publish = publishes[0]
    assert publish.parent is not None and publish.parent.span_id == turn[0].context.span_id
    assert publish.context is not None

    run = one([s for s in spans if s.trace_id == trace_id], f"run/{SUMMARIZE_TASK}")
    assert run.parent_span_id == hex_id(publish.context.span_id, 16)
    assert run.resource["service.name"] == "hango-worker"

    summary = one([s for s in spans if s.trace_id == trace_id], f"chat {SUMMARY_MODEL}")
    assert summary.parent_span_id == run.span_id
    assert summary.kind == SPAN_KIND_CLIENT
    assert summary.attributes["hango.call.purpose"] == "summarize"
    assert summary.attributes["gen_ai.operation.name"] == "chat"
    assert summary.attributes["gen_ai.provider.name"] == "counting"
    assert summary.attributes["gen_ai.request.model"] == SUMMARY_MODEL
    assert summary.attributes["gen_ai.conversation.id"] == SESSION
    assert summary.attributes["hango.turn"] == result.turn
    assert summary.attributes["gen_ai.usage.output_tokens"] > 0

    # The summary came from the worker, not from the inline fallback.
    assert cap.named(f"chat {SUMMARY_MODEL}") == []
    assert inline.requests == []
    # The agent's next chat span in the turn carries the compaction flag.
    flagged = [
        s
        for s in cap.named(f"chat {TEST_MODEL}")
        if (s.attributes or {}).get("gen_ai.conversation.compacted") is True
    ]
    assert len(flagged) == 1
    assert flagged[0].parent is not None
    assert flagged[0].parent.span_id == turn[0].context.span_id
    assert receiver.metric_names()["hango.queue.wait.duration"]["service.name"] == "hango-worker"
