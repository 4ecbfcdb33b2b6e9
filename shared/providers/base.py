"""The provider boundary: one required ability and one optional one.

``Provider.complete`` raises the errors of :mod:`hango.core.errors`, never an SDK
exception. Counting a request exactly is :class:`hango.tokens.base.TokenCounter`, checked
with ``isinstance``: a wrapper around a provider that cannot count has no such method.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from hango.core.messages import Request, Response


@dataclass(frozen=True)
class Capabilities:
    """What a provider can do beyond sending a request."""

    prompt_caching: bool = False


class Provider(Protocol):
    """Sends one request to a model."""

    @property
    def name(self) -> str:
        """The provider's name as OpenTelemetry knows it (``gen_ai.provider.name``)."""

    @property
    def capabilities(self) -> Capabilities: ...

    def complete(self, request: Request) -> Response: ...
