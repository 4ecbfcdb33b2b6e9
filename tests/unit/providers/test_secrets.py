"""An API key never shows up in an error, its chain, or a traceback."""

from __future__ import annotations

import io
import json
import pickle
import traceback

import pytest
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

from hango.core.errors import ProviderError
from hango.core.messages import Message, Request
from hango.core.settings import load_settings
from hango.providers.anthropic import AnthropicProvider
from hango.telemetry.provider import instrument_provider
from tests.fakeapi import FakeAnthropicAPI
from tests.otel_support import capture

KEY = "sk-ant-SECRET-0123456789"
REQUEST = Request(
    model="claude-sonnet-4-6", max_tokens=16, messages=(Message(role="user", content="hi"),)
)


def test_settings_strip_a_pasted_newline_from_the_key() -> None:
    settings = load_settings(anthropic_api_key=f"  {KEY}\n")
    assert settings.anthropic_api_key is not None
    assert settings.anthropic_api_key.get_secret_value() == KEY


def test_a_key_the_http_client_refuses_is_not_quoted_anywhere() -> None:
    with FakeAnthropicAPI() as api:
        provider = AnthropicProvider(api_key=f"{KEY}\n", base_url=api.base_url, max_retries=0)
        with pytest.raises(ProviderError) as caught:
            provider.complete(REQUEST)
    printed = "".join(traceback.format_exception(caught.value))
    assert KEY not in printed and KEY not in str(caught.value)


# -- an endpoint that quotes the credential headers in its error body (issue 14, #12) ------


def _everything_about(error: BaseException) -> str:
    """The traceback as printed, and every exception of the chain with its attributes."""
    seen: list[str] = ["".join(traceback.format_exception(error))]
    current: BaseException | None = error
    while current is not None:
        seen += [repr(current), str(current), repr(vars(current))]
        seen.append(str(pickle.loads(pickle.dumps(current))))
        current = current.__cause__ or current.__context__
    return "\n".join(seen)


ECHOED = [
    (401, "/v1/messages"),
    (400, "/v1/messages"),
    (413, "/v1/messages"),
    (500, "/v1/messages"),
    (429, "/v1/messages/count_tokens"),
]


@pytest.mark.parametrize(("status", "endpoint"), ECHOED)
@pytest.mark.parametrize("from_environment", [False, True])
def test_an_error_body_quoting_the_key_reaches_no_exception_of_the_chain(
    monkeypatch: pytest.MonkeyPatch, status: int, endpoint: str, from_environment: bool
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    with FakeAnthropicAPI() as api:
        given = None if from_environment else KEY
        provider = AnthropicProvider(api_key=given, base_url=api.base_url, max_retries=1)
        api.echo_credentials_next(2, status, endpoint=endpoint)
        with pytest.raises(ProviderError) as caught:
            if endpoint.endswith("count_tokens"):
                provider.count_tokens(REQUEST, timeout=2.0)
            else:
                provider.complete(REQUEST)
        assert KEY in json.dumps([r.headers for r in api.requests])
    assert "request headers" in str(caught.value), "the endpoint did not echo: proves nothing"
    assert KEY not in _everything_about(caught.value)


def test_spans_of_a_failed_call_carry_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    console = io.StringIO()
    captured = capture()
    captured.tracer_provider.add_span_processor(
        SimpleSpanProcessor(ConsoleSpanExporter(out=console))
    )
    with FakeAnthropicAPI() as api:
        inner = AnthropicProvider(api_key=KEY, base_url=api.base_url, max_retries=0)
        provider = instrument_provider(inner, captured.telemetry)
        api.echo_credentials_next(1, 401)
        with pytest.raises(ProviderError):
            provider.complete(REQUEST)
    printed = console.getvalue()
    assert "exception.stacktrace" in printed and "request headers" in printed
    assert KEY not in printed
    assert KEY not in repr([span.to_json() for span in captured.spans()])


# -- the key in any form: upper-cased, or a fragment of 8+ characters (issue 26, item 6) ----

OTHER_SHAPE_KEY = "gw-Zq81mPx0aLk29BvTr55nQe73yYwHc"  # a gateway key, not shaped sk-ant-


def _fragments_of(key: str, text: str) -> list[str]:
    """Every 8-character piece of ``key`` found in ``text``, in any letter case."""
    lowered = text.lower()
    return [key[i : i + 8] for i in range(len(key) - 7) if key[i : i + 8].lower() in lowered]


@pytest.mark.parametrize("form", ["verbatim", "upper", "prefix"])
@pytest.mark.parametrize("key", [KEY, OTHER_SHAPE_KEY])
def test_no_fragment_of_the_key_in_any_case_reaches_the_error(form: str, key: str) -> None:
    with FakeAnthropicAPI() as api:
        provider = AnthropicProvider(api_key=key, base_url=api.base_url, max_retries=0)
        api.echo_credentials_next(1, 401, form=form)
        with pytest.raises(ProviderError) as caught:
            provider.complete(REQUEST)
    assert "request headers" in str(caught.value), "the endpoint did not echo: proves nothing"
    assert _fragments_of(key, _everything_about(caught.value)) == []


def test_scrubbing_keeps_text_that_shares_no_fragment_with_the_key() -> None:
    from hango.providers.anthropic import scrub_secret

    text = "model claude-sonnet-4-6 refused: prompt is too long; request id req_0123"
    assert scrub_secret(text, OTHER_SHAPE_KEY) == text
    leaked = f"bad key {OTHER_SHAPE_KEY.upper()[:20]}... and {OTHER_SHAPE_KEY[5:17]}"
    scrubbed = scrub_secret(leaked, OTHER_SHAPE_KEY)
    assert _fragments_of(OTHER_SHAPE_KEY, scrubbed) == []
    assert scrubbed.startswith("bad key [redacted]")
