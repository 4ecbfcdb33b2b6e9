"""The Anthropic adapter: sends wire requests through the official ``anthropic`` SDK.

It owns four things: building the SDK client (timeouts and retries are the SDK's own
options, never a loop of ours), sending exactly the JSON of a :class:`Request`, reading
the raw response JSON into a :class:`Response` (so no field the SDK does not model is
lost), and :func:`provider_error` -- the one place where SDK exceptions become
:mod:`hango.core.errors`. The API key is only ever handed to the SDK; error messages are
built from the API's own error text and scrubbed of the key.

No SDK exception crosses the boundary, not even as the cause or context of ours: an
endpoint (some proxies do) may quote the ``Authorization`` or ``x-api-key`` header in its
error body, and the SDK error keeps that body, its response and its request. Tracebacks,
span events (``exception.stacktrace``), worker logs and Celery results print the whole
chain, so the product error is raised outside the ``except`` block, with no chain at all.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from typing import Any, TypeVar, cast

import anthropic
from pydantic import BaseModel, ValidationError

from hango.core.errors import (
    ConfigError,
    ContextOverflowError,
    InvalidRequestError,
    ProviderError,
    TransientProviderError,
)
from hango.core.identity import HeldMemo
from hango.core.messages import Request, Response
from hango.core.settings import Settings
from hango.providers.base import Capabilities

# The API gives no error code for an overflow, only this text (research note A3), so
# matching it is unavoidable; it is matched here and nowhere else.
_PROMPT_TOO_LONG = re.compile(r"prompt is too long:\s*(\d+)\s*tokens?\s*>\s*(\d+)\s*maximum")
# The same refusal without its figures (some gateways and older API versions send only
# this): still an overflow, just one that says nothing about how far over it is.
_PROMPT_TOO_LONG_BARE = re.compile(r"prompt is too long", re.IGNORECASE)
# A body over the API's byte limit: more context than the endpoint takes, so the overflow
# ladder (compaction, then truncation) is the cure, never a retry of the same bytes.
_REQUEST_TOO_LARGE = 413
# Models before Claude 4.5 refuse input + max_tokens over the window with this text.
_INPUT_PLUS_OUTPUT = re.compile(
    r"input length and `?max_tokens`? exceed context limit:\s*(\d+)\s*\+\s*(\d+)\s*>\s*(\d+)"
)
# Worth retrying: request timeout, rate limit; every status >= 500 (529 overloaded too).
_TRANSIENT_STATUSES = frozenset({408, 429})
# Keys that only steer generation: the count endpoint refuses them and they cost no input.
_GENERATION_ONLY = frozenset(
    {"max_tokens", "stream", "stop_sequences", "temperature", "top_p", "top_k", "metadata"}
    | {"service_tier", "inference_geo", "container", "diagnostics"}
)
# Anthropic API keys and OAuth tokens, scrubbed even when the configured secret is unknown.
_KEY_PATTERN = re.compile(r"sk-ant-[A-Za-z0-9_\-]{8,}")

T = TypeVar("T")
ModelT = TypeVar("ModelT", bound=BaseModel)


def provider_error(error: anthropic.AnthropicError, *, secret: str | None) -> ProviderError:
    """The product error for an SDK error; the only place SDK errors are interpreted."""
    if isinstance(error, anthropic.APIStatusError):
        return _status_error(error, secret)
    if isinstance(error, anthropic.APIConnectionError):  # APITimeoutError is one too
        kind = "timed out" if isinstance(error, anthropic.APITimeoutError) else "connection failed"
        return TransientProviderError(_scrub(f"Anthropic API {kind}: {error}", secret))
    return ProviderError(_scrub(f"Anthropic SDK error: {type(error).__name__}: {error}", secret))


def _status_error(error: anthropic.APIStatusError, secret: str | None) -> ProviderError:
    status = error.status_code
    text = error.api_message or str(error.body or error)
    message = _scrub(f"Anthropic API {status} ({error.type or 'error'}): {text}", secret)
    if error.request_id:
        message += f" [request {error.request_id}]"
    if status == 400:
        return bad_request_error(text, message)
    if status == _REQUEST_TOO_LARGE:
        return ContextOverflowError(message, status=status)
    if status in _TRANSIENT_STATUSES or status >= 500:
        return TransientProviderError(message, status=status)
    return ProviderError(message, status=status)


def bad_request_error(text: str, message: str) -> ProviderError:
    too_long = _PROMPT_TOO_LONG.search(text)
    if too_long:
        tokens, maximum = (int(g) for g in too_long.groups())
        return ContextOverflowError(message, tokens=tokens, maximum=maximum, status=400)
    input_plus_output = _INPUT_PLUS_OUTPUT.search(text)
    if input_plus_output:
        # ``tokens`` is input + max_tokens here: what has to come under ``maximum``.
        given, reserved, maximum = (int(g) for g in input_plus_output.groups())
        return ContextOverflowError(message, tokens=given + reserved, maximum=maximum, status=400)
    if _PROMPT_TOO_LONG_BARE.search(text):
        return ContextOverflowError(message, status=400)
    return InvalidRequestError(message, status=400)


def _scrub(text: str, secret: str | None) -> str:
    if secret:
        text = scrub_secret(text, secret)
    return _KEY_PATTERN.sub(REDACTED, text)


REDACTED = "[redacted]"
# The shortest piece of the key that is removed wherever it appears, in any letter case.
MIN_FRAGMENT = 8
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def scrub_secret(text: str, secret: str) -> str:
    """``text`` with every run made of pieces of ``secret`` (8+ characters, any case) redacted.

    An endpoint may echo the key upper-cased, or "mask" it to its first 20 characters:
    exact matching missed both. Every 8-character window of the text that is also one of
    the key's (case folded, ASCII only so positions stay aligned) is covered; covered
    runs become ``[redacted]``. Any fragment of 8 or more characters is made of such
    windows, so none survives.
    """
    if len(secret) < MIN_FRAGMENT:
        return text.replace(secret, REDACTED) if secret else text
    key = secret.translate(_ASCII_LOWER)
    windows = {key[i : i + MIN_FRAGMENT] for i in range(len(key) - MIN_FRAGMENT + 1)}
    lowered = text.translate(_ASCII_LOWER)
    if not any(window in lowered for window in windows):
        return text  # the common case, at C speed
    covered = bytearray(len(text))
    for start in range(len(text) - MIN_FRAGMENT + 1):
        if lowered[start : start + MIN_FRAGMENT] in windows:
            covered[start : start + MIN_FRAGMENT] = b"\1" * MIN_FRAGMENT
    return _replace_covered(text, covered)


def _replace_covered(text: str, covered: bytearray) -> str:
    parts: list[str] = []
    index = 0
    for is_covered, run in itertools.groupby(covered):
        end = index + sum(1 for _ in run)
        parts.append(REDACTED if is_covered else text[index:end])
        index = end
    return "".join(parts)


class AnthropicProvider:
    """``Provider`` and ``TokenCounter`` backed by the Anthropic Messages API."""

    name = "anthropic"

    def __init__(
        self,
        *,
        api_key: str | None,
        base_url: str | None = None,
        timeout: float = 120.0,
        max_retries: int = 2,
        prompt_caching: bool = True,
    ) -> None:
        # With api_key None the SDK falls back to ANTHROPIC_API_KEY / its profile files.
        self._secret = api_key
        try:
            self._client = anthropic.Anthropic(
                api_key=api_key, base_url=base_url, timeout=timeout, max_retries=max_retries
            )
        except anthropic.AnthropicError as e:  # a broken credentials profile on disk
            raise ConfigError(
                _scrub(f"Anthropic credentials: {e}", api_key), variable="ANTHROPIC_API_KEY"
            ) from None
        # Counting is a cheap pre-check with its own deadline: a retry would only blow it.
        self._counting_client = self._client.with_options(max_retries=0)
        # The serialized fixed part of the requests sent (system, tools), per those objects:
        # a loop sends the same ones on every call.
        self._fixed: HeldMemo[bytes] = HeldMemo()
        self.capabilities = Capabilities(prompt_caching=prompt_caching)

    @classmethod
    def from_settings(cls, settings: Settings) -> AnthropicProvider:
        key = settings.anthropic_api_key
        return cls(
            api_key=key.get_secret_value() if key is not None else None,
            base_url=settings.anthropic_base_url,
            timeout=settings.provider_timeout,
            max_retries=settings.provider_max_retries,
        )

    def __repr__(self) -> str:
        return f"AnthropicProvider(base_url={str(self._client.base_url)!r})"

    def complete(self, request: Request) -> Response:
        """Send ``request`` as is; raise :mod:`hango.core.errors` on failure or overflow.

        The body goes as the bytes the request serialized (:meth:`Request.api_bytes`),
        through the SDK's own ``post``: its retries, timeouts, headers and errors, without
        its copying and serializing of a long history's JSON on every call.
        """
        self.require_credentials()
        body = request.api_bytes(fixed=self._fixed)
        content = self._guarded(lambda: self._post(self._client, "/v1/messages", body))
        response = self._guarded(
            lambda: _parsed(Response, content, request.model, "Messages API", "a message")
        )
        if response.stop_reason == "model_context_window_exceeded":
            raise ContextOverflowError(
                f"{request.model}: generation stopped at the context window "
                f"(stop_reason model_context_window_exceeded, "
                f"{response.usage.total_input_tokens()} input tokens)"
            )
        return response

    def count_tokens(self, request: Request, *, timeout: float) -> int:
        """The API's input-token count of ``request``, within ``timeout`` seconds, no retry."""
        self.require_credentials()
        body = request.api_bytes(drop=_GENERATION_ONLY, fixed=self._fixed)
        client = self._counting_client
        path = "/v1/messages/count_tokens"
        content = self._guarded(lambda: self._post(client, path, body, timeout))
        counted = self._guarded(
            lambda: _parsed(_Counted, content, request.model, "token count endpoint", "a count")
        )
        return counted.input_tokens

    @staticmethod
    def _post(
        client: anthropic.Anthropic, path: str, body: bytes, timeout: float | None = None
    ) -> bytes:
        options: dict[str, Any] = {"headers": {"Content-Type": "application/json"}}
        if timeout is not None:
            options["timeout"] = timeout
        return client.post(path, content=body, cast_to=bytes, options=cast(Any, options))

    def _guarded(self, call: Callable[[], T]) -> T:
        """``call()``, with whatever it raises turned into a scrubbed, unchained product error."""
        try:
            return call()
        except ProviderError as e:  # ours (a body that is not a message): scrub, unchain
            error: ProviderError = type(e)(_scrub(e.message, self._secrets()), status=e.status)
        except anthropic.AnthropicError as e:
            error = provider_error(e, secret=self._secrets())
        except Exception as e:  # the HTTP client or the SDK failing in a way it does not wrap
            text = f"Anthropic SDK error: {type(e).__name__}: {e}"
            error = ProviderError(_scrub(text, self._secrets()))
        raise error  # outside the except block: no SDK exception in __cause__ or __context__

    def _secrets(self) -> str | None:
        """The key in use: the one given, else the one the SDK found in its environment."""
        return self._secret or self._client.api_key or self._client.auth_token

    def require_credentials(self) -> None:
        """:class:`ConfigError` unless the SDK has an API key, a token or credentials."""
        client = self._client
        if client.api_key is None and client.auth_token is None and client.credentials is None:
            raise ConfigError(
                "no Anthropic API key: set ANTHROPIC_API_KEY (or HANGO_ANTHROPIC_API_KEY)",
                variable="ANTHROPIC_API_KEY",
            )


class _Counted(BaseModel):
    input_tokens: int


def _parsed(kind: type[ModelT], content: bytes, model: str, endpoint: str, what: str) -> ModelT:
    """``content`` read as a ``kind``; a body that is not one is a :class:`ProviderError`."""
    try:
        return kind.model_validate_json(content)
    except ValidationError as e:
        raise ProviderError(
            f"{model}: the {endpoint} answered with a body that is not {what}: "
            f"{e.errors()[0]['msg']} ({content[:200]!r})",
            status=200,
        ) from None
