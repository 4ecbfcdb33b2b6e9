"""An API key never shows up in an error, its chain, or a traceback."""

from __future__ import annotations

import traceback

import pytest

from shared.core.errors import ProviderError
from shared.core.messages import Message, Request
from shared.core.settings import load_settings
from shared.providers.anthropic import AnthropicProvider
from tests.fakeapi import FakeAnthropicAPI

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
