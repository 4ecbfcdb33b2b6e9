"""Price-aware summary routing: each in-process summary on the warm prefix or the range.

For each compaction the router prices both routes (:mod:`hango.compaction.route`), the
prefix at the agent model's prices and the range at the summarizer's, and takes the
cheaper unless ``HANGO_SUMMARY_ROUTE`` forces one or the prefix route is closed.

A pre-summary (made ahead of the trigger on a pool thread) is routed by the same rule
when it is dispatched: the prefix is the request the session sent last (answered, so
warm) and the instruction names the messages the pre-summary's cut keeps. A prefix reply
that calls a tool, is empty or fails falls back to the range route; its cost stays in the
record's real cost. Queued summaries take the range route (the prefix route needs the
exact last request, which only this process holds).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from hango.compaction.jobs import SummaryJob, SummaryResult
from hango.compaction.prefix import prefix_instruction, prefix_problem, prefix_request
from hango.compaction.route import (
    CACHE_TTL_SECONDS,
    RouteName,
    RouteSetting,
    SummaryRoute,
    expected_prefix_cost,
    expected_range_cost,
    usage_cost,
)
from hango.compaction.summary_prompt import SUMMARY_SYSTEM_PROMPT, build_summary_request
from hango.core.deadline import CallAbandoned, call_within
from hango.core.identity import RecentlyUsed
from hango.core.messages import Request
from hango.core.price import Price
from hango.middleware.base import ModelCall
from hango.middleware.observer import NullObserver
from hango.middleware.pacing import Clock
from hango.providers.base import Provider
from hango.summarizers.llm import DEFAULT_SUMMARY_MAX_TOKENS, summary_text
from hango.tokens.base import Estimator

log = logging.getLogger("hango.middleware.summarization")

PREFIX_SUMMARIZER = "prefix"
# The range route as the middleware asks it (its own fallback included).
RangeAsk = Callable[[SummaryJob], SummaryResult]

# What a pre-summary's route reason opens with (the record tells it from the trigger's).
PRESUMMARY_OPENING = "pre-summary: "


@dataclass(frozen=True)
class SentRequest:
    """A request as the provider got it, when (on the pacer's clock) and its measured size."""

    request: Request
    at: float
    tokens: int


class _Slot:
    sent: SentRequest | None = None


class SentRequests(NullObserver):
    """The last request each session sent, seen where the loop hands it to the provider
    (after every middleware, breakpoints included)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._slots: RecentlyUsed[_Slot] = RecentlyUsed()

    def request_sent(self, session_id: str, turn: int, request: Request, input_tokens: int) -> None:
        self._slots.get(session_id, _Slot).sent = SentRequest(request, self.clock(), input_tokens)

    def last(self, session_id: str) -> SentRequest | None:
        return self._slots.get(session_id, _Slot).sent


class PrefixSummarizer(Protocol):
    """Answers a prefix request with a summary; ``fallback_reason`` set: no summary."""

    def summarize(self, job: SummaryJob, request: Request) -> SummaryResult: ...


@dataclass(frozen=True)
class ProviderPrefix:
    """The prefix route on the agent's provider, under one deadline."""

    provider: Provider
    timeout: float

    def summarize(self, job: SummaryJob, request: Request) -> SummaryResult:
        try:
            response = call_within(
                self.timeout, lambda: self.provider.complete(request), name="hango-summary"
            )
        except CallAbandoned:
            return _failed(f"no prefix summary within {self.timeout:g} s")
        except Exception as error:  # the turn must complete whatever the provider does
            return _failed(f"provider error: {type(error).__name__}: {error}")
        text, problem = summary_text(response)
        if problem is None and response.stop_reason == "max_tokens":
            problem = "summary cut off at max_tokens"
        return SummaryResult(
            text="" if problem else text,
            summarizer=PREFIX_SUMMARIZER,
            usage=response.usage,
            fallback_reason=problem,
        )


def _failed(reason: str) -> SummaryResult:
    return SummaryResult(text="", summarizer=PREFIX_SUMMARIZER, fallback_reason=reason)


@dataclass(frozen=True)
class RouterPrices:
    agent: Price
    summarizer: Price


@dataclass(frozen=True)
class _Choice:
    name: RouteName
    reason: str
    expected_prefix: float | None
    expected_range: float
    sent: SentRequest | None = None
    kept: int = 0


@dataclass(kw_only=True, eq=False)
class SummaryRouter:
    """Chooses each in-process summary's route and makes it (see the module docstring)."""

    prices: RouterPrices
    estimator: Estimator
    sent: SentRequests
    prefix: PrefixSummarizer | None = None
    caches: bool = False
    # The agent's window: the prefix plus the instruction must fit it.
    window: int
    setting: RouteSetting = "auto"
    closed: str = "no prefix summarizer in this process"

    def __post_init__(self) -> None:
        self._prompt = self.estimator.estimate(SUMMARY_SYSTEM_PROMPT)

    def begin(
        self,
        call: ModelCall,
        boundary: int,
        job: SummaryJob,
        by_range: RangeAsk,
        evicted: int | None,
        opening: str = "",
    ) -> RoutedSummary:
        """One compaction's summary, routed: ask it with ``RoutedSummary.ask``.

        ``boundary`` is its cut in ``call``'s messages. The range route reads the summary
        prompt and ``evicted`` tokens (the copy's running estimates of the messages before
        the cut: no prompt rendered just to price it), or (``None``: a pre-summary's
        extension) ``job``'s request as built; the expected output is the job's budget.
        Priced from estimates of its parts, an extension's range came out low (the request's
        framing uncounted) or high (the head around the text counted) by more than the two
        routes differed (docs/benchmarks.md, "Shorter briefings").
        """
        room = job.budget or 0
        if evicted is None:
            request = build_summary_request(job, model=job.model, max_tokens=room)
            reads = self.estimator.estimate_request(request)
        else:
            reads = self._prompt + evicted
        choice = self._choose(call, boundary, room, reads)
        return RoutedSummary(self, choice, by_range, opening=opening)

    def _choose(self, call: ModelCall, boundary: int, room: int, reads: int) -> _Choice:
        """``reads``: the range route's input tokens."""
        output = min(room, DEFAULT_SUMMARY_MAX_TOKENS)
        by_range = expected_range_cost(reads, output, self.prices.summarizer)
        opened = self._open(call, boundary)
        if isinstance(opened, str):
            return _Choice("range", opened, None, by_range)
        sent, kept = opened
        instruction = self.estimator.estimate(prefix_instruction(kept, None))
        # The reply shares the window with the prefix: room for half the expected summary
        # (its budget) at least; a reply cut off at the window, or a request the API refuses
        # as too long with its max_tokens, falls back to the range route.
        if sent.tokens + instruction + output // 2 > self.window:
            return _Choice(
                "range", "the prefix and its summary would not fit the window", None, by_range
            )
        by_prefix = expected_prefix_cost(sent.tokens, instruction, output, self.prices.agent)
        name: RouteName = "prefix" if by_prefix < by_range else "range"
        reason = f"expected ${by_prefix:.6f} on the prefix, ${by_range:.6f} on the range"
        if self.setting == "prefix":
            name, reason = "prefix", "HANGO_SUMMARY_ROUTE=prefix"
        return _Choice(name, reason, by_prefix, by_range, sent, kept)

    def _open(self, call: ModelCall, boundary: int) -> str | tuple[SentRequest, int]:
        """Why the prefix route is closed, or the sent request and how many of its messages
        the cut keeps."""
        if self.setting == "range":
            return "HANGO_SUMMARY_ROUTE=range"
        if not self.caches:
            return "the provider does not cache prompts"
        sent = self.sent.last(call.session_id)
        if self.prefix is None or sent is None:
            return self.closed if self.prefix is None else "no request sent in this process"
        age = self.sent.clock() - sent.at
        if age > CACHE_TTL_SECONDS:
            return f"cold prefix: last sent {age:.0f} s ago (cache TTL 300 s)"
        kept = _kept_verbatim(call, sent.request, boundary)
        if kept is None:
            return "the evicted range is not inside the previous request"
        return prefix_problem(sent.request) or (sent, kept)


def _kept_verbatim(call: ModelCall, sent: Request, boundary: int) -> int | None:
    """How many of the previous request's messages the cut keeps, when the cut lies inside
    it or at its end and both start alike (no compaction in between); ``None`` otherwise."""
    messages = call.request.messages
    count = len(sent.messages)
    if not 0 < boundary <= count <= len(messages) or sent.messages[0].text() != messages[0].text():
        return None
    return count - boundary


@dataclass(eq=False)
class RoutedSummary:
    """One compaction's summary on its chosen route; every call it makes is priced."""

    router: SummaryRouter
    choice: _Choice
    by_range: RangeAsk
    # What the recorded reason opens with: a pre-summary's says it is one.
    opening: str = field(default="", kw_only=True)
    spent: float = field(default=0.0, init=False)
    failed: str | None = field(default=None, init=False)

    def ask(self, job: SummaryJob) -> SummaryResult:
        if self.choice.name == "prefix" and self.failed is None:
            result = self._on_prefix(job)
            if result.fallback_reason is None:
                return result
            self.failed = result.fallback_reason
            log.warning("session %s: prefix summary unusable (%s)", job.session_id, self.failed)
        result = self.by_range(job)
        self.spent += usage_cost(result.usage, self.router.prices.summarizer)
        return result

    def _on_prefix(self, job: SummaryJob) -> SummaryResult:
        sent, prefix = self.choice.sent, self.router.prefix
        assert sent is not None and prefix is not None  # a prefix choice has both
        instruction = prefix_instruction(self.choice.kept, job.asked_length())
        cap = job.reply_cap(DEFAULT_SUMMARY_MAX_TOKENS)
        result = prefix.summarize(job, prefix_request(sent.request, instruction, cap))
        self.spent += usage_cost(result.usage, self.router.prices.agent)
        return result

    def finish(self, result: SummaryResult) -> SummaryResult:
        """``result`` with the route taken, both estimates and what every call cost."""
        choice, failed = self.choice, self.failed
        route = SummaryRoute(
            name="prefix" if choice.name == "prefix" and not failed else "range",
            reason=self.opening
            + (choice.reason if failed is None else f"prefix fell back: {failed}"),
            expected_prefix_usd=choice.expected_prefix,
            expected_range_usd=choice.expected_range,
            cost_usd=self.spent,
        )
        return result.model_copy(update={"route": route})
