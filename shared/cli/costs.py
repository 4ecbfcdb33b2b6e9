"""What a command's model calls cost: the agent's and the summarizer's, priced apart.

Each :class:`CallCosts` runs the requests that were answered through one simulated
prompt cache (:class:`~hango.cost.meter.CacheMeter`, the model's minimum cacheable
prefix from its profile) and sums the output tokens the responses reported; the model's
profile prices both. ``hango simulate`` keeps one for the agent's calls (fed by
:class:`AnsweredCalls`, a loop observer) and one for the summarizer's (fed by
:class:`MeteredProvider`), because the summarizer may be another model at another
price, and its calls are no part of the agent's cache.
"""

from __future__ import annotations

import threading
from typing import Any

from hango.core.messages import Request, Response
from hango.core.profiles import ModelProfile
from hango.cost.meter import CacheMeter, cache_json, estimated_sizes
from hango.middleware.observer import NullObserver
from hango.providers.base import Capabilities, Provider
from hango.tokens.base import Estimator


class CallCosts:
    """One model's answered calls: the simulated cache report and the output tokens."""

    def __init__(self, model: str, profile: ModelProfile, estimator: Estimator) -> None:
        self.model = model
        self.profile = profile
        self.meter = CacheMeter(profile, estimated_sizes(estimator))
        self.output_tokens = 0
        self._lock = threading.Lock()  # summaries may be written on another thread

    def add(self, request: Request, response: Response) -> None:
        with self._lock:
            self.meter.add(request)
            self.output_tokens += response.usage.output_tokens

    def to_json(self) -> dict[str, Any]:
        """The ``"cache"`` object, plus the model and what its output cost."""
        price = self.profile.price
        return {
            "model": self.model,
            **cache_json(self.meter.report, price),
            "output_tokens": self.output_tokens,
            "output_cost_usd": round(price.output_cost(self.output_tokens), 6),
        }


class AnsweredCalls(NullObserver):
    """Meters each agent request that got a response (a refused one is never cached)."""

    def __init__(self, costs: CallCosts) -> None:
        self.costs = costs
        self._pending: Request | None = None

    def request_sent(self, session_id: str, turn: int, request: Request, input_tokens: int) -> None:
        self._pending = request

    def response_received(self, session_id: str, turn: int, response: Response) -> None:
        if self._pending is not None:
            self.costs.add(self._pending, response)
            self._pending = None


class MeteredProvider:
    """Answers exactly as ``inner`` does, metering each answered call into ``costs``."""

    def __init__(self, inner: Provider, costs: CallCosts) -> None:
        self.inner = inner
        self.costs = costs

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def capabilities(self) -> Capabilities:
        return self.inner.capabilities

    def complete(self, request: Request) -> Response:
        response = self.inner.complete(request)
        self.costs.add(request, response)
        return response
