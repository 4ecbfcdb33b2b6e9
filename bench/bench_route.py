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


def summary_cost(report: dict[str, Any]) -> float:
    """Every range-route call plus every prefix-route call (estimated, USD)."""
    by_range = report["summarizer_cost"]
    prefix = report["prefix_summary_cost"]
    by_prefix = 0.0 if prefix is None else prefix["cost_usd"]
    return float(by_range["input_cost_usd"] + by_range["output_cost_usd"] + by_prefix)


def cell(report: dict[str, Any] | None) -> str:
    if report is None:
        return "failed"
    routes = report["summary_routes"]
    return f"${summary_cost(report):.3f} ({routes['prefix']}p/{routes['range']}r)"


def row(path: Path, window: int, label: str, model: str, env: dict[str, str], round_2: bool) -> str:
    runs = [{**env, "HANGO_SUMMARY_ROUTE": route} for route in ROUTES]
    reports = [replay(path, window, model, run) for run in [*runs, *([ROUND_2] if round_2 else [])]]
    ratios = " / ".join(str(r["cache"]["read_ratio"]) if r else "-" for r in reports[:2])
    cells = " | ".join(cell(report) for report in reports)
    auto = reports[0]
    paced = "-" if auto is None else _paced(auto)
    costs = [None if r is None else summary_cost(r) for r in reports]
    shares = " / ".join(
        f"{costs[0] / base:.2f}x" if costs[0] is not None and base else "-"
        for base in costs[1:2] + costs[3:]
    )
    name = path.name.removesuffix(".json")
    return f"| {name} | {window:,} | {label} | {cells} | {shares} | {paced} | {ratios} |"


def _paced(report: dict[str, Any]) -> str:
    rate, waits = report["presummary_hit_rate"], report["trigger_wait_ms"]
    hit = "-" if rate is None else f"{rate:.2f}"
    return f"{hit}, {waits['p50'] if waits['p50'] is not None else '-'} ms"


def main() -> None:
    transcripts = corpus_transcripts()
    if not transcripts:
        return
    chosen = sys.argv[1:] or list(TABLES)
    windows = {path: compacting_window(path) for path in transcripts}
    for key in chosen:
        title, env = TABLES[key]
        round_2 = key == "on"
        extra = " | round-2 (fixed 0.70, range)" if round_2 else ""
        print(f"\n{title}; cells: estimated cost (prefix / range compactions)")
        print(
            f"| transcript | window | agent | auto | range | prefix{extra} | auto / range"
            f"{' / round-2' if round_2 else ''} | auto: hit rate, wait p50 "
            "| read ratio auto / range |"
        )
        print("|---|---:|---|---:|---:|---:|" + ("---:|" if round_2 else "") + "---:|---:|---:|")
        for path, window in windows.items():
            if window is None:
                continue
            for label, model in MODELS.items():
                print(row(path, window, label, model, env, round_2))
                sys.stdout.flush()


if __name__ == "__main__":
    main()
