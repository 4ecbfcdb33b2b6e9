"""When to start a pre-summary: the session's own pace against the summarizer's latency.

A pre-summary must be ready when the request first goes over the trigger, and should
start as late as that allows: one started earlier covers fewer messages and leaves more
verbatim. Three figures decide it, all learned as the session goes:

- **growth per model call**: how many tokens one round (an answer and its tool results)
  adds to the request. Rounds mix small and very large ones (a 20-40 KB tool result is
  common), so the largest of the recent rounds stands for the next one, not the mean;
  over several calls, the largest growth seen over as many consecutive rounds.
- **time between calls**: a low quantile of the recent intervals (the trigger comes
  sooner when the calls are quick; a pause of the user's does not make it later).
- **the summarizer's latency**: measured per summarizer (a high quantile of its recent
  summaries), :data:`PRIOR_SUMMARY_SECONDS` before the first one.

From these :func:`start_now` says when a pre-summary starts, and :func:`outgrows` when a
ready one is extended. Pure: the caller supplies the clock's readings and keeps one
:class:`SessionPace` per session.
"""

from __future__ import annotations

import itertools
import math
import operator
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

# How many recent intervals and summaries each estimate looks at.
RECENT = 20
# How many recent rounds the growth estimate looks at. Longer: the largest rounds (a whole
# file read, a long build log) come every few dozen calls, and an estimate that forgot
# the last one is outgrown by the next (then the pre-summary no longer fits at the
# trigger and the turn waits for a summary after all).
GROWTH_RECENT = 60
INTERVAL_QUANTILE = 0.25
LATENCY_QUANTILE = 0.9
# Before a summarizer's first summary: about an LLM summary of tens of thousands of tokens.
PRIOR_SUMMARY_SECONDS = 10.0
# Latency estimates are stretched by this much: a summary slower than the recent ones
# should still be ready, and one call too early costs little coverage.
LATENCY_MARGIN = 1.5
# One round larger than the quantile brings the trigger a call sooner: start one call
# before the projection alone would.
SLACK_CALLS = 1
# A model call adds two messages: the answer and the tool results (or the next request).
MESSAGES_PER_CALL = 2


def quantile(values: Iterable[float], q: float) -> float | None:
    """The nearest-rank ``q`` quantile (0-1) of ``values``; ``None`` when there are none."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)] if ordered else None


@dataclass
class SessionPace:
    """What one session's calls say about its pace: growth per call and time between calls."""

    growth: deque[int] = field(default_factory=lambda: deque(maxlen=GROWTH_RECENT))
    intervals: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT))
    last_at: float | None = None
    last_sent: int | None = None

    def observe(self, now: float, tokens: int) -> None:
        """A model call is being prepared at ``now`` with a request of ``tokens``."""
        if self.last_sent is not None and tokens >= self.last_sent:
            # A smaller request was shrunk by something else (a truncation step): no round.
            self.growth.append(tokens - self.last_sent)
        if self.last_at is not None:
            self.intervals.append(max(0.0, now - self.last_at))
        self.last_at = now
        self.last_sent = tokens

    def sent(self, tokens: int) -> None:
        """The request actually sent had ``tokens`` (smaller after a compaction)."""
        self.last_sent = tokens

    def growth_per_call(self) -> int | None:
        """The largest of the recent rounds (see the module's docstring)."""
        return max(self.growth, default=None)

    def growth_over(self, calls: int) -> int | None:
        """The largest growth seen over ``calls`` consecutive rounds: two of the largest
        rounds seldom come in a row, so ``calls`` times the largest overstates it. Past
        the rounds remembered, that product is all there is to go by."""
        rounds = self.growth
        if not rounds:
            return None
        if calls > len(rounds):
            return calls * max(rounds)
        return _most_over(list(itertools.accumulate(rounds, initial=0)), calls)

    def calls_until(self, tokens: int, trigger: int) -> int | None:
        """The fewest calls after this one in which the request could be over ``trigger``,
        had the next rounds grown as much as any as many consecutive ones seen; ``None``
        without growth (no projection to act on)."""
        growth = self.growth_per_call()
        if tokens > trigger or not growth:
            return calls_to_trigger(tokens, trigger, growth or 0)

        # The shortest run of consecutive rounds that grew more than the room left, in one
        # pass (asked on every call in the band): no round is negative, so the totals never
        # fall and the latest start of a crossing run only moves on with its end. The room
        # is not negative (over the trigger returned above): ``start`` stays below ``end``.
        room = trigger - tokens
        totals = list(itertools.accumulate(self.growth, initial=0))
        fewest, start = None, 0
        for end in range(1, len(totals)):
            below = totals[end] - room  # the run from s to end crosses iff totals[s] < below
            while totals[start + 1] < below:
                start += 1
            if totals[start] < below and (fewest is None or end - start < fewest):
                fewest = end - start
        return calls_to_trigger(tokens, trigger, growth) if fewest is None else fewest

    def seconds_per_call(self) -> float | None:
        return quantile(self.intervals, INTERVAL_QUANTILE)


def _most_over(totals: list[int], calls: int) -> int:
    """The largest sum of ``calls`` consecutive rounds (at most as many as there are), from
    the rounds' running totals: each window's sum is a difference of two of them."""
    return int(max(map(operator.sub, totals[calls:], totals)))


@dataclass
class SummaryLatencies:
    """The measured latency of each summarizer, by name (thread-safe enough: appends only)."""

    recent: dict[str, deque[float]] = field(default_factory=dict)

    def record(self, summarizer: str, seconds: float) -> None:
        self.recent.setdefault(summarizer, deque(maxlen=RECENT)).append(max(0.0, seconds))

    def expected(self, summarizer: str) -> float:
        found = quantile(tuple(self.recent.get(summarizer, ())), LATENCY_QUANTILE)
        return PRIOR_SUMMARY_SECONDS if found is None else found


def calls_to_trigger(tokens: int, trigger: int, growth: int) -> int | None:
    """How many calls after this one the request could first be over ``trigger`` (``None``
    without growth: there is no projection to act on)."""
    if tokens > trigger:
        return 0
    if growth <= 0:
        return None
    return max(1, math.ceil((trigger + 1 - tokens) / growth))


def latency_in_calls(latency: float, interval: float) -> float:
    """How many calls a summary takes: ``inf`` when calls take no time and summaries do."""
    if latency <= 0:
        return 0.0
    return math.inf if interval <= 0 else latency * LATENCY_MARGIN / interval


def start_now(pace: SessionPace, tokens: int, trigger: int, latency: float) -> bool:
    """Whether a pre-summary must start at this call to be ready by the trigger.

    The trigger can come ``k`` calls from now (:meth:`SessionPace.calls_until`); a summary
    started at the next call instead would be ready one call plus its latency (in calls)
    from now. If that is later than the trigger (less the slack), waiting a call would
    make the turn wait: start now. A summary that takes no time starts
    :data:`SLACK_CALLS` + 1 calls before the trigger.
    """
    interval = pace.seconds_per_call()
    if pace.growth_per_call() is None or interval is None:
        return False
    calls = pace.calls_until(tokens, trigger)
    return calls is not None and calls - 1 - SLACK_CALLS <= latency_in_calls(latency, interval)


def messages_ahead(pace: SessionPace, tokens: int, trigger: int) -> int:
    """How many messages will surely be appended before the trigger (a lower bound).

    A pre-summary may cover what a compaction at the trigger will evict, no more: the
    trigger keeps a share of the messages it will have then. The fewest calls the largest
    recent round allows, less the slack, so the trigger never finds the pre-summary
    covering messages it must keep.
    """
    calls = calls_to_trigger(tokens, trigger, pace.growth_per_call() or 0)
    return max(0, (calls or 0) - SLACK_CALLS) * MESSAGES_PER_CALL


def horizon(pace: SessionPace, latency: float) -> float:
    """How many calls ahead a ready pre-summary must fit without being extended now.

    An extension started at the next call is ready ``latency`` later; a trigger at any
    call before that finds only what is ready now. At least the next call (the trigger
    call itself starts nothing); ``inf`` before the pace is known.
    """
    interval = pace.seconds_per_call()
    calls = math.inf if interval is None else latency_in_calls(latency, interval)
    return calls if math.isinf(calls) else max(1, math.ceil(calls))


def outgrows(
    kept_tokens: int,
    tokens: int,
    trigger: int,
    target: int,
    growth: int,
    within: float = math.inf,
) -> bool:
    """Whether what a ready pre-summary keeps could be over ``target`` at a trigger that
    comes before an extension started at the next call would be ready.

    ``within``: the most the request may grow before then (see :func:`horizon`). If that
    does not reach the trigger, a later call extends it in time. Else at the trigger the
    request has grown from ``tokens`` to as much as ``trigger + growth`` (the round that
    crosses it), and by no more than ``within``; everything it gained is kept beside the
    pre-summary's part.
    """
    if tokens + within <= trigger:
        return False
    gained = max(0, trigger - tokens) + max(0, growth)
    return kept_tokens + min(gained, within) > target
