"""Setting telemetry up from the standard ``OTEL_*`` environment, and the worker signals.

Export goes to a loopback OTLP/HTTP receiver (or to a closed port, for the collector
that is down); the global providers are never set here (``set_global=False``).
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from celery import Celery, signals
from kombu.exceptions import OperationalError
from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode

from hango.core.settings import load_settings
from hango.queue.dispatch import CeleryDispatcher, producer_app
from hango.telemetry import names as t
from hango.telemetry.publish import MAX_PENDING_PUBLISHES, CeleryPublishTracer, stamp_enqueued_at
from hango.telemetry.setup import DEFAULT_EXPORT_TIMEOUT, setup_telemetry
from hango_worker import signals as worker_signals
from tests.otel_support import OtlpReceiver, capture

OTEL_VARIABLES = (
    "OTEL_SDK_DISABLED",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_TRACES_EXPORTER",
    "OTEL_METRICS_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TIMEOUT",
    "OTEL_METRIC_EXPORT_INTERVAL",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in OTEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as running:
        yield running


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def emit_one_of_each(telemetry: t.Telemetry) -> None:
    with telemetry.tracer.start_as_current_span(t.TURN_SPAN):
        telemetry.record(t.CONTEXT_COMPACTIONS, 1, {t.METRIC_REASON: "threshold"})


def test_nothing_is_exported_when_nothing_is_configured() -> None:
    handle = setup_telemetry("hango", set_global=False)
    assert handle.exporters == ()
    assert not handle.exporting
    assert isinstance(handle.telemetry.tracer_provider, trace.NoOpTracerProvider)
    emit_one_of_each(handle.telemetry)
    handle.shutdown()


def test_otlp_http_export_honours_endpoint_and_service_name(
    receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "hango-test")
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "600000")  # only the flush at shutdown
    handle = setup_telemetry("hango", set_global=False)
    assert handle.exporters == ("traces:otlp", "metrics:otlp")
    emit_one_of_each(handle.telemetry)
    handle.shutdown()  # flushes: nothing would arrive before the interval otherwise

    (span,) = receiver.spans()
    assert span.name == t.TURN_SPAN
    assert span.resource["service.name"] == "hango-test"
    metrics = receiver.metric_names()
    assert metrics["hango.context.compactions"]["service.name"] == "hango-test"


def test_default_service_name_when_the_environment_names_none(
    receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", receiver.endpoint + "/v1/traces")
    handle = setup_telemetry("hango-cli", set_global=False)
    assert handle.exporters == ("traces:otlp",)  # only the signal whose endpoint is set
    emit_one_of_each(handle.telemetry)
    handle.shutdown()
    (span,) = receiver.spans()
    assert span.resource["service.name"] == "hango-cli"
    assert receiver.metric_names() == {}


def test_exporter_none_turns_a_signal_off(
    receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    handle = setup_telemetry("hango", set_global=False)
    assert handle.exporters == ("metrics:otlp",)
    emit_one_of_each(handle.telemetry)
    handle.shutdown()
    assert receiver.spans() == []
    assert "hango.context.compactions" in receiver.metric_names()


def test_sdk_disabled_wins(receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    handle = setup_telemetry("hango", set_global=False)
    assert not handle.exporting
    emit_one_of_each(handle.telemetry)
    handle.shutdown()
    assert receiver.bodies == {}


SDK_BLOCKED = """
import logging, sys
for name in ("opentelemetry.sdk", "opentelemetry.exporter", "opentelemetry.instrumentation"):
    sys.modules[name] = None  # as if only opentelemetry-api were installed
logging.basicConfig(level=logging.WARNING, format="%(message)s")
from hango.telemetry.setup import setup_telemetry
handle = setup_telemetry("hango", celery_role="producer")
print("exporting", handle.exporting)
handle.shutdown()
"""


@pytest.mark.parametrize("endpoint", ["http://127.0.0.1:9", ""])
def test_without_the_sdk_setup_degrades_and_says_which_extra_to_install(endpoint: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
    ran = subprocess.run(
        [sys.executable, "-c", SDK_BLOCKED], env=env, capture_output=True, text=True, check=True
    )
    assert ran.stdout.strip() == "exporting False"
    warned = "pip install 'hango-context[otel]'" in ran.stderr
    assert warned is bool(endpoint), ran.stderr  # a warning only when export was asked for


@pytest.mark.parametrize("protocol", ["http/json", "grpc"])
def test_unsupported_protocol_is_a_warning_not_a_crash(
    protocol: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
    try:
        import opentelemetry.exporter.otlp.proto.grpc  # noqa: F401

        grpc_installed = True
    except ImportError:
        grpc_installed = False
    handle = setup_telemetry("hango", set_global=False)
    handle.shutdown()
    if protocol == "grpc" and grpc_installed:
        assert handle.exporters == ("traces:otlp", "metrics:otlp")
        return
    assert handle.exporters == ()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(repr(protocol) in w and "traces will not be exported" in w for w in warnings)
    assert any(repr(protocol) in w and "metrics will not be exported" in w for w in warnings)


def test_a_collector_that_is_down_never_breaks_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    handle = setup_telemetry("hango", set_global=False)
    emit_one_of_each(handle.telemetry)
    started = time.monotonic()
    handle.shutdown()  # exporters log the failure and give up; nothing raises
    # Each signal gives up within the short default timeout (the SDK default is 10 s).
    assert time.monotonic() - started < 2 * DEFAULT_EXPORT_TIMEOUT + 2
    handle.shutdown()  # twice is fine


# -- Celery: the publish stamp and the worker's task scope -----------------------------------


def test_publish_stamp_and_worker_queue_wait() -> None:
    headers: dict[str, object] = {}
    stamp_enqueued_at(headers)
    enqueued_at = headers[t.ENQUEUED_AT_HEADER]
    assert isinstance(enqueued_at, float) and abs(enqueued_at - time.time()) < 5

    cap = capture()
    request = SimpleNamespace(**{t.ENQUEUED_AT_HEADER: time.time() - 2.0})
    worker_signals.record_queue_wait(
        cap.telemetry, SimpleNamespace(request=request, name="hango.summarize")
    )
    (point,) = cap.points("hango.queue.wait.duration")
    assert point.attributes == {"hango.task.name": "hango.summarize"}
    assert 2.0 <= point.sum < 7.0
    cap.shutdown()


def test_worker_task_scope_follows_the_task_arguments() -> None:
    kwargs = {"session_id": "s-9", "turn": 12, "from_seq": 1, "to_seq": 30}
    worker_signals.open_task_scope(task_id="task-1", task=None, kwargs=kwargs)
    scope = t.current_conversation()
    assert scope is not None and (scope.session_id, scope.turn) == ("s-9", 12)
    worker_signals.close_task_scope(task_id="task-1")
    assert t.current_conversation() is None

    worker_signals.open_task_scope(task_id="task-2", task=None, kwargs={"x": 1})
    assert t.current_conversation() is None
    worker_signals.close_task_scope(task_id="task-2")


def test_publishing_by_name_is_a_producer_span_whose_context_travels_in_the_headers() -> None:
    cap = capture()
    tracer = CeleryPublishTracer(cap.telemetry.tracer).connect()
    seen: list[dict[str, object]] = []

    def keep_headers(headers: dict[str, object] | None = None, **_: object) -> None:
        seen.append(dict(headers or {}))

    signals.before_task_publish.connect(keep_headers, weak=False)  # after the tracer's
    app = Celery("producer-test", broker="memory://", set_as_current=False)
    try:
        with cap.telemetry.tracer.start_as_current_span(t.TURN_SPAN) as turn:
            app.send_task("hango.summarize", kwargs={"session_id": "s1", "turn": 2})
            # Nothing is left current: the turn's later spans stay children of the turn.
            assert trace.get_current_span() is turn
    finally:
        signals.before_task_publish.disconnect(keep_headers)
        tracer.disconnect()
        app.close()

    publish = cap.one("apply_async/hango.summarize")
    assert publish.kind is SpanKind.PRODUCER
    assert publish.parent is not None and publish.parent.span_id == turn.get_span_context().span_id
    (headers,) = seen
    assert publish.context is not None
    trace_id, span_id = f"{publish.context.trace_id:032x}", f"{publish.context.span_id:016x}"
    assert str(headers["traceparent"]).startswith(f"00-{trace_id}-{span_id}-")
    assert publish.attributes is not None
    assert publish.attributes["messaging.message.id"] == headers["id"]
    assert publish.attributes["celery.task_name"] == "hango.summarize"
    assert isinstance(headers[t.ENQUEUED_AT_HEADER], float)
    assert tracer.pending() == 0
    cap.shutdown()


def test_unconfirmed_publishes_are_closed_as_failures_beyond_a_bound() -> None:
    cap = capture()
    tracer = CeleryPublishTracer(cap.telemetry.tracer)
    for i in range(MAX_PENDING_PUBLISHES + 2):
        tracer.before_publish(sender="hango.offload", headers={"id": f"task-{i}"})
    assert tracer.pending() == MAX_PENDING_PUBLISHES
    lost = cap.named("apply_async/hango.offload")
    assert len(lost) == 2
    assert {s.attributes["messaging.message.id"] for s in lost if s.attributes} == {
        "task-0",
        "task-1",
    }
    assert all(s.status.status_code is StatusCode.ERROR for s in lost)
    cap.shutdown()


def test_redis_commands_and_sql_statements_become_spans() -> None:
    import redis
    from sqlalchemy import text

    from hango.store.repository import engine_from_url
    from hango.telemetry.setup import _client_instrumentors, trace_clients

    cap = capture()
    trace_clients(cap.tracer_provider)  # after the store module was imported, as in the CLI
    try:
        engine = engine_from_url("sqlite://")
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        engine.dispose()
        closed = redis.Redis(host="127.0.0.1", port=_closed_port(), socket_connect_timeout=0.5)
        with pytest.raises(redis.ConnectionError):
            closed.ping()
    finally:
        for instrumentor in _client_instrumentors():
            instrumentor.uninstrument()
    spans = {span.name: span for span in cap.exporter.get_finished_spans()}
    assert spans["SELECT"].attributes["db.statement"] == "SELECT 1"
    assert "PING" in spans, spans
    assert spans["PING"].status.status_code is StatusCode.ERROR
    cap.shutdown()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_publish_the_broker_refuses_ends_its_span_as_an_error() -> None:
    cap = capture()
    tracer = CeleryPublishTracer(cap.telemetry.tracer).connect()
    down = f"redis://127.0.0.1:{closed_port()}/0"
    dispatcher = CeleryDispatcher(producer_app(load_settings(redis_url=down)))
    try:
        with pytest.raises(OperationalError):
            dispatcher.dispatch("hango.summarize", {"session_id": "s1", "turn": 2}, expires=5)
    finally:
        tracer.disconnect()
        dispatcher.app.close()

    assert tracer.pending() == 0
    failed = cap.one("apply_async/hango.summarize")
    assert failed.status.status_code is StatusCode.ERROR
    assert [event.name for event in failed.events] == ["exception"]
    cap.shutdown()
