"""Starting and stopping OpenTelemetry export from the standard ``OTEL_*`` environment.

``hango`` commands call :func:`setup_telemetry` at start-up and ``handle.shutdown()``
before exiting; workers do the same in ``worker_process_init`` / ``worker_process_shutdown``
(the batch processor's thread does not survive a fork). The rules:

- Nothing is exported unless asked for: a signal is exported when ``OTEL_{SIGNAL}_EXPORTER``
  names an exporter, or, when that is unset, when an OTLP endpoint
  (``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_{SIGNAL}_ENDPOINT``) is set.
  ``none`` and ``OTEL_SDK_DISABLED=true`` turn export off.
- ``otlp`` speaks HTTP/protobuf (``OTEL_EXPORTER_OTLP_PROTOCOL``); ``grpc`` is used only
  when its exporter package is installed; ``console`` prints to stdout.
- A collector that is down never breaks a command: exporters log and give up, and the
  export timeout defaults to a short :data:`DEFAULT_EXPORT_TIMEOUT` unless
  ``OTEL_EXPORTER_OTLP_TIMEOUT`` says otherwise. A configuration this module cannot honour
  is logged as a warning and that signal is not exported.

Everything else (endpoint, headers, ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``,
``OTEL_METRIC_EXPORT_INTERVAL``, ``OTEL_BSP_*``, ``OTEL_TRACES_SAMPLER``) is read by the
SDK itself, as its documentation describes.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from opentelemetry import metrics, trace

from hango.telemetry.names import Telemetry
from hango.telemetry.publish import CeleryPublishTracer

if TYPE_CHECKING:
    # The SDK is the [otel] extra: imported where export starts, so a library user who
    # installed only opentelemetry-api can still import and call setup_telemetry.
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import MetricExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

logger = logging.getLogger(__name__)

Signal = Literal["traces", "metrics"]
CeleryRole = Literal["producer", "worker"]
DEFAULT_EXPORT_TIMEOUT = 2.0  # seconds per export call; the SDK default (10 s) stalls exit
_OTLP_HTTP = "http/protobuf"
_GRPC = "grpc"


@dataclass
class TelemetryHandle:
    """What :func:`setup_telemetry` started; ``shutdown()`` flushes and stops it."""

    telemetry: Telemetry
    tracer_provider: TracerProvider | None = None
    meter_provider: MeterProvider | None = None
    exporters: tuple[str, ...] = ()
    celery_role: CeleryRole | None = None
    clients_traced: bool = False
    _publish_tracer: CeleryPublishTracer | None = field(default=None, repr=False)
    _closed: bool = field(default=False, repr=False)

    @property
    def exporting(self) -> bool:
        return bool(self.exporters)

    def shutdown(self) -> None:
        """Flush pending spans and metrics, then stop; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self._publish_tracer is not None:
            self._publish_tracer.disconnect()
        if self.celery_role == "worker":
            _celery_instrumentor().uninstrument()
        if self.clients_traced:
            for instrumentor in _client_instrumentors():
                instrumentor.uninstrument()
        if self.tracer_provider is not None:
            self.tracer_provider.shutdown()
        if self.meter_provider is not None:
            self.meter_provider.shutdown()


def setup_telemetry(
    service_name: str, *, celery_role: CeleryRole | None = None, set_global: bool = True
) -> TelemetryHandle:
    """Configure export from the ``OTEL_*`` environment; a no-op handle when nothing is asked.

    ``service_name`` is the default ``service.name`` (``OTEL_SERVICE_NAME`` wins).
    ``celery_role`` also traces Celery, so a task continues its publisher's trace:
    ``producer`` (the agent: publishing by name, :mod:`hango.telemetry.publish`) or
    ``worker`` (the contrib instrumentation: running tasks, after the fork).
    """
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return TelemetryHandle(Telemetry.noop())
    if not _sdk_installed():
        return TelemetryHandle(Telemetry.noop())
    return _start_export(service_name, celery_role, set_global)


def _sdk_installed() -> bool:
    """True when the SDK is importable; else warns once if the environment asks for export."""
    if importlib.util.find_spec("opentelemetry.sdk") is not None:
        return True
    if _exporter_names("traces") or _exporter_names("metrics"):
        logger.warning(
            "telemetry: OTEL_* asks for export but the OpenTelemetry SDK is not installed; "
            "nothing will be exported (pip install 'hango-context[otel]')"
        )
    return False


def _start_export(
    service_name: str, celery_role: CeleryRole | None, set_global: bool
) -> TelemetryHandle:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    span_exporters = [(n, x) for n in _exporter_names("traces") if (x := _span_exporter(n))]
    metric_exporters = [(n, m) for n in _exporter_names("metrics") if (m := _metric_exporter(n))]
    if not span_exporters and not metric_exporters:
        return TelemetryHandle(Telemetry.noop())
    resource = _resource(service_name)
    tracer_provider = TracerProvider(resource=resource)
    for _, span_exporter in span_exporters:
        tracer_provider.add_span_processor(BatchSpanProcessor(span_exporter))
    readers = [PeriodicExportingMetricReader(exporter) for _, exporter in metric_exporters]
    meter_provider = MeterProvider(resource=resource, metric_readers=readers)
    if set_global:
        trace.set_tracer_provider(tracer_provider)
        metrics.set_meter_provider(meter_provider)
    handle = TelemetryHandle(
        Telemetry(tracer_provider, meter_provider),
        tracer_provider,
        meter_provider,
        exporters=tuple(f"traces:{n}" for n, _ in span_exporters)
        + tuple(f"metrics:{n}" for n, _ in metric_exporters),
    )
    if span_exporters:
        trace_clients(tracer_provider)
        handle.clients_traced = True
    if celery_role is not None:
        handle.celery_role = celery_role
        handle._publish_tracer = instrument_celery(celery_role, handle.telemetry)
    logger.info(
        "telemetry: exporting %s as %s", ", ".join(handle.exporters), resource_name(resource)
    )
    return handle


def instrument_celery(role: CeleryRole, telemetry: Telemetry) -> CeleryPublishTracer | None:
    """Trace the publishing side (``producer``) or the task runs (``worker``)."""
    if role == "producer":
        return CeleryPublishTracer(telemetry.tracer).connect()
    _celery_instrumentor().instrument(
        tracer_provider=telemetry.tracer_provider, meter_provider=telemetry.meter_provider
    )
    return None


def trace_clients(tracer_provider: TracerProvider) -> None:
    """Redis commands (result cache, lease, wake-ups) and SQL statements become spans.

    The official instrumentations patch the client libraries, so every Redis round trip of
    the queue and every database write of the store shows in the turn's trace.
    """
    for instrumentor in _client_instrumentors():
        if not instrumentor.is_instrumented_by_opentelemetry:
            # skip_dep_check: the SQLAlchemy instrumentation 0.66b2 declares "< 2.1" while
            # its engine event hooks work unchanged on 2.1 (the test suite checks the spans).
            instrumentor.instrument(tracer_provider=tracer_provider, skip_dep_check=True)


def _client_instrumentors() -> tuple[Any, ...]:
    from opentelemetry.instrumentation.redis import RedisInstrumentor
    from opentelemetry.instrumentation.sqlalchemy import SQLAlchemyInstrumentor

    return (RedisInstrumentor(), SQLAlchemyInstrumentor())


def resource_name(resource: Resource) -> str:
    from opentelemetry.sdk.resources import SERVICE_NAME

    return str(resource.attributes.get(SERVICE_NAME, ""))


def _resource(service_name: str) -> Resource:
    from opentelemetry.sdk.resources import SERVICE_NAME, OTELResourceDetector, Resource

    from_env = OTELResourceDetector().detect()
    if from_env.attributes.get(SERVICE_NAME):
        return Resource.create()
    return Resource.create({SERVICE_NAME: service_name})


def _exporter_names(signal: Signal) -> list[str]:
    raw = os.environ.get(f"OTEL_{signal.upper()}_EXPORTER", "").strip().lower()
    if not raw:
        endpoint_set = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get(
            f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT"
        )
        raw = "otlp" if endpoint_set else "none"
    return [name.strip() for name in raw.split(",") if name.strip() not in ("", "none")]


def _protocol(signal: Signal) -> str:
    specific = os.environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL")
    return (specific or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or _OTLP_HTTP).strip()


def _timeout(signal: Signal) -> float | None:
    """None lets the exporter read the timeout variables the operator did set."""
    names = ("OTEL_EXPORTER_OTLP_TIMEOUT", f"OTEL_EXPORTER_OTLP_{signal.upper()}_TIMEOUT")
    return None if any(os.environ.get(name) for name in names) else DEFAULT_EXPORT_TIMEOUT


def _span_exporter(name: str) -> SpanExporter | None:
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        # stderr: stdout belongs to the command's own output (``--json``).
        return ConsoleSpanExporter(out=sys.stderr)
    if name != "otlp":
        _unsupported("traces", f"OTEL_TRACES_EXPORTER={name!r}")
        return None
    protocol = _protocol("traces")
    if protocol == _OTLP_HTTP:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter(timeout=_timeout("traces"))
    if protocol == _GRPC:
        grpc_span_exporter: SpanExporter | None = _grpc_exporter(
            "traces", "trace_exporter", "OTLPSpanExporter"
        )
        return grpc_span_exporter
    _unsupported("traces", f"OTLP protocol {protocol!r}")
    return None


def _metric_exporter(name: str) -> MetricExporter | None:
    if name == "console":
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

        return ConsoleMetricExporter(out=sys.stderr)
    if name != "otlp":
        _unsupported("metrics", f"OTEL_METRICS_EXPORTER={name!r}")
        return None
    protocol = _protocol("metrics")
    if protocol == _OTLP_HTTP:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        return OTLPMetricExporter(timeout=_timeout("metrics"))
    if protocol == _GRPC:
        grpc_metric_exporter: MetricExporter | None = _grpc_exporter(
            "metrics", "metric_exporter", "OTLPMetricExporter"
        )
        return grpc_metric_exporter
    _unsupported("metrics", f"OTLP protocol {protocol!r}")
    return None


def _grpc_exporter(signal: Signal, module: str, cls: str) -> Any:
    """The gRPC exporter is an optional package: imported only when asked for."""
    try:
        found = importlib.import_module(f"opentelemetry.exporter.otlp.proto.grpc.{module}")
    except ImportError:
        _unsupported(signal, "OTLP protocol 'grpc' (opentelemetry-exporter-otlp-proto-grpc)")
        return None
    return getattr(found, cls)(timeout=_timeout(signal))


def _unsupported(signal: Signal, what: str) -> None:
    logger.warning("telemetry: %s is not supported here; %s will not be exported", what, signal)
    return None


def _celery_instrumentor() -> Any:
    from opentelemetry.instrumentation.celery import CeleryInstrumentor

    return CeleryInstrumentor()  # type: ignore[no-untyped-call]
