"""The summarization middleware's pace keeping: when to start a pre-summary, and waits.

:class:`Pacer` holds each session's :class:`~hango.compaction.pace.SessionPace` and each
summarizer's latencies, and reads a clock: ``time.monotonic``, or in ``hango replay`` the
transcript's recorded times with a simulated summarizer latency (nothing sleeps).

The start rule (``due``): never below the floor (``HANGO_CONTEXT_PRESUMMARIZE_FRAC`` of
the window); past it, when the session's pace says a summary started one call later could
be late for the trigger (:func:`~hango.compaction.pace.start_now`). With the pace off
(``HANGO_CONTEXT_PRESUMMARIZE_PACE=false``) the floor is the fixed start, as before.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from hango.compaction.jobs import Summarizer, SummaryJob, SummaryResult
from hango.compaction.pace import (
    SessionPace,
    SummaryLatencies,
    horizon,
    messages_ahead,
    start_now,
)
from hango.core.identity import RecentlyUsed

Clock = Callable[[], float]


@dataclass(kw_only=True, eq=False)
class Pacer:
    # The floor (adaptive) or the fixed start; ``None``: no pre-summaries.
    watermark: int | None
    adaptive: bool = True
    clock: Clock = time.monotonic
    # A simulated summarizer latency on ``clock`` (replay); ``None``: measured.
    summary_seconds: float | None = None

    def __post_init__(self) -> None:
        self.latencies = SummaryLatencies()
        self._paces: RecentlyUsed[SessionPace] = RecentlyUsed()

    def observe(self, session_id: str, tokens: int) -> None:
        self._paces.get(session_id, SessionPace).observe(self.clock(), tokens)

    def sent(self, session_id: str, tokens: int) -> None:
        self._paces.get(session_id, SessionPace).sent(tokens)

    def growth(self, session_id: str) -> int:
        return self._paces.get(session_id, SessionPace).growth_per_call() or 0

    def messages_ahead(self, session_id: str, tokens: int, trigger: int) -> int:
        """Messages surely appended before the trigger (see ``pace.messages_ahead``)."""
        if not self.adaptive:
            return 0
        return messages_ahead(self._paces.get(session_id, SessionPace), tokens, trigger)

    def due(self, session_id: str, tokens: int, trigger: int, summarizer: str) -> bool:
        """Whether a pre-summary should be running for this call's request."""
        if self.watermark is None or tokens <= self.watermark:
            return False
        if not self.adaptive:
            return True
        pace = self._paces.get(session_id, SessionPace)
        return start_now(pace, tokens, trigger, self.expected_latency(summarizer))

    def growth_within_horizon(self, session_id: str, summarizer: str) -> float:
        """The most the request may grow before an extension started at the next call is
        ready (``pace.horizon`` calls, the largest growth seen over as many consecutive
        rounds); with the pace off, unbounded (every call that could outgrow it extends it)."""
        pace = self._paces.get(session_id, SessionPace)
        if not self.adaptive:
            return math.inf
        calls = horizon(pace, self.expected_latency(summarizer))
        grown = None if math.isinf(calls) else pace.growth_over(int(calls))
        return math.inf if grown is None else grown

    def expected_latency(self, summarizer: str) -> float:
        """What a summary by ``summarizer`` is expected to take: on a simulated clock its
        latency, known before the first summary is (its thread records it when done, and
        a run's decisions must not depend on which thread gets there first)."""
        if self.summary_seconds is not None:
            return self.summary_seconds
        return self.latencies.expected(summarizer)

    def took(self, model: str, seconds: float) -> None:
        """A summary by ``model`` took ``seconds`` (on a simulated clock: its latency)."""
        simulated = self.summary_seconds
        self.latencies.record(model, seconds if simulated is None else simulated)

    def ready_at(self, started: float) -> float:
        """On the clock: when a summary started at ``started`` and finished just now was ready."""
        return self.clock() if self.summary_seconds is None else started + self.summary_seconds

    def is_ready(self, started: float, work: Future[Any]) -> bool:
        """Whether a summary started at ``started`` is ready now: on a simulated clock when
        its latency has passed (the real work is then awaited, however long it takes on
        this machine), so the same run makes the same decisions; else when it is done."""
        if self.summary_seconds is None:
            return work.done()
        return self.clock() >= started + self.summary_seconds

    def waited(self, seconds: float, ready_at: float | None = None, before: float = 0.0) -> float:
        """What the turn waited at the trigger: ``seconds`` of real waiting, or on a
        simulated clock the rest of the summary's latency (all of it, after ``before``
        spent on a pre-summary that was not used, when the summary is made now)."""
        if self.summary_seconds is None:
            return seconds
        if ready_at is None:
            return before + self.summary_seconds
        return max(0.0, ready_at - self.clock())


@dataclass(frozen=True)
class Timed:
    """``inner``, its latency recorded under the job's model on every summary."""

    inner: Summarizer
    pacer: Pacer

    def summarize(self, job: SummaryJob) -> SummaryResult:
        began = time.monotonic()
        result = self.inner.summarize(job)
        self.pacer.took(job.model, time.monotonic() - began)
        return result
