"""The pre-summary start rule: the session's pace against the summarizer's latency."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hango.compaction.pace import (
    GROWTH_RECENT,
    MESSAGES_PER_CALL,
    PRIOR_SUMMARY_SECONDS,
    SLACK_CALLS,
    SessionPace,
    SummaryLatencies,
    calls_to_trigger,
    horizon,
    messages_ahead,
    outgrows,
    quantile,
    start_now,
)
from tests.properties import examples


def paced(rounds: list[int], seconds: float, start: int = 1000) -> SessionPace:
    """A session whose calls grew by ``rounds``, ``seconds`` apart."""
    pace = SessionPace()
    tokens, now = start, 0.0
    pace.observe(now, tokens)
    for grown in rounds:
        tokens, now = tokens + grown, now + seconds
        pace.observe(now, tokens)
    return pace


def test_quantile_is_nearest_rank_and_none_when_empty() -> None:
    assert quantile([], 0.9) is None
    assert quantile([5, 1, 3, 2, 4], 0.5) == 3
    assert quantile(range(1, 21), 0.9) == 18


def test_growth_is_the_largest_recent_round_until_it_leaves_the_window() -> None:
    assert paced([100] * 19 + [5000], seconds=1.0).growth_per_call() == 5000
    old = [5000] + [100] * GROWTH_RECENT
    assert paced(old, seconds=1.0).growth_per_call() == 100  # GROWTH_RECENT + 1 rounds ago


def test_the_largest_round_is_remembered_longer_than_the_other_figures() -> None:
    # A session's largest rounds (a whole file, a build log) come every few dozen calls:
    # forgotten after 20, the estimate is outgrown by the next one at the trigger.
    pace = paced([5000] + [100] * 39, seconds=1.0)
    assert pace.growth_per_call() == 5000
    assert len(pace.intervals) == 20


def test_a_compaction_is_not_a_round_and_a_shrunk_request_adds_no_growth() -> None:
    pace = paced([500, 500], seconds=1.0)
    pace.sent(300)  # compacted: the next round grows from what was sent
    pace.observe(3.0, 800)
    pace.observe(4.0, 700)  # smaller: a truncation step, not a round
    assert list(pace.growth) == [500, 500, 500]


def test_latency_is_measured_per_summarizer_with_a_prior() -> None:
    latencies = SummaryLatencies()
    assert latencies.expected("a") == PRIOR_SUMMARY_SECONDS
    latencies.record("a", 2.0)
    latencies.record("b", 9.0)
    assert latencies.expected("a") == 2.0
    assert latencies.expected("b") == 9.0


def test_calls_to_trigger() -> None:
    assert calls_to_trigger(1000, 2000, 0) is None
    assert calls_to_trigger(1000, 2000, 500) == 3  # 1500, 2000, 2500 > 2000
    assert calls_to_trigger(2500, 2000, 500) == 0


@pytest.mark.parametrize(
    ("latency", "tokens", "expected"),
    [
        # 1 s calls, 1000 tokens each, trigger at 10,000: the trigger can come 10 calls
        # from 1000 tokens; a 2 s summary (3 s with the margin) need not start yet...
        (2.0, 1000, False),
        # ...but must start when a call later would be too late: from 6000 the trigger
        # can come in 5 calls; started at the next call, ready 1 + 3 s from now (with
        # the one call of slack, that is too late).
        (2.0, 6000, True),
        (2.0, 5000, False),
        # A slow summarizer starts earlier.
        (8.0, 1000, True),
    ],
)
def test_start_now_only_when_a_call_later_would_be_late(
    latency: float, tokens: int, expected: bool
) -> None:
    pace = paced([1000] * 5, seconds=1.0)
    assert start_now(pace, tokens, 10_000, latency) is expected


def test_no_projection_without_growth_or_time() -> None:
    assert start_now(SessionPace(), 9000, 10_000, 5.0) is False
    assert start_now(paced([0, 0], seconds=1.0), 9000, 10_000, 5.0) is False


def test_messages_ahead_is_a_lower_bound_less_the_slack() -> None:
    pace = paced([1000] * 5, seconds=1.0)
    calls = calls_to_trigger(6000, 10_000, 1000)
    assert calls == 5
    assert messages_ahead(pace, 6000, 10_000) == (calls - SLACK_CALLS) * MESSAGES_PER_CALL
    assert messages_ahead(SessionPace(), 6000, 10_000) == 0


def test_outgrows_counts_the_growth_to_the_trigger_and_the_crossing_round() -> None:
    assert not outgrows(3000, 8000, 10_000, 6000, 1000)  # 3000 + 2000 + 1000
    assert outgrows(3001, 8000, 10_000, 6000, 1000)


def test_outgrows_only_by_what_can_grow_before_a_later_extension_is_ready() -> None:
    # The trigger is 3 calls of 1000 away at most: grown 3000, all of it counts...
    assert not outgrows(3000, 8000, 10_000, 6000, 1000, within=3000)  # 3000 + 3000
    assert outgrows(3001, 8000, 10_000, 6000, 1000, within=3000)
    # ...a trigger within reach before a later extension is ready: only that growth.
    assert not outgrows(3500, 8000, 10_000, 6000, 1000, within=2500)  # 3500 + 2500
    assert outgrows(3501, 8000, 10_000, 6000, 1000, within=2500)
    # Out of reach until then: a later call extends it in time, however it fits now.
    assert not outgrows(9000, 8000, 10_000, 6000, 1000, within=2000)


def test_growth_over_consecutive_rounds_is_the_largest_window_seen() -> None:
    pace = paced([100, 5000, 100, 100, 4000, 100], seconds=1.0)
    assert pace.growth_over(1) == 5000
    assert pace.growth_over(2) == 5100  # never two large ones in a row
    assert pace.growth_over(3) == 5200
    assert pace.growth_over(7) == 7 * 5000  # more calls than rounds seen: the largest each
    assert SessionPace().growth_over(2) is None


def test_the_trigger_is_as_near_as_consecutive_rounds_have_grown() -> None:
    # Large rounds one in three: from 4000, 2 x 5000 would reach 10,000 in 2 calls, but
    # no three consecutive rounds grew more than 5200: 4 calls (5000 + 100 + 100 + 5000).
    pace = paced([100, 100, 5000] * 4, seconds=1.0)
    assert calls_to_trigger(4000, 10_000, 5000) == 2
    assert pace.calls_until(4000, 10_000) == 4
    assert pace.calls_until(10_001, 10_000) == 0
    assert SessionPace().calls_until(4000, 10_000) is None
    # So a 1 s summary (1.5 calls with the margin) on 1 s calls need not start yet; from
    # 5000 two calls (5100) can reach it: start.
    assert not start_now(pace, 4000, 10_000, 1.0)
    assert start_now(pace, 5000, 10_000, 1.0)


@pytest.mark.parametrize(
    ("latency", "expected"),
    [
        # 2 s calls: a summary that takes no time is ready at the next call, but the
        # trigger call itself starts nothing: a ready one must hold for one call.
        (0.0, 1),
        (1.0, 1),  # 1.5 s with the margin: ready by the call after the next
        (2.0, 2),  # 3 s: two calls
        (6.0, 5),  # 9 s: five calls
    ],
)
def test_horizon_is_the_calls_until_a_later_extension_is_ready(
    latency: float, expected: int
) -> None:
    assert horizon(paced([1000] * 3, seconds=2.0), latency) == expected


def test_horizon_is_unbounded_before_the_pace_is_known_or_when_calls_take_no_time() -> None:
    assert horizon(SessionPace(), 1.0) == float("inf")
    assert horizon(paced([1000] * 3, seconds=0.0), 1.0) == float("inf")
    assert horizon(paced([1000] * 3, seconds=0.0), 0.0) == 1


@settings(deadline=None, max_examples=examples(300))
@given(
    st.lists(st.integers(0, 5_000), min_size=1, max_size=GROWTH_RECENT),
    st.integers(0, 60_000),
    st.integers(1, 60_000),
)
def test_the_fewest_calls_to_the_trigger_are_those_of_trying_every_count(
    rounds: list[int], tokens: int, trigger: int
) -> None:
    pace = SessionPace()
    pace.growth.extend(rounds)
    growth = pace.growth_per_call()
    expected: int | None
    if tokens > trigger or not growth:
        expected = calls_to_trigger(tokens, trigger, growth or 0)
    else:
        tried = (
            k for k in range(1, len(rounds) + 1) if tokens + (pace.growth_over(k) or 0) > trigger
        )
        expected = next(tried, calls_to_trigger(tokens, trigger, growth))
    assert pace.calls_until(tokens, trigger) == expected
