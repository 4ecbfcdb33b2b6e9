"""AnthropicProvider through the real SDK against the loopback fake of the Messages API."""

from __future__ import annotations

import logging
import pickle
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from hango.core.errors import (
    ConfigError,
    ContextOverflowError,
    InvalidRequestError,
    ProviderError,
    TransientProviderError,
)
from hango.core.messages import Request
from hango.core.settings import Settings
from hango.providers.anthropic import AnthropicProvider
from hango.providers.base import Capabilities
from hango.tokens.base import TokenCounter
from tests.fakeapi import (
    FakeAnthropicAPI,
    ScriptedError,
    count_input_tokens,
    fake_api,
    text_reply,
    tool_use_reply,
)

__all__ = ["fake_api"]  # the fixture, imported so pytest finds it here

SECRET = "sk-ant-api03-NEVER-SHOW-ME-0123456789"

REQUEST = Request.model_validate(
    {
        "model": "claude-sonnet-4-6",
        "max_tokens": 1024,
        "system": [
            {"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}
        ],
        "tools": [
            {
                "name": "ls",
                "description": "List a directory.",
                "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
            }
        ],
        "messages": [
            {"role": "user", "content": "List src and tests."},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {"path": "src"}},
                    {"type": "tool_use", "id": "toolu_2", "name": "ls", "input": {"path": "tests"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.py b.py"},
                    {"type": "tool_result", "tool_use_id": "toolu_2", "content": "test_a.py"},
                ],
            },
        ],
        "temperature": 0.0,
    }
)


def provider_for(api: FakeAnthropicAPI, **options: Any) -> AnthropicProvider:
    options.setdefault("max_retries", 0)
    return AnthropicProvider(api_key=SECRET, base_url=api.base_url, **options)


def with_messages(*messages: dict[str, Any]) -> Request:
    return REQUEST.model_copy(
        update={
            "messages": Request.model_validate(
                {"model": "m", "max_tokens": 1, "messages": list(messages)}
            ).messages
        }
    )


# -- the happy path ------------------------------------------------------------------------


def test_complete_posts_exactly_the_request_json_and_parses_the_reply(
    fake_api: FakeAnthropicAPI,
) -> None:
    fake_api.push(tool_use_reply(("toolu_3", "ls", {"path": "docs"}), text="One more."))
    response = provider_for(fake_api).complete(REQUEST)

    (sent,) = fake_api.message_requests()
    assert sent.body == REQUEST.to_api()
    assert sent.headers["authorization"] == f"Bearer {SECRET}"
    assert sent.headers["anthropic-version"]
    assert [(u.id, u.name, u.input) for u in response.tool_uses()] == [
        ("toolu_3", "ls", {"path": "docs"})
    ]
    assert response.stop_reason == "tool_use"
    assert response.model == "claude-sonnet-4-6"
    assert response.usage.total_input_tokens() == count_input_tokens(REQUEST.to_api())


def test_usage_reports_cache_writes_then_reads(fake_api: FakeAnthropicAPI) -> None:
    provider = provider_for(fake_api)
    first = provider.complete(REQUEST).usage
    second = provider.complete(REQUEST).usage
    assert first.cache_creation_input_tokens and first.cache_creation_input_tokens > 0
    assert first.cache_read_input_tokens == 0
    assert second.cache_read_input_tokens == first.cache_creation_input_tokens
    assert second.cache_creation_input_tokens == 0
    assert second.input_tokens == first.input_tokens


def test_reply_fields_the_sdk_does_not_model_are_kept(fake_api: FakeAnthropicAPI) -> None:
    content = [
        {"type": "text", "text": "See the log.", "citations": None},
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}},
    ]
    fake_api.push({"content": content, "container": None, "usage": {"service_tier": "batch"}})
    response = provider_for(fake_api).complete(REQUEST)
    dumped = response.to_api()
    assert dumped["content"] == content
    assert dumped["container"] is None
    assert dumped["usage"]["service_tier"] == "batch"


def test_provider_shape(fake_api: FakeAnthropicAPI) -> None:
    provider = provider_for(fake_api, prompt_caching=False)
    assert provider.name == "anthropic"
    assert provider.capabilities == Capabilities(prompt_caching=False)
    assert provider_for(fake_api).capabilities.prompt_caching is True
    assert isinstance(provider, TokenCounter)


def test_from_settings_uses_key_url_timeout_and_retries(fake_api: FakeAnthropicAPI) -> None:
    settings = Settings(
        anthropic_api_key=SecretStr(SECRET),
        anthropic_base_url=fake_api.base_url,
        provider_timeout=7.5,
        provider_max_retries=1,
    )
    provider = AnthropicProvider.from_settings(settings)
    fake_api.fail_next(1, 529)
    assert provider.complete(REQUEST).stop_reason == "end_turn"
    first, second = fake_api.message_requests()
    assert second.headers["authorization"] == f"Bearer {SECRET}"
    assert first.headers["x-stainless-read-timeout"] == "7.5"


# -- overflow ------------------------------------------------------------------------------


def test_prompt_too_long_becomes_overflow_with_tokens_and_maximum() -> None:
    with FakeAnthropicAPI(window=100) as api, pytest.raises(ContextOverflowError) as caught:
        provider_for(api).complete(REQUEST)
    error = caught.value
    assert error.tokens == count_input_tokens(REQUEST.to_api())
    assert error.maximum == 100
    assert error.status == 400
    assert f"prompt is too long: {error.tokens} tokens > 100 maximum" in str(error)
    # No SDK error in the chain: its body may quote the credentials (see test_secrets).
    assert error.__cause__ is None and error.__context__ is None
    restored = pickle.loads(pickle.dumps(error))
    assert (restored.tokens, restored.maximum) == (error.tokens, 100)


def test_input_plus_max_tokens_over_the_window_is_an_overflow(fake_api: FakeAnthropicAPI) -> None:
    text = "input length and `max_tokens` exceed context limit: 199000 + 8000 > 200000, ..."
    fake_api.push(ScriptedError(400, "invalid_request_error", text))
    with pytest.raises(ContextOverflowError) as caught:
        provider_for(fake_api).complete(REQUEST)
    assert (caught.value.tokens, caught.value.maximum) == (207_000, 200_000)


@pytest.mark.parametrize(
    "text", ["prompt is too long", "Prompt is too long.", "prompt is too long: 12 tokens"]
)
def test_a_prompt_too_long_without_figures_is_an_overflow(
    fake_api: FakeAnthropicAPI, text: str
) -> None:
    fake_api.push(ScriptedError(400, "invalid_request_error", text))
    with pytest.raises(ContextOverflowError) as caught:
        provider_for(fake_api).complete(REQUEST)
    assert (caught.value.tokens, caught.value.maximum, caught.value.status) == (None, None, 400)
    assert text in str(caught.value)


def test_a_request_too_large_413_is_an_overflow(fake_api: FakeAnthropicAPI) -> None:
    fake_api.fail_next(1, 413)
    with pytest.raises(ContextOverflowError) as caught:
        provider_for(fake_api).complete(REQUEST)
    assert (caught.value.tokens, caught.value.maximum, caught.value.status) == (None, None, 413)
    assert "request_too_large" in str(caught.value)


def test_stop_reason_window_exceeded_is_an_overflow(fake_api: FakeAnthropicAPI) -> None:
    fake_api.push(text_reply("partial", stop_reason="model_context_window_exceeded"))
    with pytest.raises(ContextOverflowError) as caught:
        provider_for(fake_api).complete(REQUEST)
    assert (caught.value.tokens, caught.value.maximum) == (None, None)
    assert "model_context_window_exceeded" in str(caught.value)


# -- other errors --------------------------------------------------------------------------


def test_orphan_tool_use_is_an_invalid_request_with_the_api_text(
    fake_api: FakeAnthropicAPI,
) -> None:
    orphan = with_messages(
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_9", "name": "ls", "input": {}}],
        },
        {"role": "user", "content": "never mind"},
    )
    with pytest.raises(InvalidRequestError) as caught:
        provider_for(fake_api).complete(orphan)
    assert not isinstance(caught.value, ContextOverflowError)
    assert caught.value.status == 400
    assert (
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: "
        "toolu_9. Each `tool_use` block must have a corresponding `tool_result` block in the "
        "next message." in str(caught.value)
    )


def test_orphan_tool_result_is_an_invalid_request(fake_api: FakeAnthropicAPI) -> None:
    orphan = with_messages(
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_gone", "content": "x"}],
        },
    )
    with pytest.raises(
        InvalidRequestError, match=r"messages\.0\.content\.0: unexpected `tool_use_id`"
    ):
        provider_for(fake_api).complete(orphan)


@pytest.mark.parametrize("status", [429, 500, 503, 529])
def test_transient_statuses(fake_api: FakeAnthropicAPI, status: int) -> None:
    fake_api.fail_next(1, status)
    with pytest.raises(TransientProviderError) as caught:
        provider_for(fake_api).complete(REQUEST)
    assert caught.value.status == status
    assert len(fake_api.message_requests()) == 1


@pytest.mark.parametrize("status", [401, 403, 404])
def test_other_statuses_are_plain_provider_errors(fake_api: FakeAnthropicAPI, status: int) -> None:
    fake_api.fail_next(1, status)
    with pytest.raises(ProviderError) as caught:
        provider_for(fake_api).complete(REQUEST)
    assert type(caught.value) is ProviderError
    assert caught.value.status == status


def test_sdk_retries_transient_errors(fake_api: FakeAnthropicAPI) -> None:
    fake_api.fail_next(2, 529)
    response = provider_for(fake_api, max_retries=2).complete(REQUEST)
    assert response.stop_reason == "end_turn"
    assert len(fake_api.message_requests()) == 3


def test_retries_run_out(fake_api: FakeAnthropicAPI) -> None:
    fake_api.fail_next(3, 500)
    with pytest.raises(TransientProviderError):
        provider_for(fake_api, max_retries=2).complete(REQUEST)
    assert len(fake_api.message_requests()) == 3


def test_slow_server_times_out_quickly(fake_api: FakeAnthropicAPI) -> None:
    fake_api.message_delay = 5.0
    started = time.monotonic()
    with pytest.raises(TransientProviderError, match="timed out"):
        provider_for(fake_api, timeout=0.3).complete(REQUEST)
    assert time.monotonic() - started < 2.0


def test_unreachable_server_is_transient() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again before the call: nobody listens
    provider = AnthropicProvider(api_key=SECRET, base_url=f"http://127.0.0.1:{port}", max_retries=0)
    with pytest.raises(TransientProviderError, match="connection"):
        provider.complete(REQUEST)


def test_body_that_is_not_a_message_is_a_provider_error(fake_api: FakeAnthropicAPI) -> None:
    fake_api.push({"content": "not a list of blocks"})
    with pytest.raises(ProviderError, match="not a message") as caught:
        provider_for(fake_api).complete(REQUEST)
    assert caught.value.status == 200


def _no_credentials_anywhere(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("ANTHROPIC_CONFIG_DIR", raising=False)
    monkeypatch.setenv("HOME", str(home))


def test_missing_key_fails_clearly(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _no_credentials_anywhere(monkeypatch, tmp_path)
    provider = AnthropicProvider(api_key=None, base_url="http://127.0.0.1:9")
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
        provider.complete(REQUEST)
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
        provider.count_tokens(REQUEST, timeout=1.0)


def test_broken_credentials_profile_fails_at_construction(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _no_credentials_anywhere(monkeypatch, tmp_path)
    monkeypatch.setenv("ANTHROPIC_CONFIG_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(ConfigError, match=r"Anthropic credentials: .*not found") as caught:
        AnthropicProvider(api_key=None, base_url="http://127.0.0.1:9")
    assert caught.value.variable == "ANTHROPIC_API_KEY"


# -- the key never shows -------------------------------------------------------------------


def test_api_key_is_absent_from_errors_and_logs(
    fake_api: FakeAnthropicAPI, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    provider = provider_for(fake_api, timeout=0.3)
    fake_api.push(
        ScriptedError(401, "authentication_error", f"invalid x-api-key {SECRET}"),
        ScriptedError(400, "invalid_request_error", f"bad request for key {SECRET}"),
    )
    fake_api.fail_next(1, 529, endpoint="/v1/messages/count_tokens")
    errors: list[BaseException] = []
    for call in (
        lambda: provider.complete(REQUEST),
        lambda: provider.complete(REQUEST),
        lambda: provider.count_tokens(REQUEST, timeout=1.0),
    ):
        with pytest.raises(ProviderError) as caught:
            call()
        errors.append(caught.value)
    assert len(errors) == 3
    assert "[redacted]" in str(errors[0])
    for error in errors:
        assert SECRET not in str(error)
        assert SECRET not in repr(error)
        assert SECRET not in str(pickle.loads(pickle.dumps(error)))
    assert SECRET not in repr(provider)
    assert caplog.records, "the SDK logged nothing at DEBUG: the log check proves nothing"
    assert SECRET not in caplog.text


# -- counting ------------------------------------------------------------------------------


def test_count_tokens_returns_the_server_figure(fake_api: FakeAnthropicAPI) -> None:
    counted = provider_for(fake_api).count_tokens(REQUEST, timeout=2.0)
    (sent,) = fake_api.count_requests()
    assert counted == count_input_tokens(REQUEST.to_api())
    assert "max_tokens" not in sent.body
    assert "temperature" not in sent.body
    assert sent.body["messages"] == REQUEST.to_api()["messages"]
    assert sent.body["tools"] == REQUEST.to_api()["tools"]


def test_count_tokens_never_retries(fake_api: FakeAnthropicAPI) -> None:
    fake_api.fail_next(1, 529, endpoint="/v1/messages/count_tokens")
    with pytest.raises(TransientProviderError):
        provider_for(fake_api, max_retries=2).count_tokens(REQUEST, timeout=2.0)
    assert len(fake_api.count_requests()) == 1


def test_count_tokens_honours_its_deadline(fake_api: FakeAnthropicAPI) -> None:
    fake_api.count_delay = 5.0
    started = time.monotonic()
    with pytest.raises(TransientProviderError, match="timed out"):
        provider_for(fake_api, timeout=30.0).count_tokens(REQUEST, timeout=0.3)
    assert time.monotonic() - started < 2.0
