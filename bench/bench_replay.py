"""What the middleware would have sent for real recorded sessions, at two window sizes.

Every ``*.json`` transcript (Messages API request shape) in the corpus directory is
replayed with ``hango replay --json`` (in this process, through the CLI's own entry
point, so the figures are exactly the command's) at a realistic small window and at a
tight one. For each run it prints: model calls, compactions by reason, truncated tool
arguments, overflow retries, invalid requests blocked, max / mean tokens of the
requests sent against the same requests uncompacted ("raw"), and the simulated prompt
cache over the requests sent (the ``"cache"`` object: read and write shares of all
prompt tokens, input cost against sending everything uncached).

The corpus is reference material kept beside the repository, never inside it: the
directory is ``HANGO_CORPUS_DIR``, by default ``corpus`` in the ``shared`` directory
next to the repository root. When it is absent the benchmark says so and skips.
Runtime: ~2 minutes for the eight reference transcripts on 2 busy cores.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hango.cli import main as hango

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = ROOT.parent / "shared" / "corpus"
CORPUS_ENV = "HANGO_CORPUS_DIR"
# A window no transcript fills (no compaction: the cache read ratio must reach 0.90) and a
# tight one, where every long transcript compacts (the ratio must reach 0.85; issue 9).
WINDOWS = (1_000_000, 20_000)
READ_RATIO_TARGET = {1_000_000: 0.90, 20_000: 0.85}


@dataclass(frozen=True)
class Run:
    transcript: str
    window: int
    seconds: float
    report: dict[str, Any] | None
    error: str | None = None


def corpus_transcripts() -> list[Path]:
    """The corpus's ``*.json`` transcripts; none: a line says the bench is skipped."""
    directory = corpus_dir()
    transcripts = sorted(directory.glob("*.json")) if directory.is_dir() else []
    if not transcripts:
        print(f"skipped: no *.json transcripts in {directory} (set {CORPUS_ENV})")
    return transcripts


def corpus_dir() -> Path:
    configured = os.environ.get(CORPUS_ENV)
    return Path(configured) if configured else DEFAULT_CORPUS


def replay(path: Path, window: int) -> Run:
    """``hango replay PATH --json --max-input-tokens WINDOW``, parsed.

    Only stdout (the JSON report) is captured; the command's one-line error, if any,
    goes to stderr as usual.
    """
    out = io.StringIO()
    started = time.perf_counter()
    with contextlib.redirect_stdout(out):
        code = hango(["replay", str(path), "--json", "--max-input-tokens", str(window)])
    seconds = time.perf_counter() - started
    if code != 0:
        return Run(path.name, window, seconds, None, f"exit code {code}, see stderr")
    return Run(path.name, window, seconds, json.loads(out.getvalue()))


def _reasons(report: dict[str, Any]) -> str:
    counts: dict[str, int] = report["compactions_by_reason"]
    return ", ".join(f"{reason} {n}" for reason, n in sorted(counts.items())) or "-"


def _row(run: Run) -> str:
    if run.report is None:
        return f"| {run.transcript} | failed: {run.error} |"
    r = run.report
    sent, raw = r["tokens_sent"], r["tokens_raw"]
    cache = r["cache"]
    return (
        f"| {run.transcript} | {r['calls']} | {_reasons(r)} | {r['truncated_tool_args']} | "
        f"{r['overflow_retries']} | {r['invalid_requests_blocked']} | "
        f"{sent['max']:,} / {raw['max']:,} | {sent['mean']:,} / {raw['mean']:,} | "
        f"{cache['read_ratio']:.3f} | {cache['write_ratio']:.3f} | "
        f"{cache['relative_input_cost']:.3f} |"
    )


def print_table(window: int, runs: Sequence[Run]) -> None:
    print(f"\nwindow {window:,} tokens (trigger at 0.85 = {int(window * 0.85):,})")
    print(
        "| transcript | calls | compactions | truncated args | overflow retries | "
        "invalid blocked | max sent / raw | mean sent / raw | cache read | cache write | "
        "input cost vs uncached |"
    )
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for run in runs:
        print(_row(run))


def main() -> None:
    directory = corpus_dir()
    transcripts = sorted(directory.glob("*.json")) if directory.is_dir() else []
    if not transcripts:
        print(
            f"skipped: no *.json transcripts in {directory} "
            f"(set {CORPUS_ENV} to a directory of Messages API transcripts)"
        )
        return
    print(f"corpus: {directory} ({len(transcripts)} transcripts), estimator from HANGO_ESTIMATOR")
    for window in WINDOWS:
        runs = [replay(path, window) for path in transcripts]
        print_table(window, runs)
        ratios = [run.report["cache"]["read_ratio"] for run in runs if run.report]
        target = READ_RATIO_TARGET[window]
        print(
            f"({sum(run.seconds for run in runs):.1f}s; simulated cache read ratio "
            f"{min(ratios, default=0):.3f} to {max(ratios, default=0):.3f}, target >= {target})"
        )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
