"""The loop observer that turns the agent loop's hooks into spans, events, metrics and logs.

Each turn is a span ``invoke_agent hango`` (GenAI semconv's agent-invocation span, with
``hango.turn``), and opens the conversation scope, so every provider call of the turn —
the summarizer's inline call included, and any Celery task it publishes — is its child
and knows the session. Compactions become a ``gen_ai.conversation.compacted`` event on
the turn span, two metrics and one structured INFO line on the ``hango.compaction``
logger; overflow retries become a ``provider.context_overflow_retry`` event.

Hooks never raise (the observer contract): a failure to record is logged and dropped.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from typing import ParamSpec

from opentelemetry.trace import Span, SpanKind

from hango.compaction.record import CompactionRecord
from hango.core.messages import Request
from hango.middleware.observer import NullObserver
from hango.telemetry import names as t
from hango.telemetry.names import ConversationScope, Telemetry

compaction_log = logging.getLogger(t.COMPACTION_LOGGER)
logger = logging.getLogger(__name__)

P = ParamSpec("P")


def _never_raises(hook: Callable[P, None]) -> Callable[P, None]:
    @wraps(hook)
    def guarded(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            hook(*args, **kwargs)
        except Exception:
            logger.exception("telemetry observer hook %s failed", hook.__name__)

    return guarded


class TelemetryObserver(NullObserver):
    """Records the loop's progress through ``telemetry`` (not ``response_received``: the
    instrumented provider's chat span already holds the response's usage)."""

    def __init__(self, telemetry: Telemetry) -> None:
        self._telemetry = telemetry
        self._lock = threading.Lock()
        self._open: dict[str, ConversationScope] = {}

    @contextmanager
    def turn(self, session_id: str, turn: int) -> Iterator[None]:
        attributes: dict[str, t.AttributeValue] = {
            t.GEN_AI_OPERATION_NAME: t.OPERATION_INVOKE_AGENT,
            t.GEN_AI_AGENT_NAME: t.AGENT_NAME,
            t.GEN_AI_CONVERSATION_ID: session_id,
            t.HANGO_TURN: turn,
        }
        with (
            self._telemetry.tracer.start_as_current_span(
                t.TURN_SPAN, kind=SpanKind.INTERNAL, attributes=attributes
            ) as span,
            t.conversation(session_id, turn, turn_span=span) as scope,
        ):
            with self._lock:
                self._open[session_id] = scope
            try:
                yield
            except BaseException as error:
                span.set_attribute(t.ERROR_TYPE, t.error_type(error))
                raise
            finally:
                span.set_attribute(t.HANGO_MODEL_CALLS, scope.model_calls)
                with self._lock:
                    self._open.pop(session_id, None)

    @_never_raises
    def request_sent(self, session_id: str, turn: int, request: Request, input_tokens: int) -> None:
        if not self._telemetry.recording:
            return  # the count below is for the turn span, which nothing would receive
        scope = self._scope(session_id)
        if scope is not None:
            scope.model_calls += 1
        attributes = {t.GEN_AI_REQUEST_MODEL: request.model}
        self._telemetry.record(t.CONTEXT_INPUT_TOKENS, input_tokens, attributes)

    @_never_raises
    def compacted(self, session_id: str, record: CompactionRecord) -> None:
        scope = self._scope(session_id)
        if scope is not None:
            scope.compacted_pending = True
            if scope.turn_span is not None:
                scope.turn_span.add_event(t.EVENT_COMPACTED, compaction_event_attributes(record))
        self._telemetry.record(t.CONTEXT_COMPACTIONS, 1, {t.METRIC_REASON: record.reason})
        evicted = {t.METRIC_REASON: record.reason}
        self._telemetry.record(t.CONTEXT_EVICTED_MESSAGES, record.evicted_messages, evicted)
        log_compaction(session_id, record)

    @_never_raises
    def overflow_retry(self, session_id: str, turn: int, rung: str) -> None:
        span = self._turn_span(session_id)
        if span is not None:
            span.add_event(t.EVENT_OVERFLOW_RETRY, {t.HANGO_RETRY_RUNG: rung, t.HANGO_TURN: turn})

    @_never_raises
    def tool_args_truncated(self, session_id: str, turn: int, count: int) -> None:
        if count > 0:
            self._telemetry.record(t.CONTEXT_TOOL_ARGS_TRUNCATED, count)

    @_never_raises
    def token_figure(self, session_id: str, turn: int, source: str, correction: float) -> None:
        if not self._telemetry.recording:
            return
        span = self._turn_span(session_id)
        if span is not None:
            span.set_attribute(t.HANGO_TOKENS_SOURCE, source)
            span.set_attribute(t.HANGO_TOKENS_CORRECTION, correction)

    @_never_raises
    def invalid_request_blocked(self, session_id: str, turn: int, violations: list[str]) -> None:
        span = self._turn_span(session_id)
        if span is not None:
            event = {t.HANGO_REQUEST_VIOLATIONS: len(violations), t.HANGO_TURN: turn}
            span.add_event(t.EVENT_INVALID_REQUEST_BLOCKED, event)
        self._telemetry.record(t.CONTEXT_INVALID_REQUESTS_BLOCKED, 1)

    def _scope(self, session_id: str) -> ConversationScope | None:
        """The open turn of ``session_id``: looked up by id, so any thread may report."""
        with self._lock:
            scope = self._open.get(session_id)
        if scope is None:
            current = t.current_conversation()
            scope = current if current is not None and current.session_id == session_id else None
        return scope

    def _turn_span(self, session_id: str) -> Span | None:
        scope = self._scope(session_id)
        return scope.turn_span if scope is not None else None


def compaction_event_attributes(record: CompactionRecord) -> dict[str, t.AttributeValue]:
    attributes: dict[str, t.AttributeValue] = {
        t.HANGO_TOKENS_BEFORE: record.tokens_before,
        t.HANGO_TOKENS_AFTER: record.tokens_after,
        t.HANGO_MESSAGES_EVICTED: record.evicted_messages,
        t.HANGO_COMPACTION_REASON: record.reason,
        t.HANGO_COMPACTION_KEPT_FROM_SEQ: record.kept_from_seq,
        t.HANGO_COMPACTION_SUMMARIZER: record.summarizer,
        t.HANGO_TURN: record.at_turn,
        # Attribute values cannot be null: no offload (mechanical truncation) is "".
        t.HANGO_FS_PATH: record.offload_path or "",
    }
    if record.fallback_reason:
        attributes[t.HANGO_COMPACTION_FALLBACK_REASON] = record.fallback_reason
    return attributes | route_attributes(record)


def route_attributes(record: CompactionRecord) -> dict[str, t.AttributeValue]:
    """The summary's route and costs; a route not open has no expected cost (no attribute)."""
    route = record.route
    if route is None:
        return {}
    values = {
        t.HANGO_COMPACTION_ROUTE: route.name,
        t.HANGO_COMPACTION_ROUTE_REASON: route.reason,
        t.HANGO_COMPACTION_EXPECTED_PREFIX_USD: route.expected_prefix_usd,
        t.HANGO_COMPACTION_EXPECTED_RANGE_USD: route.expected_range_usd,
        t.HANGO_COMPACTION_SUMMARY_COST_USD: route.cost_usd,
    }
    return {key: value for key, value in values.items() if value is not None}


def log_compaction(session_id: str, record: CompactionRecord) -> None:
    """One INFO line per compaction: readable as text, structured through ``extra``."""
    fields = {
        "session_id": session_id,
        "turn": record.at_turn,
        "reason": record.reason,
        "tokens_before": record.tokens_before,
        "tokens_after": record.tokens_after,
        "messages_evicted": record.evicted_messages,
        "offload_path": record.offload_path,
        "summarizer": record.summarizer,
        "route": record.route.name if record.route else None,
        "summary_cost_usd": record.route.cost_usd if record.route else None,
    }
    text = " ".join(f"{key}={value}" for key, value in fields.items())
    compaction_log.info("compaction %s", text, extra={"hango": fields})
