"""Summary routes on the corpus: the warm prefix, the evicted range, or the cheaper (issue 24).

Every ``*.json`` transcript of the corpus is replayed with ``hango replay --json
--summarizer-latency 5`` at the window ``bench_pace`` finds (the largest that compacts at
the trigger), at a Sonnet-class and an Opus-class agent model with the default summarizer
(the agent's own model; in a third table Haiku 4.5), under ``HANGO_SUMMARY_ROUTE``
``auto`` (the cheaper by expected cost), ``range`` and ``prefix`` (forced, where open),
with pre-summaries on (the default) and off (``HANGO_CONTEXT_PRESUMMARIZE_FRAC=0.99``:
every summary made at the trigger, the only ones the router routes).

The cost of a run's summaries is estimated, as replay's own summarizer cost is (replay
summarizes by extraction): every range-route call (replay's ``"summarizer_cost"``,
pre-summaries never installed included) plus, for each compaction on the prefix route,
the prefix request that would have been sent priced with the prefix as cache reads
(``"summary_route"."cost_usd"``).
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path
from typing import Any

from bench.bench_pace import compacting_window, environment
from bench.bench_replay import corpus_transcripts
from hango.cli import main as hango

MODELS = {"Sonnet 4.6": "claude-sonnet-4-6", "Opus 4.8": "claude-opus-4-8"}
ROUTES = ("auto", "range", "prefix")
_OFF = {"HANGO_CONTEXT_PRESUMMARIZE_FRAC": "0.99"}
TABLES = {
    "pre-summaries on, the agent's model summarizes": {},
    "pre-summaries off, the agent's model summarizes": _OFF,
    "pre-summaries off, Haiku 4.5 summarizes": {
        **_OFF,
        "HANGO_SUMMARIZER_MODEL": "claude-haiku-4-5",
    },
}


def replay(path: Path, window: int, model: str, route: str, env: dict[str, str]) -> Any:
    argv = ["replay", str(path), "--json", "--max-input-tokens", str(window)]
    argv += ["--summarizer-latency", "5", "--model", model]
    out = io.StringIO()
    with environment({**env, "HANGO_SUMMARY_ROUTE": route}), contextlib.redirect_stdout(out):
        code = hango(argv)
    return json.loads(out.getvalue()) if code == 0 else None


def summary_cost(report: dict[str, Any]) -> float:
    """Every range-route call, plus the prefix-route compactions (estimated, USD)."""
    by_range = report["summarizer_cost"]
    prefix = sum(
        record["summary_route"]["cost_usd"] or 0.0
        for record in report["compaction_records"]
        if record["summary_route"] and record["summary_route"]["name"] == "prefix"
    )
    return float(by_range["input_cost_usd"] + by_range["output_cost_usd"] + prefix)


def cell(report: dict[str, Any] | None) -> str:
    if report is None:
        return "failed"
    routes = report["summary_routes"]
    return f"${summary_cost(report):.3f} ({routes['prefix']}p/{routes['range']}r)"


def row(path: Path, window: int, label: str, model: str, env: dict[str, str]) -> str:
    reports = [replay(path, window, model, route, env) for route in ROUTES]
    ratios = " / ".join(str(r["cache"]["read_ratio"]) if r else "-" for r in reports[:2])
    cells = " | ".join(cell(report) for report in reports)
    return f"| {path.name.removesuffix('.json')} | {window:,} | {label} | {cells} | {ratios} |"


def main() -> None:
    transcripts = corpus_transcripts()
    if not transcripts:
        return
    windows = {path: compacting_window(path) for path in transcripts}
    for title, env in TABLES.items():
        print(f"\n{title}; cells: estimated cost (prefix / range compactions)")
        print("| transcript | window | agent | auto | range | prefix | read ratio auto / range |")
        print("|---|---:|---|---:|---:|---:|---:|")
        for path, window in windows.items():
            if window is None:
                continue
            for label, model in MODELS.items():
                print(row(path, window, label, model, env))
                sys.stdout.flush()


if __name__ == "__main__":
    main()
