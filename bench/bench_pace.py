"""Pre-summaries on the corpus: ready at the trigger, paced or at a fixed start (issue 24).

Every ``*.json`` transcript of the corpus (see ``bench_replay``) is replayed with
``hango replay --json --summarizer-latency 5`` at the largest of :data:`WINDOWS` that makes
it compact at the trigger, side by side with the session's pace deciding the start (the
default) and with the fixed start of before (``HANGO_CONTEXT_PRESUMMARIZE_PACE=false``,
``HANGO_CONTEXT_PRESUMMARIZE_FRAC=0.70``), at two paces of the agent's calls. The corpus
records no timestamps, so the calls are ``--call-seconds`` apart on the replayed clock;
readiness and waits are judged on that clock, so the figures do not depend on the
machine. Per run: compactions at the trigger, the share that installed a pre-summary,
the share whose pre-summary was ready, the trigger wait p50 / p95, and the summarizer's
calls (pre-summaries never installed included) with what they would cost a model at the
summarizer model's price (replay's ``"summarizer_cost"``: the extractive summarizer stands
in, so its sizes are estimated; input and output together).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.bench_replay import corpus_dir, corpus_transcripts
from hango.cli import main as hango

WINDOWS = (20_000, 12_000, 8_000)
SUMMARIZER_LATENCY = "5"
CALL_SECONDS = ("5", "2")
STARTS: dict[str, dict[str, str]] = {
    "paced": {},
    "fixed 0.70": {
        "HANGO_CONTEXT_PRESUMMARIZE_PACE": "false",
        "HANGO_CONTEXT_PRESUMMARIZE_FRAC": "0.70",
    },
}


@contextlib.contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def replay(path: Path, window: int, call_seconds: str, start: str) -> dict[str, Any] | None:
    argv = ["replay", str(path), "--json", "--max-input-tokens", str(window)]
    argv += ["--summarizer-latency", SUMMARIZER_LATENCY, "--call-seconds", call_seconds]
    out = io.StringIO()
    with environment(STARTS[start]), contextlib.redirect_stdout(out):
        code = hango(argv)
    return json.loads(out.getvalue()) if code == 0 else None


def compacting_window(path: Path) -> int | None:
    """The largest window at which the transcript compacts at the trigger."""
    for window in WINDOWS:
        report = replay(path, window, CALL_SECONDS[0], "paced")
        if report is not None and report["trigger_compactions"]:
            return window
    return None


def _cell(report: dict[str, Any] | None) -> str:
    if report is None:
        return "failed | | | |"
    waits = report["trigger_wait_ms"]
    installed, ready = report["presummary_hit_rate"], report["presummary_ready_rate"]
    cost = report["summarizer_cost"]
    usd = cost["input_cost_usd"] + cost["output_cost_usd"]
    return (
        f"{installed:.2f} | {ready:.2f} | {waits['p50']:,.0f} / {waits['p95']:,.0f} ms | "
        f"{cost['requests']} / ${usd:.3f}"
    )


def main() -> None:
    transcripts = corpus_transcripts()
    if not transcripts:
        return
    print(f"corpus: {corpus_dir()}; summaries take {SUMMARIZER_LATENCY} s on the replayed clock")
    for seconds in CALL_SECONDS:
        print(f"\ncalls {seconds} s apart (no timestamps in the corpus)")
        print(
            "| transcript | window | at the trigger | paced: installed | ready | wait p50 / p95 "
            "| summarizer calls / cost | fixed 0.70: installed | ready | wait p50 / p95 "
            "| summarizer calls / cost |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for path in transcripts:
            window = compacting_window(path)
            if window is None:
                print(f"| {path.name} | no compaction at the trigger at {WINDOWS} |")
                continue
            runs = [replay(path, window, seconds, start) for start in STARTS]
            count = len(runs[0]["trigger_compactions"]) if runs[0] else 0
            cells = " | ".join(_cell(run) for run in runs)
            print(f"| {path.name} | {window:,} | {count} | {cells} |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
