"""One summarizer deadline, wall-clock, retries included (issue 26, item 3).

``HANGO_SUMMARIZER_TIMEOUT`` bounds the whole summary a turn waits for: in-process (the
provider's own timeout and retries no longer add up behind it) and through the queue
(the wait for the worker and the fallback after it share the one deadline).
"""

from __future__ import annotations

import time
from pathlib import Path

from hango.compaction.jobs import SummaryJob, SummaryResult
from hango.core.messages import Message, Request, Response, StoredMessage
from hango.providers.scripted import ScriptedProvider, text_reply
from hango.queue.queued import QueuedSummarizer
from hango.queue.waiting import WaitPolicy
from hango.summarizers.llm import LLMSummarizer
from tests.agent_support import build
from tests.unit.queue.test_queue import FakeClock, FakeJobs, RecordingDispatcher

TIMEOUT = 0.5
SLACK = 1.0  # the bound: a turn is held at most the timeout + 1 s
SUMMARY = "<summary>A briefing long enough to count as a summary for a fresh agent.</summary>"


def _hanging(seconds: float = 5.0) -> ScriptedProvider:
    def slow(request: Request) -> Response:
        time.sleep(seconds)
        return text_reply(SUMMARY)

    return ScriptedProvider(fallback=slow)


def _job() -> SummaryJob:
    evicted = tuple(
        StoredMessage(seq=i + 1, turn=1, message=Message(role=role, content=f"message {i}"))
        for i, role in enumerate(("user", "assistant"))
    )
    return SummaryJob(
        session_id="s1",
        turn=2,
        from_seq=1,
        to_seq=2,
        previous_summary=None,
        evicted=evicted,
        model="m",
    )


def _timed(call: object) -> tuple[SummaryResult, float]:
    started = time.monotonic()
    result = call()  # type: ignore[operator]
    return result, time.monotonic() - started


def test_a_hanging_provider_falls_back_at_the_deadline() -> None:
    summarizer = LLMSummarizer(_hanging(), timeout=TIMEOUT)
    result, took = _timed(lambda: summarizer.summarize(_job()))
    assert took <= TIMEOUT + SLACK
    assert result.summarizer == "extractive"
    assert "HANGO_SUMMARIZER_TIMEOUT" in (result.fallback_reason or "")


def test_the_second_attempt_shares_the_deadline_of_the_first() -> None:
    """A reply cut off at max_tokens is asked again: both calls within one deadline."""

    def cut_off_slowly(request: Request) -> Response:
        time.sleep(0.35)
        return text_reply(SUMMARY, stop_reason="max_tokens")

    summarizer = LLMSummarizer(ScriptedProvider(fallback=cut_off_slowly), timeout=TIMEOUT)
    result, took = _timed(lambda: summarizer.summarize(_job()))
    assert took <= TIMEOUT + SLACK
    assert "HANGO_SUMMARIZER_TIMEOUT" in (result.fallback_reason or "")


def test_a_fast_summary_is_unaffected_by_the_deadline() -> None:
    summarizer = LLMSummarizer(ScriptedProvider(fallback=lambda r: text_reply(SUMMARY)), timeout=5)
    assert summarizer.summarize(_job()).summarizer == "llm"


def test_through_the_queue_the_wait_and_the_fallback_share_the_deadline() -> None:
    """No worker answers (queue deadline 30 s) and the inline fallback hangs too."""
    queued = QueuedSummarizer(
        cache=FakeJobs(FakeClock(), real_time=True),
        dispatcher=RecordingDispatcher(),
        policy=WaitPolicy(deadline=30.0, enqueue_ttl=10.0, recheck=0.05),
        fallback=LLMSummarizer(_hanging(), timeout=TIMEOUT),
        timeout=TIMEOUT,
    )
    result, took = _timed(lambda: queued.summarize(_job()))
    assert took <= TIMEOUT + SLACK
    assert result.summarizer == "extractive"
    assert (result.fallback_reason or "").startswith("queue_deadline: ")


def test_an_agent_turn_waits_for_a_hanging_summarizer_at_most_the_timeout(
    tmp_path: Path,
) -> None:
    agent, provider = build(tmp_path, summarizer_timeout=TIMEOUT)
    agent.summarizer.provider = _hanging()  # type: ignore[attr-defined]
    fact = "Remember fact {i}: " + "detail " * 150
    longest = 0.0
    for i in range(14):
        provider.push(text_reply(f"ok {i}"))
        started = time.monotonic()
        result = agent.loop.run_turn("s", fact.format(i=i))
        longest = max(longest, time.monotonic() - started)
        if result.compactions:
            break
    assert result.compactions and result.compactions[0].summarizer == "extractive"
    assert longest <= TIMEOUT + SLACK
