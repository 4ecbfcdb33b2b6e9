"""A provider wrapper that turns every call into a GenAI CLIENT span and metrics.

Each ``complete`` becomes a span ``chat {model}`` (GenAI semconv v1.41) carrying the
provider, the model, the session (``gen_ai.conversation.id``, from the conversation scope
the observer's turn or the worker's task opened), the usage including cache reads and
writes, ``hango.call.purpose`` (``chat`` for the agent, ``summarize`` for the summarizer)
and ``error.type`` on failure. The first agent call after a compaction carries
``gen_ai.conversation.compacted=true``. Usage and duration go to the
``gen_ai.client.*`` histograms and the cache read ratio to ``hango.cache.read_ratio``.

Only counts, names and ids are recorded: never message content, never credentials.
"""

from __future__ import annotations

import time
from typing import cast

from opentelemetry.trace import SpanKind

from hango.core.messages import Request, Response
from hango.providers.base import Capabilities, Provider
from hango.telemetry import names as t
from hango.telemetry.names import Attributes, ConversationScope, Telemetry
from hango.tokens.base import TokenCounter


class InstrumentedProvider:
    """Wraps ``inner``; answers exactly as it does, recording spans and metrics."""

    def __init__(
        self, inner: Provider, telemetry: Telemetry, *, purpose: str = t.PURPOSE_CHAT
    ) -> None:
        self.inner = inner
        self._telemetry = telemetry
        self._purpose = purpose

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def purpose(self) -> str:
        """``hango.call.purpose`` of its calls: ``chat`` or ``summarize``."""
        return self._purpose

    @property
    def capabilities(self) -> Capabilities:
        return self.inner.capabilities

    def complete(self, request: Request) -> Response:
        scope = t.current_conversation()
        if not self._telemetry.recording:
            # Nothing would receive the span or the metrics: the call goes straight through.
            if scope is not None and self._purpose == t.PURPOSE_CHAT:
                scope.compacted_pending = False  # that call was the first after it
            return self.inner.complete(request)
        attributes = self._span_attributes(request, scope)
        started = time.perf_counter()
        with self._telemetry.tracer.start_as_current_span(
            t.chat_span_name(request.model), kind=SpanKind.CLIENT, attributes=attributes
        ) as span:
            try:
                response = self.inner.complete(request)
            except Exception as error:
                span.set_attribute(t.ERROR_TYPE, t.error_type(error))
                self._record_duration(request, started, {t.ERROR_TYPE: t.error_type(error)})
                raise
            span.set_attributes(response_attributes(response))
        self._record_duration(request, started, {t.GEN_AI_RESPONSE_MODEL: response.model})
        self._record_usage(request, response)
        return response

    def _span_attributes(self, request: Request, scope: ConversationScope | None) -> Attributes:
        attributes: dict[str, t.AttributeValue] = {
            **self._metric_attributes(request),
            t.GEN_AI_REQUEST_MAX_TOKENS: request.max_tokens,
        }
        if scope is not None:
            attributes[t.GEN_AI_CONVERSATION_ID] = scope.session_id
            if scope.turn is not None:
                attributes[t.HANGO_TURN] = scope.turn
            if scope.compacted_pending and self._purpose == t.PURPOSE_CHAT:
                # The first agent call after a compaction carries the flag, once.
                attributes[t.GEN_AI_CONVERSATION_COMPACTED] = True
                scope.compacted_pending = False
        return attributes

    def _metric_attributes(self, request: Request) -> dict[str, t.AttributeValue]:
        return {
            t.GEN_AI_OPERATION_NAME: t.OPERATION_CHAT,
            t.GEN_AI_PROVIDER_NAME: self.inner.name,
            t.GEN_AI_REQUEST_MODEL: request.model,
            t.HANGO_CALL_PURPOSE: self._purpose,
        }

    def _record_duration(self, request: Request, started: float, extra: Attributes) -> None:
        attributes = {**self._metric_attributes(request), **extra}
        elapsed = time.perf_counter() - started
        self._telemetry.record(t.CLIENT_OPERATION_DURATION, elapsed, attributes)

    def _record_usage(self, request: Request, response: Response) -> None:
        base = {**self._metric_attributes(request), t.GEN_AI_RESPONSE_MODEL: response.model}
        usage = response.usage
        total_input = usage.total_input_tokens()
        record = self._telemetry.record
        record(t.CLIENT_TOKEN_USAGE, total_input, {**base, t.GEN_AI_TOKEN_TYPE: t.TOKEN_TYPE_INPUT})
        output = {**base, t.GEN_AI_TOKEN_TYPE: t.TOKEN_TYPE_OUTPUT}
        record(t.CLIENT_TOKEN_USAGE, usage.output_tokens, output)
        if total_input > 0:
            ratio = (usage.cache_read_input_tokens or 0) / total_input
            record(t.CACHE_READ_RATIO, ratio, base)


class CountingInstrumentedProvider(InstrumentedProvider):
    """The wrapper for a provider that also counts tokens: it keeps that ability."""

    def count_tokens(self, request: Request, *, timeout: float) -> int:
        return cast(TokenCounter, self.inner).count_tokens(request, timeout=timeout)


def instrument_provider(
    inner: Provider, telemetry: Telemetry, *, purpose: str = t.PURPOSE_CHAT
) -> InstrumentedProvider:
    """Wrap ``inner``, keeping the optional ``TokenCounter`` ability when it has it."""
    if isinstance(inner, TokenCounter):
        return CountingInstrumentedProvider(inner, telemetry, purpose=purpose)
    return InstrumentedProvider(inner, telemetry, purpose=purpose)


def response_attributes(response: Response) -> Attributes:
    """Usage and response identity; input tokens include cache reads and writes (semconv)."""
    usage = response.usage
    attributes: dict[str, t.AttributeValue] = {
        t.GEN_AI_RESPONSE_ID: response.id,
        t.GEN_AI_RESPONSE_MODEL: response.model,
        t.GEN_AI_USAGE_INPUT_TOKENS: usage.total_input_tokens(),
        t.GEN_AI_USAGE_OUTPUT_TOKENS: usage.output_tokens,
        t.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: usage.cache_read_input_tokens or 0,
        t.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: usage.cache_creation_input_tokens or 0,
    }
    if response.stop_reason is not None:
        attributes[t.GEN_AI_RESPONSE_FINISH_REASONS] = (response.stop_reason,)
    return attributes
