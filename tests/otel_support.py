"""Capturing telemetry in tests: in-memory providers, and a loopback OTLP/HTTP receiver.

``capture()`` builds a :class:`~hango.telemetry.Telemetry` on a tracer provider with an
in-memory span exporter and a meter provider with an in-memory reader, so tests read
exactly what the code recorded without touching the global providers.

``OtlpReceiver`` is a stdlib HTTP server on 127.0.0.1 that accepts OTLP/HTTP protobuf
exports (``/v1/traces``, ``/v1/metrics``) and decodes them, for tests of the
``OTEL_*``-driven setup and of worker processes that export for real.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, Metric
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from hango.telemetry.names import Telemetry


@dataclass
class Captured:
    """What the code under test recorded."""

    telemetry: Telemetry
    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader
    tracer_provider: TracerProvider
    meter_provider: MeterProvider

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        return [span for span in self.spans() if span.name == name]

    def one(self, name: str) -> ReadableSpan:
        found = self.named(name)
        assert len(found) == 1, f"expected one span {name!r}, got {[s.name for s in self.spans()]}"
        return found[0]

    def metrics(self) -> dict[str, Metric]:
        data = self.reader.get_metrics_data()
        found: dict[str, Metric] = {}
        if data is None:
            return found
        for resource_metrics in data.resource_metrics:
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    found[metric.name] = metric
        return found

    def points(self, name: str) -> list[Any]:
        """The data points of metric ``name`` (empty when it was never recorded)."""
        metric = self.metrics().get(name)
        return list(metric.data.data_points) if metric is not None else []

    def shutdown(self) -> None:
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


def capture() -> Captured:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    telemetry = Telemetry(tracer_provider, meter_provider)
    return Captured(telemetry, exporter, reader, tracer_provider, meter_provider)


def point_with(points: Sequence[Any], **attributes: Any) -> Any:
    """The one data point whose attributes include ``attributes`` (dots spelled ``__``)."""
    wanted = {key.replace("__", "."): value for key, value in attributes.items()}
    matching = [p for p in points if all(p.attributes.get(k) == v for k, v in wanted.items())]
    assert len(matching) == 1, (
        f"expected one point with {wanted}, got {[p.attributes for p in points]}"
    )
    return matching[0]


# -- a loopback OTLP/HTTP receiver ------------------------------------------------------------


def any_value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return tuple(any_value(v) for v in value.array_value.values)
    return getattr(value, kind) if kind else None


def attributes_of(pairs: Sequence[KeyValue]) -> dict[str, Any]:
    return {pair.key: any_value(pair.value) for pair in pairs}


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    attributes: dict[str, Any]
    events: tuple[tuple[str, dict[str, Any]], ...]
    resource: dict[str, Any]


@dataclass
class OtlpReceiver:
    """Accepts OTLP/HTTP protobuf on a free loopback port."""

    bodies: dict[str, list[bytes]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    def __enter__(self) -> OtlpReceiver:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _OtlpHandler)
        server.daemon_threads = True
        server.receiver = self  # type: ignore[attr-defined]
        self._server = server
        threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def endpoint(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def store(self, path: str, body: bytes) -> None:
        with self._lock:
            self.bodies.setdefault(path, []).append(body)

    def spans(self) -> list[ReceivedSpan]:
        with self._lock:
            bodies = list(self.bodies.get("/v1/traces", []))
        return [span for body in bodies for span in _decode_spans(body)]

    def metric_names(self) -> dict[str, dict[str, Any]]:
        """Metric name → the resource attributes it was exported with."""
        with self._lock:
            bodies = list(self.bodies.get("/v1/metrics", []))
        names: dict[str, dict[str, Any]] = {}
        for body in bodies:
            request = ExportMetricsServiceRequest.FromString(body)
            for resource_metrics in request.resource_metrics:
                resource = attributes_of(resource_metrics.resource.attributes)
                for scope in resource_metrics.scope_metrics:
                    for metric in scope.metrics:
                        names[metric.name] = resource
        return names

    def wait_for_spans(self, names: set[str], timeout: float = 20.0) -> list[ReceivedSpan]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            spans = self.spans()
            if names <= {span.name for span in spans}:
                return spans
            time.sleep(0.05)
        raise AssertionError(f"spans {names} not received; got {[s.name for s in self.spans()]}")


def _decode_spans(body: bytes) -> Iterator[ReceivedSpan]:
    request = ExportTraceServiceRequest.FromString(body)
    for resource_spans in request.resource_spans:
        resource = attributes_of(resource_spans.resource.attributes)
        for scope in resource_spans.scope_spans:
            for span in scope.spans:
                yield ReceivedSpan(
                    name=span.name,
                    trace_id=span.trace_id.hex(),
                    span_id=span.span_id.hex(),
                    parent_span_id=span.parent_span_id.hex(),
                    kind=span.kind,
                    attributes=attributes_of(span.attributes),
                    events=tuple((e.name, attributes_of(e.attributes)) for e in span.events),
                    resource=resource,
                )


class _OtlpHandler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        self.server.receiver.store(self.path, body)  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return None
