"""Summary routes on the corpus: the warm prefix, the evicted range, or the cheaper (issue 24).

Every ``*.json`` transcript of the corpus is replayed with ``hango replay --json
--summarizer-latency 5`` at the window ``bench_pace`` finds (the largest that compacts at
the trigger), at a Sonnet-class and an Opus-class agent model with the default summarizer
(the agent's own model; in a third table Haiku 4.5), under ``HANGO_SUMMARY_ROUTE``
``auto`` (the cheaper by expected cost), ``range`` and ``prefix`` (forced, where open),
with pre-summaries on (the default: each routed when it is dispatched) and off
(``HANGO_CONTEXT_PRESUMMARIZE_FRAC=0.99``: every summary made at the trigger). With
pre-summaries on, a fourth column is the round-2 summarizer: the fixed start at 0.70 of
the window (``HANGO_CONTEXT_PRESUMMARIZE_PACE=false``) on the range route.

The cost of a run's summaries is estimated, as replay's own summarizer cost is (replay
summarizes by extraction): every range-route call (replay's ``"summarizer_cost"``) plus
every prefix-route call (``"prefix_summary_cost"``: the prefix request that would have
been sent, priced with the prefix as cache reads), pre-summaries never installed included.
The last two columns are the agent's own calls: the share of their input read from the
cache, and their input cost (reads, writes and uncached tokens priced, USD).

``python -m bench.bench_route [on] [off] [haiku]``: only those tables (default: all).
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
# The round-2 summarizer: the fixed start of before, on the range route.
ROUND_2 = {
    "HANGO_SUMMARY_ROUTE": "range",
    "HANGO_CONTEXT_PRESUMMARIZE_PACE": "false",
    "HANGO_CONTEXT_PRESUMMARIZE_FRAC": "0.70",
}
_OFF = {"HANGO_CONTEXT_PRESUMMARIZE_FRAC": "0.99"}
TABLES = {
    "on": ("pre-summaries on, the agent's model summarizes", {}),
    "off": ("pre-summaries off, the agent's model summarizes", _OFF),
    "haiku": (
        "pre-summaries off, Haiku 4.5 summarizes",
        {**_OFF, "HANGO_SUMMARIZER_MODEL": "claude-haiku-4-5"},
    ),
}


def replay(path: Path, window: int, model: str, env: dict[str, str]) -> Any:
    argv = ["replay", str(path), "--json", "--max-input-tokens", str(window)]
    argv += ["--summarizer-latency", "5", "--model", model]
    out = io.StringIO()
    with environment(env), contextlib.redirect_stdout(out):
        code = hango(argv)
    return json.loads(out.getvalue()) if code == 0 else None


def summary_cost(report: dict[str, Any], part: str = "") -> float:
    """Every range-route call plus every prefix-route call (estimated, USD); ``part``
    ``"input"`` or ``"output"``: that part only."""
    by_range, prefix = report["summarizer_cost"], report["prefix_summary_cost"] or {}
    parts = (part,) if part else ("input", "output")
    return float(sum(by_range[f"{p}_cost_usd"] + prefix.get(f"{p}_cost_usd", 0.0) for p in parts))


def cell(report: dict[str, Any] | None) -> str:
    if report is None:
        return "failed"
    routes = report["summary_routes"]
    return f"${summary_cost(report):.3f} ({routes['prefix']}p/{routes['range']}r)"


def columns(key: str, env: dict[str, str]) -> dict[str, dict[str, str]]:
    """The runs of one table's row, by column title."""
    runs = {route: {**env, "HANGO_SUMMARY_ROUTE": route} for route in ROUTES}
    if key == "on":
        runs["round-2 (fixed 0.70, range)"] = ROUND_2
        runs["fixed 0.70, auto"] = {**ROUND_2, "HANGO_SUMMARY_ROUTE": "auto"}
    return runs


def row(path: Path, window: int, label: str, model: str, runs: dict[str, dict[str, str]]) -> Any:
    reports = {title: replay(path, window, model, run) for title, run in runs.items()}
    auto, base = reports["auto"], [reports["range"]]
    if "round-2 (fixed 0.70, range)" in reports:
        base.append(reports["round-2 (fixed 0.70, range)"])
    costs = [None if r is None else summary_cost(r) for r in (auto, *base)]
    shares = " / ".join(
        f"{costs[0] / cost:.2f}x" if costs[0] is not None and cost else "-" for cost in costs[1:]
    )
    ratios = " / ".join(str(r["cache"]["read_ratio"]) if r else "-" for r in (auto, *base) if r)
    # A smaller context after a compaction reads less and writes as much: its read share
    # drops while the agent pays less, so the share is shown beside what it is a share of.
    inputs = " / ".join(f"${r['cache']['input_cost_usd']:.4f}" for r in (auto, *base) if r)
    cells = " | ".join(cell(report) for report in reports.values())
    paced = "-" if auto is None else _paced(auto)
    name = path.name.removesuffix(".json")
    print(f"| {name} | {window:,} | {label} | {cells} | {shares} | {paced} | {ratios} | {inputs} |")
    sys.stdout.flush()
    return reports


def _paced(report: dict[str, Any]) -> str:
    rate, waits = report["presummary_hit_rate"], report["trigger_wait_ms"]
    hit = "-" if rate is None else f"{rate:.2f}"
    return f"{hit}, {waits['p50'] if waits['p50'] is not None else '-'} ms"


def totals(label: str, rows: list[dict[str, Any]]) -> None:
    """Per column over the corpus: the total, and its input and output parts."""
    print(f"\ntotals at {label} (input + output):")
    for title in rows[0]:
        reports = [r[title] for r in rows if r[title] is not None]
        spent_in = sum(summary_cost(r, "input") for r in reports)
        spent_out = sum(summary_cost(r, "output") for r in reports)
        total = spent_in + spent_out
        print(f"- {title}: ${total:.3f} (${spent_in:.3f} + ${spent_out:.3f}), {len(reports)} runs")


def main() -> None:
    transcripts = corpus_transcripts()
    if not transcripts:
        return
    windows = {path: compacting_window(path) for path in transcripts}
    for key in sys.argv[1:] or list(TABLES):
        title, env = TABLES[key]
        runs = columns(key, env)
        twice = " / round-2" if key == "on" else ""
        print(f"\n{title}; cells: estimated cost (prefix / range compactions)")
        print(
            f"| transcript | window | agent | {' | '.join(runs)} | auto / range{twice} "
            f"| auto: hit rate, wait p50 | read ratio auto / range{twice} "
            f"| agent input auto / range{twice} |"
        )
        print("|---|---:|---|" + "---:|" * len(runs) + "---:|---:|---:|---:|")
        by_model: dict[str, list[dict[str, Any]]] = {label: [] for label in MODELS}
        for path, window in windows.items():
            for label, model in MODELS.items():
                if window is not None:
                    by_model[label].append(row(path, window, label, model, runs))
        for label, rows in by_model.items():
            if rows:
                totals(label, rows)


if __name__ == "__main__":
    main()
