"""What a command's model calls cost: the agent's and the summarizer's, priced apart.

Each :class:`CallCosts` runs the requests that were answered through one simulated
prompt cache (:class:`~hango.cost.meter.CacheMeter`, the model's minimum cacheable
prefix from its profile) and sums the output tokens the responses reported; the model's
profile prices both. ``hango simulate`` keeps one for the agent's calls (fed by
:class:`AnsweredCalls`, a loop observer) and one for the summarizer's (fed by
:class:`MeteredProvider`), because the summarizer may be another model at another
price, and its calls are no part of the agent's cache. ``hango replay`` summarizes by
extraction, offline: :class:`EstimatedSummaries` meters the request a model summarizer
would have been sent for each job and the extracted text as its output, so the summaries'
calls and cost are reported there too (estimated, at the summarizer model's price).
"""

from __future__ import annotations

import threading
from typing import Any

from hango.compaction.jobs import Summarizer, SummaryJob, SummaryResult
from hango.compaction.prefix import prefix_instruction_of
from hango.compaction.route import usage_cost
from hango.compaction.summary_prompt import build_summary_request
from hango.core.messages import Request, Response, Usage
from hango.core.price import Price
from hango.core.profiles import ModelProfile, Profiles
from hango.core.settings import Settings
from hango.cost.meter import CacheMeter, cache_json, estimated_sizes
from hango.middleware.observer import NullObserver
from hango.middleware.summary_route import PrefixSummarizer
from hango.providers.base import Capabilities, Provider
from hango.summarizers.llm import DEFAULT_SUMMARY_MAX_TOKENS
from hango.tokens import make_estimator
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


def run_costs(settings: Settings) -> tuple[CallCosts, CallCosts]:
    """The agent's and the summarizer's call costs, each at its own model's profile."""
    profiles = Profiles.from_settings(settings)
    estimator = make_estimator(settings.estimator)
    summarizer = settings.summarizer_model or settings.model
    return (
        CallCosts(settings.model, profiles.resolve(settings.model), estimator),
        CallCosts(summarizer, profiles.resolve(summarizer), estimator),
    )


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


class EstimatedSummaries:
    """Summarizes as ``inner`` does, metering into ``costs`` what a model summarizer would
    have been charged for each job: its request as built for the model (estimated) in,
    the text returned out (in the estimator's tokens)."""

    def __init__(self, inner: Summarizer, costs: CallCosts, estimator: Estimator) -> None:
        self.inner = inner
        self.costs = costs
        self.estimator = estimator

    @property
    def name(self) -> str:
        return getattr(self.inner, "name", type(self.inner).__name__)

    def summarize(self, job: SummaryJob) -> SummaryResult:
        """The inner summary; without usage of its own, it carries the estimate (so the
        compaction record that installs it says what a model would have cost)."""
        result = self.inner.summarize(job)
        request = build_summary_request(
            job, model=job.model, max_tokens=job.max_tokens or DEFAULT_SUMMARY_MAX_TOKENS
        )
        usage = Usage(
            input_tokens=self.estimator.estimate_request(request),
            output_tokens=self.estimator.estimate(result.text),
        )
        self.costs.add(request, Response(id="estimated", model=job.model, content=(), usage=usage))
        return result if result.usage is not None else result.model_copy(update={"usage": usage})


class PrefixCalls:
    """Every prefix-route summary call's usage, summed: a pre-summary's that was never
    installed too, so a run's prefix-route cost is all of it, not only what the
    compaction records carry (priced at the agent's model: the route is its calls)."""

    def __init__(self) -> None:
        self.calls = 0
        self.usage = Usage()
        self._lock = threading.Lock()  # pre-summaries are made on pool threads

    def add(self, usage: Usage | None) -> None:
        with self._lock:
            self.calls += 1
            self.usage = self.usage if usage is None else self.usage.plus(usage)

    def to_json(self, price: Price) -> dict[str, Any]:
        """The calls, their summed usage and what it cost at ``price``."""
        usage = self.usage
        whole, output = usage_cost(usage, price), price.output_cost(usage.output_tokens)
        return {
            "calls": self.calls,
            "input_tokens": usage.input_tokens,
            "cache_read_input_tokens": usage.cache_read_input_tokens or 0,
            "output_tokens": usage.output_tokens,
            "input_cost_usd": round(whole - output, 6),
            "output_cost_usd": round(output, 6),
            "cost_usd": round(whole, 6),
        }


class MeteredPrefix:
    """Makes prefix-route summaries as ``inner`` does, summing each call's usage."""

    def __init__(self, inner: PrefixSummarizer, calls: PrefixCalls) -> None:
        self.inner = inner
        self.calls = calls

    def summarize(self, job: SummaryJob, request: Request) -> SummaryResult:
        result = self.inner.summarize(job, request)
        self.calls.add(result.usage)
        return result


class EstimatedPrefix:
    """The prefix route offline: ``inner``'s summary of the job, carrying the usage the
    prefix request would have had (estimated): all but its instruction read from the
    cache, the instruction fresh, the returned text as output; every call summed in
    ``calls``."""

    def __init__(self, inner: Summarizer, estimator: Estimator) -> None:
        self.inner = inner
        self.estimator = estimator
        self.calls = PrefixCalls()

    def summarize(self, job: SummaryJob, request: Request) -> SummaryResult:
        result = self.inner.summarize(job)
        fresh = self.estimator.estimate(prefix_instruction_of(request) or "")
        total = self.estimator.estimate_request(request)
        usage = Usage(
            input_tokens=fresh,
            cache_read_input_tokens=max(0, total - fresh),
            output_tokens=self.estimator.estimate(result.text),
        )
        self.calls.add(usage)
        return result.model_copy(update={"usage": usage})
