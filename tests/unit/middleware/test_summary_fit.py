"""A summary is checked against its room before it is installed (issue 26, item 4)."""

from __future__ import annotations

import re
from pathlib import Path

from hango.compaction.jobs import SummaryJob, SummaryResult
from hango.compaction.summary_fit import fit_summary
from hango.compaction.validate import validate_request
from hango.core.messages import Message, Request, Response, StoredMessage, Usage
from hango.providers.scripted import ScriptedProvider, text_reply
from hango.tokens.heuristic import HeuristicEstimator
from tests.agent_support import build

ESTIMATE = HeuristicEstimator()
WINDOW = 20_000
HUGE = "<summary>" + "An enormous briefing line about the work so far. " * 3_000 + "</summary>"
SHORT = "<summary>A short briefing: the user asked for facts; all were noted, key-0001.</summary>"
FACT = "Remember fact {i}: token key-{i:04d}. " + "detail " * 600


def _compact_once(tmp_path: Path, summary: ScriptedProvider) -> tuple[object, ScriptedProvider]:
    agent, provider = build(tmp_path, window=WINDOW)
    agent.summarizer.provider = summary  # type: ignore[attr-defined]
    for i in range(30):
        provider.push(text_reply(f"ok {i}"))
        result = agent.loop.run_turn("s", FACT.format(i=i))
        if result.compactions:
            return result, provider
    raise AssertionError("no compaction in 30 turns")


def test_a_summary_larger_than_the_window_is_never_installed(tmp_path: Path) -> None:
    result, provider = _compact_once(
        tmp_path, ScriptedProvider(fallback=lambda r: text_reply(HUGE))
    )
    (record,) = result.compactions  # type: ignore[attr-defined]
    assert record.summarizer == "extractive"
    assert "over the" in (record.fallback_reason or "")
    assert ESTIMATE.estimate(record.summary or "") < WINDOW // 2
    for request in provider.requests:
        assert validate_request(request) == [] and ESTIMATE.estimate_request(request) <= WINDOW


def test_a_summary_over_its_room_is_asked_again_shorter(tmp_path: Path) -> None:
    asked: set[str] = set()

    def huge_first(request: Request) -> Response:
        """The first reply for a range ignores the budget its request asked for; asked
        again for that range, the reply keeps to it."""
        found = re.search(r"messages \d+ to \d+", request.messages[0].text())
        span = found.group(0) if found else ""
        again = span in asked
        asked.add(span)
        return text_reply(SHORT if again else HUGE)

    summaries = ScriptedProvider(fallback=huge_first)
    result, _ = _compact_once(tmp_path, summaries)
    (record,) = result.compactions  # type: ignore[attr-defined]
    assert record.summarizer == "llm" and "key-0001" in (record.summary or "")
    assert "installed a shorter one" in (record.fallback_reason or "")
    capped = summaries.requests[-1]
    assert capped.max_tokens < 8_192
    assert f"under {capped.max_tokens} tokens" in capped.messages[0].text()


def _job() -> SummaryJob:
    evicted = tuple(
        StoredMessage(seq=i + 1, turn=1, message=Message(role=role, content="x " * 4_000))
        for i, role in enumerate(("user", "assistant"))
    )
    return SummaryJob(
        session_id="s",
        turn=2,
        from_seq=1,
        to_seq=2,
        previous_summary=None,
        evicted=evicted,
        model="m",
    )


def test_a_briefing_too_large_even_for_the_window_is_cut_with_a_note() -> None:
    huge = SummaryResult(text=HUGE, summarizer="llm")
    fitted = fit_summary(_job(), room=100, hard_room=200, estimator=ESTIMATE, ask=lambda job: huge)
    assert ESTIMATE.estimate(fitted.text) <= 200
    assert fitted.text.endswith("the full history is in the file]")
    assert "cut to 200 tokens" in (fitted.fallback_reason or "")


def test_a_summary_that_fits_is_returned_as_it_came() -> None:
    fine = SummaryResult(text="A short briefing.", summarizer="llm")
    fitted = fit_summary(_job(), room=100, hard_room=200, estimator=ESTIMATE, ask=lambda job: fine)
    assert fitted is fine


def test_the_installed_summary_accounts_for_every_summarizer_call_made_for_it() -> None:
    # The first summary was too large and so was the shorter one asked for: the extractive
    # briefing is installed, but both model calls were paid for.
    first = SummaryResult(
        text=HUGE, summarizer="llm", usage=Usage(input_tokens=900, output_tokens=80)
    )
    again = SummaryResult(
        text=HUGE, summarizer="llm", usage=Usage(input_tokens=950, output_tokens=60)
    )
    answers = iter((first, again))
    fitted = fit_summary(
        _job(), room=100, hard_room=20_000, estimator=ESTIMATE, ask=lambda job: next(answers)
    )
    assert fitted.summarizer == "extractive"
    assert fitted.usage == Usage(input_tokens=1850, output_tokens=140)
