"""The provider boundary: one required ability and one optional one.

``Provider.complete`` sends a request and returns the model's response, raising the
errors of :mod:`shared.errors` (never an SDK exception). ``TokenCounter`` is optional and
checked with ``isinstance``: a provider that can count a request exactly implements it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from shared.messages import Request, Response


@dataclass(frozen=True)
class Capabilities:
    """What a provider can do beyond sending a request."""

    prompt_caching: bool = False
    token_counting: bool = False


class Provider(Protocol):
    """Sends one request to a model."""

    @property
    def name(self) -> str:
        """The provider's name as OpenTelemetry knows it (``gen_ai.provider.name``)."""
        ...

    @property
    def capabilities(self) -> Capabilities: ...

    def complete(self, request: Request) -> Response: ...


@runtime_checkable
class TokenCounter(Protocol):
    """Counts the input tokens of a whole request, exactly as the provider will."""

    def count_tokens(self, request: Request, *, timeout: float) -> int: ...
