"""Pre-summarization: the summary a compaction at the trigger needs, dispatched earlier.

Through the real loop on the embedded SQLite store, with the in-process ports (the
offload writes the real history file; the summarizer records the ranges it was asked for).
"""

from __future__ import annotations

import dataclasses
import itertools
import re
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from hango.compaction.jobs import OffloadJob, SummaryJob, SummaryResult
from hango.compaction.route import expected_range_cost
from hango.compaction.summary_prompt import build_summary_request
from hango.middleware import presummary
from hango.middleware.observer import NullObserver
from hango.middleware.summarization import SummarizationMiddleware
from hango.providers.scripted import text_reply
from hango.summarizers.llm import DEFAULT_SUMMARY_MAX_TOKENS
from hango.summarizers.offload import InlineOffloader
from tests.agent_support import build

FACT = "Remember fact {i}: token key-{i:04d}. " + "detail " * 150


class Ports:
    """Offload for real; summarize by naming the range and the turn that asked."""

    def __init__(self, offloader: Any) -> None:
        self.offloader = offloader
        self.jobs: list[SummaryJob] = []
        self.offloads: list[tuple[int, int]] = []
        self._lock = threading.Lock()

    def offload(self, job: OffloadJob) -> str:
        with self._lock:
            self.offloads.append((job.from_seq, job.to_seq))
        return str(self.offloader.offload(job))

    def summarize(self, job: SummaryJob) -> SummaryResult:
        with self._lock:
            self.jobs.append(job)
        text = f"summary of {job.from_seq}-{job.to_seq} asked in turn {job.turn}"
        return SummaryResult(text=text, summarizer="test")


class Waits(NullObserver):
    def __init__(self) -> None:
        self.waits: list[bool] = []

    def summary_waited(
        self, session_id: str, turn: int, seconds: float, *, presummarized: bool = False
    ) -> None:
        self.waits.append(presummarized)


def agent_with_ports(tmp_path: Path, **settings: Any) -> tuple[Any, Any, Ports, Waits]:
    waits = Waits()
    agent, provider = build(tmp_path, observers=[waits], **settings)
    found = next(m for m in agent.loop.chain if isinstance(m, SummarizationMiddleware))
    ports = Ports(InlineOffloader(agent.history))
    found.offloader = ports
    found.summarizer = ports
    return agent, provider, ports, waits


def until_compacted(agent: Any, provider: Any, session: str = "s", limit: int = 40) -> Any:
    for i in range(limit):
        provider.push(text_reply(f"ok {i}"))
        result = agent.loop.run_turn(session, FACT.format(i=i))
        if result.compactions:
            return result
    raise AssertionError(f"no compaction in {limit} turns")


def text_of(job: SummaryJob) -> str:
    return f"summary of {job.from_seq}-{job.to_seq} asked in turn {job.turn}"


def history_seqs(agent: Any, session: str = "s") -> list[int]:
    text = agent.history.read(f"/conversation_history/{session}.md")
    return [int(seq) for seq in re.findall(r"^### Message (\d+) ", text, re.MULTILINE)]


def test_pre_summaries_dispatched_ahead_are_installed_at_the_trigger(tmp_path: Path) -> None:
    agent, provider, ports, waits = agent_with_ports(tmp_path)

    result = until_compacted(agent, provider)

    record = result.compactions[0]
    assert ports.jobs, "nothing was dispatched ahead"
    assert all(job.turn < record.at_turn for job in ports.jobs), "the trigger summarized"
    last = ports.jobs[-1]
    assert record.summary == text_of(last)
    assert record.kept_from_seq == last.to_seq + 1  # what came since is kept verbatim
    # A later one extends the one before: only the messages past it, on top of its text.
    for before, after in itertools.pairwise(ports.jobs):
        assert after.from_seq == before.to_seq + 1
        assert after.previous_summary == text_of(before)
    # Offloaded once, when evicted, under the turn that evicted it: nothing of the
    # pre-summaries it extended reached the history file.
    assert ports.offloads == [(1, last.to_seq)]
    assert history_seqs(agent) == list(range(1, last.to_seq + 1))
    assert waits.waits == [True]
    found = next(m for m in agent.loop.chain if isinstance(m, SummarizationMiddleware))
    assert record.tokens_after <= found.profile.target_tokens  # it fit, or it was not used
    state = agent.store.latest_state("s")
    assert state.presummary is None  # installed: nothing pending any more
    sent = provider.requests[-1].messages
    assert record.summary in str(sent[0].content)
    assert "key-0000" not in str(sent[1:])  # the summarized facts left the request


def test_a_ready_pre_summary_is_installed_while_the_one_extending_it_is_in_flight(
    tmp_path: Path,
) -> None:
    # A roomy target: the first pre-summary still fits when the trigger comes.
    agent, provider, ports, waits = agent_with_ports(tmp_path, context_target_frac=0.8)
    found = next(m for m in agent.loop.chain if isinstance(m, SummarizationMiddleware))
    for i in range(40):
        provider.push(text_reply(f"ok {i}"))
        agent.loop.run_turn("s", FACT.format(i=i))
        if "s" in found.presummaries.items:
            break
    ready = found.presummaries.items["s"]
    assert ready.work.done()
    slow: Future[tuple[SummaryResult, float, int]] = Future()
    late = SummaryResult(text="the late extension", summarizer="test")
    threading.Timer(5.0, slow.set_result, ((late, 0.0),)).start()
    found.presummaries.items["s"] = dataclasses.replace(ready, work=slow, fallback=ready)

    started = time.monotonic()
    result = until_compacted(agent, provider)

    record = result.compactions[0]
    assert time.monotonic() - started < 4.0, "the trigger waited for the extension"
    assert record.summary == text_of(ports.jobs[0])
    assert record.kept_from_seq == ready.pending.to_seq + 1
    assert waits.waits == [True]
    assert history_seqs(agent) == list(range(1, ready.pending.to_seq + 1))


def test_a_pre_summary_over_other_messages_is_replaced_not_used(tmp_path: Path) -> None:
    agent, provider, ports, _ = agent_with_ports(tmp_path)
    found = next(m for m in agent.loop.chain if isinstance(m, SummarizationMiddleware))
    for i in range(40):
        provider.push(text_reply(f"ok {i}"))
        agent.loop.run_turn("s", FACT.format(i=i))
        if "s" in found.presummaries.items:
            break
    # As if the range had held other messages when it was summarized (another session
    # reusing the id, a history rewritten under it): other objects, and its fingerprint
    # no longer matches.
    early = found.presummaries.items["s"]
    found.presummaries.items["s"] = dataclasses.replace(
        early,
        pending=early.pending.model_copy(update={"fingerprint": "0" * 16}),
        first=dataclasses.replace(early.first),
        last=dataclasses.replace(early.last),
    )

    result = until_compacted(agent, provider)

    record = result.compactions[0]
    stale, fresh, *extensions = ports.jobs
    assert fresh.from_seq == stale.from_seq  # started over, not extended
    assert fresh.previous_summary is None
    assert record.summary == text_of((fresh, *extensions)[-1])
    assert all(job.previous_summary != text_of(stale) for job in ports.jobs)
    assert f"asked in turn {stale.turn}" not in str(provider.requests[-1].messages[0].content)


def fingerprints_counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every fingerprint the middleware makes, by the length of the range it encodes."""
    made: list[int] = []
    real = presummary.range_fingerprint

    def counting(evicted: Any) -> str:
        made.append(len(evicted))
        return real(evicted)

    monkeypatch.setattr(presummary, "range_fingerprint", counting)
    return made


def test_a_ready_pre_summary_is_checked_without_encoding_its_range(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent, provider, ports, _ = agent_with_ports(tmp_path)
    made = fingerprints_counted(monkeypatch)
    found = next(m for m in agent.loop.chain if isinstance(m, SummarizationMiddleware))
    calls_in_band = 0
    for i in range(40):
        provider.push(text_reply(f"ok {i}"))
        result = agent.loop.run_turn("s", FACT.format(i=i))
        if result.compactions:
            break
        calls_in_band += "s" in found.presummaries.items
    else:
        raise AssertionError("no compaction in 40 turns")

    assert calls_in_band >= 2  # the check ran on calls after the dispatch
    assert len(made) == len(ports.jobs)  # one fingerprint per dispatch, none per check
    assert result.compactions[0].kept_from_seq == ports.jobs[-1].to_seq + 1  # installed


def test_other_objects_with_the_same_content_are_checked_once_then_pinned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent, provider, ports, _ = agent_with_ports(tmp_path)
    found = next(m for m in agent.loop.chain if isinstance(m, SummarizationMiddleware))
    for i in range(40):
        provider.push(text_reply(f"ok {i}"))
        agent.loop.run_turn("s", FACT.format(i=i))
        if "s" in found.presummaries.items:
            break
    # As if the loop had read the session back from the store: equal messages, other objects.
    early = found.presummaries.items["s"]
    found.presummaries.items["s"] = dataclasses.replace(
        early, first=dataclasses.replace(early.first), last=dataclasses.replace(early.last)
    )
    made = fingerprints_counted(monkeypatch)

    result = until_compacted(agent, provider)

    # Still valid: installed, or extended on top of its text, never summarized again.
    first, *extensions = ports.jobs
    assert (first.from_seq, first.to_seq) == (early.pending.from_seq, early.pending.to_seq)
    for before, after in itertools.pairwise(ports.jobs):
        assert after.from_seq == before.to_seq + 1
        assert after.previous_summary == text_of(before)
    assert result.compactions[0].kept_from_seq == ports.jobs[-1].to_seq + 1
    # Compared by content once (the match pinned the objects); then one fingerprint per
    # extension dispatched, over its whole range, none per check.
    assert made == [early.count, *(job.to_seq for job in extensions)]


def test_the_watermark_is_off_at_or_above_the_trigger(tmp_path: Path) -> None:
    agent, provider, ports, waits = agent_with_ports(
        tmp_path, context_presummarize_frac=0.85, context_trigger_frac=0.85
    )
    found = next(m for m in agent.loop.chain if isinstance(m, SummarizationMiddleware))
    assert found.pacer.watermark is None

    result = until_compacted(agent, provider)

    record = result.compactions[0]
    assert [job.turn for job in ports.jobs] == [record.at_turn]  # asked at the trigger only
    assert waits.waits == [False]


def test_an_extension_s_range_is_priced_as_its_request_is_built(tmp_path: Path) -> None:
    # Priced from the request's running estimates and the extended one's head estimate,
    # an extension's range was off by the head around that text, more than the two routes
    # differed on the corpus (docs/benchmarks.md, "Shorter briefings").
    agent, provider, ports, _ = agent_with_ports(tmp_path)
    found = next(m for m in agent.loop.chain if isinstance(m, SummarizationMiddleware))

    record = until_compacted(agent, provider).compactions[0]

    last = ports.jobs[-1]
    assert last.previous_summary is not None, "the installed pre-summary must be an extension"
    router = found.router
    built = build_summary_request(last, model=last.model, max_tokens=last.budget or 1)
    output = min(last.budget or 0, DEFAULT_SUMMARY_MAX_TOKENS)
    reads = router.estimator.estimate_request(built)
    expected = expected_range_cost(reads, output, router.prices.summarizer)
    assert record.route is not None and record.route.expected_range_usd == expected


def test_a_ready_pre_summary_short_in_coverage_is_extended_before_the_trigger(
    tmp_path: Path,
) -> None:
    # A roomy target: the first pre-summary, dispatched at the floor, still fits at the
    # trigger, so nothing extends it for fit; it covers the few messages before the floor
    # and, installed, would keep verbatim all that came since (docs/benchmarks.md,
    # "coverage": on the corpus the longer kept context compacted again sooner).
    agent, provider, ports, waits = agent_with_ports(tmp_path, context_target_frac=0.8)
    found = next(m for m in agent.loop.chain if isinstance(m, SummarizationMiddleware))

    record = until_compacted(agent, provider).compactions[0]

    first, last = ports.jobs[0], ports.jobs[-1]
    assert len(ports.jobs) > 1, "the short pre-summary was never extended"
    assert last.from_seq == first.to_seq + 1 and last.previous_summary is not None
    assert record.summary == text_of(last)
    assert record.kept_from_seq == last.to_seq + 1
    assert waits.waits == [True]  # extended ahead: the trigger did not wait
    # Each extension made up at least a third of the target in what it covered.
    share = found.profile.target_tokens / presummary.COVERAGE_SHARE
    estimate = found.estimator.estimate_message
    for job in ports.jobs[1:]:
        assert sum(estimate(stored.message) for stored in job.evicted) >= share


def test_with_the_pace_off_a_ready_pre_summary_is_extended_only_to_fit(tmp_path: Path) -> None:
    # The fixed start of round 2, kept as it was: the same short pre-summary is installed.
    agent, provider, ports, waits = agent_with_ports(
        tmp_path, context_target_frac=0.8, context_presummarize_pace=False
    )

    record = until_compacted(agent, provider).compactions[0]

    assert len(ports.jobs) == 1
    assert record.summary == text_of(ports.jobs[0])
    assert waits.waits == [True]
