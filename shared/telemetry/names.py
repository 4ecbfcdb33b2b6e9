"""Every telemetry name, the tracer/meter access, and the conversation scope.

All span, event, attribute and metric names the product emits are constants here, so a
rename (the GenAI conventions are still moving: v1.41 is the last release in core
semconv) is a one-file change. Names follow OpenTelemetry GenAI semconv v1.41 where it
has one (``gen_ai.*``, ``error.type``) and use ``hango.*`` otherwise.

:class:`Telemetry` bundles a tracer and a meter with every instrument created once; it
is built from explicit providers (tests pass in-memory ones) or from the globals.
:func:`conversation` opens the scope that tells an instrumented provider which session
and turn it is serving, in-process or on a worker. Setting up exporters from the
``OTEL_*`` environment lives in :mod:`hango.telemetry.setup`.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

from opentelemetry import metrics, trace
from opentelemetry.metrics._internal import _ProxyMeterProvider
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv._incubating.attributes import messaging_attributes as messaging
from opentelemetry.semconv._incubating.metrics import gen_ai_metrics
from opentelemetry.semconv.attributes import error_attributes
from opentelemetry.util.types import AttributeValue as AttributeValue

INSTRUMENTATION_SCOPE = "hango"

# --- operations and span names ------------------------------------------------------
OPERATION_CHAT = gen_ai.GenAiOperationNameValues.CHAT.value
OPERATION_INVOKE_AGENT = gen_ai.GenAiOperationNameValues.INVOKE_AGENT.value
AGENT_NAME = "hango"
TURN_SPAN = f"{OPERATION_INVOKE_AGENT} {AGENT_NAME}"


def chat_span_name(model: str) -> str:
    """``{gen_ai.operation.name} {gen_ai.request.model}``, as semconv names inference spans."""
    return f"{OPERATION_CHAT} {model}"


# --- attributes (GenAI semconv, from opentelemetry-semantic-conventions) -------------------
# GenAI names are still "incubating" upstream, so they come from the package's _incubating
# modules; error.type is stable. Only the product's own names are spelled out below.
GEN_AI_OPERATION_NAME = gen_ai.GEN_AI_OPERATION_NAME
GEN_AI_PROVIDER_NAME = gen_ai.GEN_AI_PROVIDER_NAME
GEN_AI_AGENT_NAME = gen_ai.GEN_AI_AGENT_NAME
GEN_AI_REQUEST_MODEL = gen_ai.GEN_AI_REQUEST_MODEL
GEN_AI_REQUEST_MAX_TOKENS = gen_ai.GEN_AI_REQUEST_MAX_TOKENS
GEN_AI_RESPONSE_ID = gen_ai.GEN_AI_RESPONSE_ID
GEN_AI_RESPONSE_MODEL = gen_ai.GEN_AI_RESPONSE_MODEL
GEN_AI_RESPONSE_FINISH_REASONS = gen_ai.GEN_AI_RESPONSE_FINISH_REASONS
GEN_AI_CONVERSATION_ID = gen_ai.GEN_AI_CONVERSATION_ID
GEN_AI_USAGE_INPUT_TOKENS = gen_ai.GEN_AI_USAGE_INPUT_TOKENS
GEN_AI_USAGE_OUTPUT_TOKENS = gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS = gen_ai.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS
GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS = gen_ai.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS
GEN_AI_TOKEN_TYPE = gen_ai.GEN_AI_TOKEN_TYPE
GEN_AI_CONVERSATION_COMPACTED = "gen_ai.conversation.compacted"
TOKEN_TYPE_INPUT = gen_ai.GenAiTokenTypeValues.INPUT.value
TOKEN_TYPE_OUTPUT = gen_ai.GenAiTokenTypeValues.COMPLETION.value
ERROR_TYPE = error_attributes.ERROR_TYPE

# --- attributes (product) ---------------------------------------------------------------
HANGO_TURN = "hango.turn"
HANGO_MODEL_CALLS = "hango.model_calls"
HANGO_CALL_PURPOSE = "hango.call.purpose"
PURPOSE_CHAT = "chat"
PURPOSE_SUMMARIZE = "summarize"
HANGO_TOKENS_BEFORE = "hango.tokens.before"
HANGO_TOKENS_AFTER = "hango.tokens.after"
HANGO_MESSAGES_EVICTED = "hango.messages.evicted"
HANGO_COMPACTION_REASON = "hango.compaction.reason"
HANGO_COMPACTION_KEPT_FROM_SEQ = "hango.compaction.kept_from_seq"
HANGO_COMPACTION_SUMMARIZER = "hango.compaction.summarizer"
HANGO_COMPACTION_FALLBACK_REASON = "hango.compaction.fallback_reason"
# How the summary was made (range / prefix), why, both routes' expected and the real cost.
HANGO_COMPACTION_ROUTE = "hango.compaction.route"
HANGO_COMPACTION_ROUTE_REASON = "hango.compaction.route_reason"
HANGO_COMPACTION_EXPECTED_PREFIX_USD = "hango.compaction.expected_prefix_usd"
HANGO_COMPACTION_EXPECTED_RANGE_USD = "hango.compaction.expected_range_usd"
HANGO_COMPACTION_SUMMARY_COST_USD = "hango.compaction.summary_cost_usd"
HANGO_FS_PATH = "hango.fs.path"
HANGO_RETRY_RUNG = "hango.retry.rung"
# How the last request's input tokens were known (count_tokens, anchored, estimate), and the
# learned real-per-estimated-token correction of the estimator, on the turn span.
HANGO_TOKENS_SOURCE = "hango.tokens.source"
HANGO_TOKENS_CORRECTION = "hango.tokens.correction"
HANGO_REQUEST_VIOLATIONS = "hango.request.violations"
HANGO_TASK_NAME = "hango.task.name"
# The spec names the compaction counter's attribute plainly ``reason``.
METRIC_REASON = "reason"

# --- span events ------------------------------------------------------------------------
EVENT_COMPACTED = "gen_ai.conversation.compacted"
EVENT_OVERFLOW_RETRY = "provider.context_overflow_retry"
EVENT_INVALID_REQUEST_BLOCKED = "hango.request.invalid_blocked"

# --- loggers ----------------------------------------------------------------------------
COMPACTION_LOGGER = "hango.compaction"

# --- Celery (span names and attributes as the contrib instrumentation spells them) ----
CELERY_APPLY_ASYNC = "apply_async"
CELERY_RUN = "run"
CELERY_ACTION = "celery.action"
CELERY_TASK_NAME = "celery.task_name"
MESSAGING_MESSAGE_ID = messaging.MESSAGING_MESSAGE_ID
# Message header stamped at publish, read by the worker for queue latency.
ENQUEUED_AT_HEADER = "hango_enqueued_at"


# --- metrics ----------------------------------------------------------------------------
@dataclass(frozen=True)
class MetricSpec:
    """One instrument: its name, kind and unit exactly as exported."""

    name: str
    kind: Literal["counter", "histogram"]
    unit: str
    description: str
    buckets: tuple[float, ...] | None = None


_POWERS_OF_4 = tuple(float(4**i) for i in range(14))  # semconv token buckets, 1 .. 67108864
# semconv duration buckets, 0.01 s doubling to 81.92 s
_DURATION_BUCKETS = tuple(0.01 * 2**i for i in range(14))

CONTEXT_INPUT_TOKENS = MetricSpec(
    "hango.context.input_tokens", "histogram", "{token}",
    "Input tokens of each request sent to the model, as measured before sending.",
    (1000, 2000, 5000, 10000, 20000, 50000, 100000, 150000, 170000, 200000, 500000, 1000000),
)  # fmt: skip
CONTEXT_COMPACTIONS = MetricSpec(
    "hango.context.compactions", "counter", "{compaction}", "Compactions made, by reason."
)
CONTEXT_EVICTED_MESSAGES = MetricSpec(
    "hango.context.evicted_messages", "histogram", "{message}",
    "Messages evicted from the outgoing request by one compaction.",
    (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000),
)  # fmt: skip
CONTEXT_TOOL_ARGS_TRUNCATED = MetricSpec(
    "hango.context.tool_args_truncated", "counter", "{argument}",
    "Tool arguments and results shortened to a preview on the outgoing copy.",
)  # fmt: skip
CONTEXT_INVALID_REQUESTS_BLOCKED = MetricSpec(
    "hango.context.invalid_requests_blocked", "counter", "{request}",
    "Compacted requests that failed validation and were replaced by mechanical truncation.",
)  # fmt: skip
CLIENT_TOKEN_USAGE = MetricSpec(
    gen_ai_metrics.GEN_AI_CLIENT_TOKEN_USAGE, "histogram", "{token}",
    "Tokens used per provider call, by gen_ai.token.type and hango.call.purpose.",
    _POWERS_OF_4,
)  # fmt: skip
CLIENT_OPERATION_DURATION = MetricSpec(
    gen_ai_metrics.GEN_AI_CLIENT_OPERATION_DURATION, "histogram", "s",
    "Duration of each provider call.", _DURATION_BUCKETS,
)  # fmt: skip
CACHE_READ_RATIO = MetricSpec(
    "hango.cache.read_ratio", "histogram", "1",
    "Cache-read input tokens over all input tokens of a provider call.",
    (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0),
)  # fmt: skip
QUEUE_WAIT_DURATION = MetricSpec(
    "hango.queue.wait.duration", "histogram", "s",
    "Time from publishing a task to a worker starting it.",
    (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)  # fmt: skip

METRICS: tuple[MetricSpec, ...] = (
    CONTEXT_INPUT_TOKENS,
    CONTEXT_COMPACTIONS,
    CONTEXT_EVICTED_MESSAGES,
    CONTEXT_TOOL_ARGS_TRUNCATED,
    CONTEXT_INVALID_REQUESTS_BLOCKED,
    CLIENT_TOKEN_USAGE,
    CLIENT_OPERATION_DURATION,
    CACHE_READ_RATIO,
    QUEUE_WAIT_DURATION,
)

Attributes = Mapping[str, AttributeValue]


class Telemetry:
    """A tracer and a meter with every instrument of :data:`METRICS` created once.

    Pass explicit providers (tests: an in-memory span exporter and metric reader); left
    out, the global providers are used, which are no-ops until someone sets them.
    """

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
    ) -> None:
        self.tracer_provider = tracer_provider or trace.get_tracer_provider()
        self.meter_provider = meter_provider or metrics.get_meter_provider()
        self.tracer = self.tracer_provider.get_tracer(INSTRUMENTATION_SCOPE)
        meter = self.meter_provider.get_meter(INSTRUMENTATION_SCOPE)
        self._counters = {
            spec.name: meter.create_counter(spec.name, spec.unit, spec.description)
            for spec in METRICS
            if spec.kind == "counter"
        }
        self._histograms = {
            spec.name: meter.create_histogram(
                spec.name,
                spec.unit,
                spec.description,
                explicit_bucket_boundaries_advisory=spec.buckets,
            )
            for spec in METRICS
            if spec.kind == "histogram"
        }

    @property
    def recording(self) -> bool:
        """Whether anything would receive a span or a metric recorded now.

        False while both providers are no-ops, or the API's global proxies with no real
        provider set behind them (a library user who never configured OpenTelemetry): the
        per-call instrumentation is then skipped, since nothing could observe it. Asked at
        every call, so a provider set later is used from the next call on.
        """
        return _live(self.tracer_provider, trace.get_tracer_provider) or _live(
            self.meter_provider, metrics.get_meter_provider
        )

    @classmethod
    def noop(cls) -> Telemetry:
        """Records nothing: for code paths that were given no telemetry."""
        return cls(trace.NoOpTracerProvider(), metrics.NoOpMeterProvider())

    def record(self, spec: MetricSpec, value: float, attributes: Attributes | None = None) -> None:
        """Add to a counter or record into a histogram, whichever ``spec`` is."""
        if spec.kind == "counter":
            self._counters[spec.name].add(value, attributes)
        else:
            self._histograms[spec.name].record(value, attributes)


# Looked up by exact type: the providers are ABCs, and an ``isinstance`` against one runs
# ``ABCMeta.__instancecheck__``, asked three times per model call.
_PROXIES = frozenset({trace.ProxyTracerProvider, _ProxyMeterProvider})
_NO_OP_PROVIDERS = _PROXIES | {trace.NoOpTracerProvider, metrics.NoOpMeterProvider}


def _live(provider: object, global_provider: Callable[[], object]) -> bool:
    """Whether ``provider`` (a global proxy: the provider set behind it) records anything."""
    if type(provider) in _PROXIES:
        provider = global_provider()
    return type(provider) not in _NO_OP_PROVIDERS


# --- the conversation scope ---------------------------------------------------------------
@dataclass
class ConversationScope:
    """Which session and turn the current work serves.

    The observer's turn opens it on the agent side (the summarizer's inline call runs
    inside it too); a worker opens it from the task's arguments. ``compacted_pending``
    is set by a compaction and consumed by the next agent chat span.
    """

    session_id: str
    turn: int | None = None
    turn_span: trace.Span | None = None
    compacted_pending: bool = False
    model_calls: int = 0


_scope: contextvars.ContextVar[ConversationScope | None] = contextvars.ContextVar(
    "hango_conversation_scope", default=None
)


def current_conversation() -> ConversationScope | None:
    return _scope.get()


def enter_conversation(scope: ConversationScope) -> contextvars.Token[ConversationScope | None]:
    """Open ``scope`` until :func:`exit_conversation`; for signal pairs (task pre/post run)."""
    return _scope.set(scope)


def exit_conversation(token: contextvars.Token[ConversationScope | None]) -> None:
    _scope.reset(token)


@contextmanager
def conversation(
    session_id: str, turn: int | None = None, *, turn_span: trace.Span | None = None
) -> Iterator[ConversationScope]:
    """Open a conversation scope for the body of the ``with``."""
    scope = ConversationScope(session_id=session_id, turn=turn, turn_span=turn_span)
    token = enter_conversation(scope)
    try:
        yield scope
    finally:
        exit_conversation(token)


def error_type(error: BaseException) -> str:
    """``error.type``: the exception's class name, low-cardinality as semconv asks."""
    return type(error).__name__
