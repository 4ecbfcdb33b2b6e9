"""The middleware's pace keeping: the floor and the fixed start, readiness and waits on a
simulated clock, latencies measured per summarizer."""

from __future__ import annotations

from concurrent.futures import Future

from hango.compaction.jobs import SummaryJob, SummaryResult
from hango.compaction.pace import PRIOR_SUMMARY_SECONDS
from hango.middleware.pacing import Pacer, Timed


class SteppedClock:
    """A simulated clock: it moves only when told."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def grown(pacer: Pacer, clock: SteppedClock, rounds: list[int], seconds: float) -> int:
    tokens = 1000
    pacer.observe("s", tokens)
    for size in rounds:
        clock.advance(seconds)
        tokens += size
        pacer.observe("s", tokens)
    return tokens


def test_nothing_below_the_floor_and_the_fixed_start_past_it() -> None:
    clock = SteppedClock()
    fixed = Pacer(watermark=5000, adaptive=False, clock=clock)
    assert not fixed.due("s", 5000, 8500, "m")
    assert fixed.due("s", 5001, 8500, "m")  # no pace needed: the floor is the start
    assert fixed.messages_ahead("s", 5001, 8500) == 0
    assert not Pacer(watermark=None, clock=clock).due("s", 8000, 8500, "m")


def test_past_the_floor_the_pace_decides() -> None:
    clock = SteppedClock()
    pacer = Pacer(watermark=2000, clock=clock, summary_seconds=2.0)
    pacer.latencies.record("m", 2.0)
    tokens = grown(pacer, clock, [500] * 6, seconds=1.0)  # 4000 tokens, 500 a call, 1 s apart
    assert not pacer.due("s", tokens, 10_000, "m")  # 13 calls away: far too early
    assert pacer.due("s", 8_000, 10_000, "m")  # 5 calls away, 3 s summaries: start now
    assert pacer.messages_ahead("s", 8_000, 10_000) == (5 - 1) * 2


def test_readiness_and_waits_on_a_simulated_clock() -> None:
    clock = SteppedClock()
    pacer = Pacer(watermark=0, clock=clock, summary_seconds=3.0)
    never_done: Future[object] = Future()
    assert not pacer.is_ready(0.0, never_done)
    clock.advance(3.0)
    assert pacer.is_ready(0.0, never_done)  # the clock says so, whatever this machine did
    assert pacer.ready_at(1.0) == 4.0
    assert pacer.waited(0.5, ready_at=4.0) == 1.0  # the rest of its latency, not real time
    assert pacer.waited(0.5, ready_at=2.0) == 0.0
    assert pacer.waited(0.5, before=1.0) == 4.0  # made at the trigger: all of it


def test_on_the_real_clock_readiness_is_the_work_and_waits_are_real() -> None:
    pacer = Pacer(watermark=0)
    work: Future[object] = Future()
    assert not pacer.is_ready(0.0, work)
    work.set_result(None)
    assert pacer.is_ready(0.0, work)
    assert pacer.waited(0.25, ready_at=1e9) == 0.25


class Echo:
    def summarize(self, job: SummaryJob) -> SummaryResult:
        return SummaryResult(text=job.model, summarizer="echo")


def test_latency_is_recorded_per_summarizer_model() -> None:
    pacer = Pacer(watermark=0, clock=SteppedClock(), summary_seconds=7.0)
    timed = Timed(Echo(), pacer)
    job = SummaryJob(
        session_id="s", turn=1, from_seq=1, to_seq=1, previous_summary=None, evicted=(),
        model="small",
    )  # fmt: skip
    assert timed.summarize(job).text == "small"
    assert pacer.latencies.expected("small") == 7.0
    assert pacer.latencies.expected("other") == PRIOR_SUMMARY_SECONDS


def test_on_a_simulated_clock_the_expected_latency_is_known_before_any_summary() -> None:
    # Recorded by the summary's thread when it is done: a decision taken before that
    # must not depend on which thread got there first.
    pacer = Pacer(watermark=0, clock=SteppedClock(), summary_seconds=3.0)
    assert pacer.expected_latency("m") == 3.0
    assert Pacer(watermark=0).expected_latency("m") == PRIOR_SUMMARY_SECONDS


def test_growth_within_the_horizon_is_what_consecutive_rounds_grew() -> None:
    clock = SteppedClock()
    pacer = Pacer(watermark=0, clock=clock, summary_seconds=2.0)
    grown(pacer, clock, [100, 3000, 100, 100], seconds=1.0)
    # 2 s summaries on 1 s calls: 3 s with the margin, 3 calls; at most 3200 in 3 rounds.
    assert pacer.growth_within_horizon("s", "m") == 3200
    fixed = Pacer(watermark=0, adaptive=False, clock=clock, summary_seconds=2.0)
    assert fixed.growth_within_horizon("s", "m") == float("inf")
