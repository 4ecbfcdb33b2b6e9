"""``hango replay`` routes each summary and prices it: the warm prefix as cache reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.unit.cli.test_cli import hango
from tests.unit.cli.test_pacing import (
    WINDOW,
    assert_each_evicted_message_once,
    history_text,
    offline_env,
    paced_log,
)

__all__ = ["offline_env"]  # the autouse fixture: no queue, no key, the heuristic estimator


def replay(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, route: str, seconds: int = 2, *flags: str
) -> Any:
    log = tmp_path / f"log{seconds}.jsonl"
    log.write_text(paced_log(seconds=seconds))
    ran = hango(
        capsys, "replay", str(log), "--max-input-tokens", WINDOW, "--json",
        "--history-root", str(tmp_path / f"h-{route}-{seconds}"), *flags,
    )  # fmt: skip
    assert ran.code == 0, ran.err
    report = json.loads(ran.out)
    return report, [r for r in report["compaction_records"] if r["reason"] != "truncate"]


@pytest.fixture(autouse=True)
def at_the_trigger(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HANGO_MODEL", "claude-sonnet-4-5")
    # No pre-summaries (a test here turns them on): every summary is made at the trigger.
    monkeypatch.setenv("HANGO_CONTEXT_PRESUMMARIZE_FRAC", "0.99")


def test_replay_takes_the_warm_prefix_when_cheaper_and_prices_it_as_cache_reads(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HANGO_SUMMARY_ROUTE", "auto")
    auto, routed = replay(capsys, tmp_path, "auto")
    monkeypatch.setenv("HANGO_SUMMARY_ROUTE", "range")
    _, ranged = replay(capsys, tmp_path, "range")

    # The same summaries (by extraction) at the same cuts: only the route and cost differ.
    assert [r["kept_from_seq"] for r in routed] == [r["kept_from_seq"] for r in ranged]
    on_prefix = [i for i, r in enumerate(routed) if r["summary_route"]["name"] == "prefix"]
    assert on_prefix, "a warm prefix with the agent's own model as summarizer is cheaper"
    for i in on_prefix:
        route = routed[i]["summary_route"]
        assert route["expected_prefix_usd"] < route["expected_range_usd"]
        assert route["cost_usd"] < ranged[i]["summary_route"]["cost_usd"]
    totals = auto["summary_routes"]
    assert totals["prefix"] == len(on_prefix) and totals["estimated"] is True
    assert totals["cost_usd"] == round(sum(r["summary_route"]["cost_usd"] for r in routed), 6)


def test_replay_never_takes_a_prefix_older_than_the_cache_lifetime(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HANGO_SUMMARY_ROUTE", "prefix")
    _, routed = replay(capsys, tmp_path, "prefix", seconds=400)  # calls 400 s apart

    assert routed
    for record in routed:
        assert record["summary_route"]["name"] == "range"
        assert record["summary_route"]["reason"].startswith("cold prefix")


def test_replay_routes_pre_summaries_and_counts_every_prefix_call(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HANGO_CONTEXT_PRESUMMARIZE_FRAC", "0.40")  # pre-summaries on
    monkeypatch.setenv("HANGO_SUMMARY_ROUTE", "auto")
    # Readiness on the recorded clock, so both runs decide alike (not on this machine's).
    latency = ("--summarizer-latency", "5")
    auto, routed = replay(capsys, tmp_path, "auto", 2, *latency)
    monkeypatch.setenv("HANGO_SUMMARY_ROUTE", "range")
    ranged, _ = replay(capsys, tmp_path, "range", 2, *latency)

    installed = [r for r in routed if r["summary_route"]["reason"].startswith("pre-summary: ")]
    assert installed, "no compaction installed a pre-summary"
    on_prefix = [r for r in installed if r["summary_route"]["name"] == "prefix"]
    assert on_prefix, "a warm prefix with the agent's own model as summarizer is cheaper"
    for record in on_prefix:
        route = record["summary_route"]
        assert route["expected_prefix_usd"] < route["expected_range_usd"]
    assert auto["summary_routes"]["prefix"] == len(
        [r for r in routed if r["summary_route"]["name"] == "prefix"]
    )
    # Every prefix call is counted, the pre-summaries never installed too; none on the range.
    prefix = auto["prefix_summary_cost"]
    assert prefix["calls"] >= len(on_prefix) and prefix["cost_usd"] > 0
    assert prefix["cache_read_input_tokens"] > prefix["input_tokens"]
    assert ranged["prefix_summary_cost"]["calls"] == 0
    # The route sends nothing through the agent's conversation: same cache, same history.
    assert auto["cache"]["read_ratio"] == ranged["cache"]["read_ratio"]
    records = auto["compaction_records"]  # the truncations too: they evict as well
    assert_each_evicted_message_once(history_text(tmp_path / "h-auto-2"), records)
