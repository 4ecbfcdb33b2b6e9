"""Pre-summaries on the session's pace, measured on the replayed clock, and the history
file holding each evicted message once (simulate and replay, offline)."""

from __future__ import annotations

import json
import re
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from hango.cli import main
from hango.core.profiles import known_price
from tests.unit.cli.test_cli import hango

_MESSAGE = re.compile(r"^### Message (\d+) ", re.MULTILINE)
WINDOW = "6000"
_EVICTED_AT = re.compile(r"evicted from the model's context at turn (\d+)")


@pytest.fixture(autouse=True)
def offline_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HANGO_REDIS_URL", "ANTHROPIC_API_KEY", "HANGO_ANTHROPIC_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("HANGO_MODEL_PROFILES", raising=False)
    monkeypatch.setenv("HANGO_ESTIMATOR", "heuristic")
    monkeypatch.setenv("HANGO_MODEL", "cli-test-model")


def history_text(root: Path) -> str:
    files = list((root / "conversation_history").glob("*.md"))
    assert len(files) == 1, files
    return files[0].read_text()


def assert_each_evicted_message_once(text: str, records: list[dict[str, Any]]) -> None:
    seqs = Counter(int(seq) for seq in _MESSAGE.findall(text))
    assert seqs, "nothing was offloaded"
    assert [seq for seq, n in seqs.items() if n > 1] == []
    evicted_to = max(record["kept_from_seq"] for record in records) - 1
    assert set(seqs) == set(range(1, evicted_to + 1))
    # Sections name the turn of a compaction that evicted them, not of a pre-summary.
    turns = {record["turn"] for record in records}
    assert set(int(t) for t in _EVICTED_AT.findall(text)) <= turns


def simulate_12_turns(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> Any:
    ran = hango(
        capsys, "simulate", "--turns", "12", "--max-input-tokens", "16000", "--json",
        "--database-url", f"sqlite:///{tmp_path / 's.db'}", "--history-root", str(tmp_path / "h"),
    )  # fmt: skip
    assert ran.code == 0, ran.err
    return json.loads(ran.out)


def test_simulate_writes_each_evicted_message_to_the_history_once(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    report = simulate_12_turns(capsys, tmp_path)

    assert report["compactions_by_reason"].get("threshold", 0) >= 2
    assert report["summary_calls"] > len(report["compactions"])  # pre-summaries were replaced
    assert_each_evicted_message_once(history_text(tmp_path / "h"), report["compactions"])


TRIGGER_KEYS = {
    "turn", "presummary", "ready", "wait_ms", "summarizer", "summary_route", "summary_cost_usd"
}  # fmt: skip


def summary_cost(usage: dict[str, int], price: Any) -> float:
    spent = price.input_cost(0, 0, usage["input_tokens"]) + price.output_cost(
        usage["output_tokens"]
    )
    return round(spent, 6)


def test_simulate_reports_each_compaction_at_the_trigger_with_its_summary_and_cost(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HANGO_MODEL", "claude-sonnet-4-5")
    # The range route: every summary by the summarizer, priced from its usage alone.
    monkeypatch.setenv("HANGO_SUMMARY_ROUTE", "range")
    report = simulate_12_turns(capsys, tmp_path)

    at_trigger = report["trigger_compactions"]
    records = {c["turn"]: c for c in report["compactions"] if c["reason"] == "threshold"}
    assert [c["turn"] for c in at_trigger] == list(records)
    price = known_price("claude-sonnet-4-5")
    for compaction in at_trigger:
        assert set(compaction) == TRIGGER_KEYS
        record = records[compaction["turn"]]
        assert compaction["summarizer"] == record["summarizer"] == "llm"
        assert compaction["summary_cost_usd"] == summary_cost(record["summary_usage"], price)
        assert compaction["ready"] == (compaction["presummary"] and compaction["wait_ms"] == 0)
    ready = sum(c["ready"] for c in at_trigger) / len(at_trigger)
    assert report["presummary_ready_rate"] == round(ready, 3)


def test_simulate_with_its_defaults_installs_a_ready_pre_summary_at_nine_triggers_in_ten(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The README's first command: rounds of up to ~8,600 tokens against a 4,000-token gap
    # between the target and the trigger. The largest rounds come every few dozen calls;
    # an estimate that forgot the last one left a pre-summary that no longer fit.
    monkeypatch.delenv("HANGO_MODEL")
    ran = hango(
        capsys, "simulate", "--json", "--database-url", f"sqlite:///{tmp_path / 'd.db'}",
        "--history-root", str(tmp_path / "h"),
    )  # fmt: skip

    assert ran.code == 0, ran.err
    report = json.loads(ran.out)
    assert len(report["trigger_compactions"]) >= 8
    assert report["presummary_hit_rate"] >= 0.9
    assert report["trigger_wait_ms"]["p50"] == 0
    assert_each_evicted_message_once(history_text(tmp_path / "h"), report["compactions"])


def paced_log(turns: int = 3, rounds: int = 10, seconds: int = 2) -> str:
    """A Claude Code log of working turns: each a request, then tool rounds ``seconds`` apart."""
    clock = 1_750_000_000
    lines: list[str] = []

    def entry(kind: str, content: Any) -> None:
        at = datetime.fromtimestamp(clock, tz=UTC).isoformat().replace("+00:00", "Z")
        body = {"role": kind, "content": content}
        lines.append(json.dumps({"type": kind, "message": body, "timestamp": at}))

    for t in range(turns):
        entry("user", f"Task {t}: read the modules and report. " + "Be thorough. " * 40)
        for r in range(rounds):
            clock += seconds
            tool_id = f"toolu_{t}_{r}"
            entry("assistant", [{"type": "tool_use", "id": tool_id, "name": "Read",
                                 "input": {"path": f"m{t}_{r}.py"}}])  # fmt: skip
            content = f"# module {t}.{r}\n" + f"value_{r} = {t}\n" * 120
            entry("user", [{"type": "tool_result", "tool_use_id": tool_id, "content": content}])
        clock += seconds
        entry("assistant", [{"type": "text", "text": f"Task {t} done."}])
        clock += 60  # the user reads the answer
    return "\n".join(lines) + "\n"


def replay_log(capsys: pytest.CaptureFixture[str], tmp_path: Path, *flags: str) -> Any:
    log = tmp_path / "paced.jsonl"
    log.write_text(paced_log())
    history = tmp_path / f"h{len(list(tmp_path.iterdir()))}"
    ran = hango(capsys, "replay", str(log), "--max-input-tokens", WINDOW, "--json",
                "--history-root", str(history), *flags)  # fmt: skip
    assert ran.code == 0, ran.err
    return json.loads(ran.out), history


def test_replay_measures_readiness_on_the_recorded_timestamps(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    quick, history = replay_log(capsys, tmp_path, "--summarizer-latency", "0")
    slow, _ = replay_log(capsys, tmp_path, "--summarizer-latency", "1000")

    assert quick["pacing"] == {
        "from_timestamps": True, "call_seconds": 5.0, "summarizer_latency": 0.0
    }  # fmt: skip
    at_trigger = quick["trigger_compactions"]
    assert at_trigger
    assert quick["presummary_hit_rate"] > 0
    assert all(c["ready"] and c["wait_ms"] < 1 for c in at_trigger if c["presummary"])
    # A summarizer slower than the whole recorded session is never ready at a trigger: the
    # turn waits for what is left of it, on the recorded clock (nothing slept).
    waits = [c["wait_ms"] for c in slow["trigger_compactions"]]
    assert waits and all(w > 900_000 for w in waits)
    assert slow["presummary_ready_rate"] == 0
    assert_each_evicted_message_once(history_text(history), quick["compaction_records"])


def test_replay_estimates_what_its_summaries_would_cost_a_model(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HANGO_MODEL", "claude-sonnet-4-5")
    monkeypatch.setenv("HANGO_SUMMARY_ROUTE", "range")  # every summary on the summarizer
    report, _ = replay_log(capsys, tmp_path, "--summarizer-latency", "0")

    cost = report["summarizer_cost"]
    assert cost["estimated"] is True and cost["model"] == "claude-sonnet-4-5"
    # Every summarizer call, the pre-summaries never installed included.
    assert cost["requests"] >= len(report["compaction_records"]) >= 1
    assert cost["uncached_tokens"] == cost["prompt_tokens"] > 0  # no breakpoint in a summary
    price = known_price("claude-sonnet-4-5")
    records = report["compaction_records"]
    installed = {c["turn"]: c for c in records if c["reason"] == "threshold"}
    for compaction in report["trigger_compactions"]:
        record = installed[compaction["turn"]]
        assert compaction["summary_cost_usd"] == summary_cost(record["summary_usage"], price)
    total = cost["input_cost_usd"] + cost["output_cost_usd"]
    assert sum(c["summary_cost_usd"] for c in report["trigger_compactions"]) <= total + 1e-6


def test_replay_without_timestamps_spaces_calls_by_call_seconds(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    transcript = tmp_path / "t.json"
    messages: list[dict[str, Any]] = []
    for t in range(8):
        use = {"type": "tool_use", "id": f"toolu_{t}", "name": "Read", "input": {"p": t}}
        result = {"type": "tool_result", "tool_use_id": f"toolu_{t}", "content": "y\n" * 400}
        messages += [
            {"role": "user", "content": f"task {t} " + "words " * 200},
            {"role": "assistant", "content": [use]},
            {"role": "user", "content": [result]},
            {"role": "assistant", "content": f"done {t}"},
        ]
    transcript.write_text(json.dumps({"messages": messages}))

    def run(seconds: str) -> Any:
        ran = hango(capsys, "replay", str(transcript), "--max-input-tokens", "6000", "--json",
                    "--summarizer-latency", "3", "--call-seconds", seconds)  # fmt: skip
        assert ran.code == 0, ran.err
        return json.loads(ran.out)

    spaced, hurried = run("100"), run("0")
    assert spaced["pacing"]["from_timestamps"] is False
    assert spaced["trigger_compactions"], "a 6000-token window compacts"
    # 100 s between calls: every pre-summary installed was ready; with no time between
    # calls none is, and each trigger waits at least a whole summary (on the replayed
    # clock: a pre-summary awaited, then found not to fit, adds its own wait).
    installed = [c for c in spaced["trigger_compactions"] if c["presummary"]]
    assert installed and all(c["ready"] and c["wait_ms"] == 0 for c in installed)
    assert hurried["presummary_ready_rate"] == 0.0
    assert all(c["wait_ms"] >= 3000 for c in hurried["trigger_compactions"])


def test_replay_refuses_a_negative_latency(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["replay", str(tmp_path / "x.json"), "--summarizer-latency", "-1"])
    assert exited.value.code == 2
    assert "--summarizer-latency" in capsys.readouterr().err
