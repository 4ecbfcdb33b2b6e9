"""Where the commands write: rich tables for people, JSON for programs.

Results go to stdout; progress, notices and errors go to stderr, so ``hango ... --json``
can be piped while a person still sees what is happening.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from hango.compaction.record import CompactionRecord
from hango.core.messages import Usage

# Tables written to a file or a pipe get this width rather than rich's 80 columns.
PIPE_WIDTH = 120


_quiet = False


def set_quiet(quiet: bool) -> None:
    """``-q``: no progress and no notices; results and errors still print."""
    global _quiet
    _quiet = quiet


def is_quiet() -> bool:
    return _quiet


def plain_requested() -> bool:
    # https://no-color.org: any non-empty NO_COLOR turns off every escape, bold included.
    return bool(os.environ.get("NO_COLOR"))


def stdout_console() -> Console:
    # Built per call (not at import) so a test's captured stdout is the one written to.
    width = None if sys.stdout.isatty() else PIPE_WIDTH
    return Console(file=sys.stdout, highlight=False, soft_wrap=True, width=width, **_color())


def stderr_console() -> Console:
    return Console(file=sys.stderr, highlight=False, soft_wrap=True, **_color())


def _color() -> dict[str, Any]:
    return {"color_system": None} if plain_requested() else {}


def print_json(document: Any) -> None:
    sys.stdout.write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")


def notice(text: str) -> None:
    """A line for the person running the command (stderr, plain); nothing under ``-q``."""
    if _quiet:
        return
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``1 compaction``, ``2 compactions`` (``nouns`` for irregular plurals)."""
    return f"{count:,} {noun if count == 1 else nouns or noun + 's'}"


def redact_url(url: str) -> str:
    """A database URL without its password, fit to print."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url


def compaction_table(records: Sequence[CompactionRecord], title: str = "Compactions") -> Table:
    table = Table(title=title, title_justify="left")
    for column in ("#", "turn", "reason", "tokens before → after", "evicted", "kept from"):
        table.add_column(column, justify="left" if column == "reason" else "right", no_wrap=True)
    table.add_column("summary")
    for index, record in enumerate(records, start=1):
        table.add_row(
            str(index),
            str(record.at_turn),
            record.reason,
            f"{record.tokens_before:,} → {record.tokens_after:,}",
            str(record.evicted_messages),
            str(record.kept_from_seq),
            _summarizer(record),
        )
    return table


FALLBACK_REASON_CHARS = 60


def _summarizer(record: CompactionRecord) -> str:
    if record.fallback_reason:
        return f"{record.summarizer} (fallback: {shorten(record.fallback_reason)})"
    return record.summarizer


def shorten(text: str, limit: int = FALLBACK_REASON_CHARS) -> str:
    """``text`` cut at a word boundary with an ellipsis, never inside a word or number."""
    if len(text) <= limit:
        return text
    cut = text[: limit + 1].rsplit(" ", 1)[0].rstrip(" ,;:(")
    return (cut if cut and len(cut) < len(text) else text[:limit]) + "…"


def key_value_table(title: str, rows: Iterable[tuple[str, Any]]) -> Table:
    table = Table(title=title, title_justify="left", show_header=False)
    table.add_column("what")
    table.add_column("value", overflow="fold")
    for key, value in rows:
        table.add_row(key, f"{value:,}" if isinstance(value, int) else str(value))
    return table


CACHE_ROWS = (
    ("model calls", "requests", "{:,}"),
    ("cache read tokens", "read_tokens", "{:,}"),
    ("cache write tokens", "write_tokens", "{:,}"),
    ("uncached input tokens", "uncached_tokens", "{:,}"),
    ("read ratio", "read_ratio", "{:.3f}"),
    ("input cost (USD)", "input_cost_usd", "${:.4f}"),
    ("vs no caching", "relative_input_cost", "{:.3f}"),
    ("output tokens", "output_tokens", "{:,}"),
    ("output cost (USD)", "output_cost_usd", "${:.4f}"),
)


def cache_table(title: str, columns: dict[str, dict[str, Any]]) -> Table:
    """Cache ``"cache"`` objects side by side (simulated, recorded...): the JSON's figures."""
    table = Table(title=title, title_justify="left")
    table.add_column("")
    for label in columns:
        table.add_column(label, justify="right", no_wrap=True)
    for name, key, shown in CACHE_ROWS:
        if any(key in cache for cache in columns.values()):
            cells = (
                shown.format(cache[key]) if key in cache else "-" for cache in columns.values()
            )
            table.add_row(name, *cells)
    return table


def compaction_json(record: CompactionRecord) -> dict[str, Any]:
    return {
        "turn": record.at_turn,
        "reason": record.reason,
        "tokens_before": record.tokens_before,
        "tokens_after": record.tokens_after,
        "evicted_messages": record.evicted_messages,
        "kept_from_seq": record.kept_from_seq,
        "summarizer": record.summarizer,
        "fallback_reason": record.fallback_reason,
        "offload_path": record.offload_path,
        "summary_usage": usage_json(record.summary_usage),
        "summary_route": None if record.route is None else record.route.model_dump(),
    }


def route_totals(records: Sequence[CompactionRecord]) -> dict[str, Any]:
    """How many summaries took each route and what all of them cost (USD)."""
    routes = [record.route for record in records if record.route is not None]
    return {
        "prefix": sum(1 for route in routes if route.name == "prefix"),
        "range": sum(1 for route in routes if route.name == "range"),
        "cost_usd": round(sum(route.cost_usd or 0.0 for route in routes), 6),
    }


def route_totals_line(totals: dict[str, Any]) -> str:
    how = " (estimated)" if totals.get("estimated") else ""
    return f"prefix {totals['prefix']}, range {totals['range']}: ${totals['cost_usd']:.4f}{how}"


def usage_json(usage: Usage | None) -> dict[str, int] | None:
    """Input (cache reads and writes included) and output tokens, or ``None``."""
    if usage is None:
        return None
    return {"input_tokens": usage.total_input_tokens(), "output_tokens": usage.output_tokens}


def by_reason(records: Iterable[CompactionRecord]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for record in records:
        counts[record.reason] = counts.get(record.reason, 0) + 1
    return counts


WORKER_PREFIX = "worker:"


def summary_sources(records: Iterable[CompactionRecord]) -> dict[str, Any]:
    """Where the summaries came from: the worker, in-process, or a fallback (and why).

    A queue that silently fell back looks like a queue that worked unless this is shown.
    """
    summaries = [record for record in records if record.reason != "truncate"]
    reasons: dict[str, int] = {}
    for record in summaries:
        if record.fallback_reason:
            code = record.fallback_reason.split(":", 1)[0].strip()
            reasons[code] = reasons.get(code, 0) + 1
    return {
        "from_worker": sum(
            1 for r in summaries if r.summarizer.startswith(WORKER_PREFIX) and not r.fallback_reason
        ),
        "in_process": sum(
            1
            for r in summaries
            if not r.summarizer.startswith(WORKER_PREFIX) and not r.fallback_reason
        ),
        "fell_back": sum(1 for r in summaries if r.fallback_reason),
        "fallback_reasons": reasons,
    }


def summary_sources_line(sources: dict[str, Any]) -> str:
    """``3 from the worker, 0 in-process, 1 fell back (queue_deadline 1)``."""
    line = (
        f"{sources['from_worker']} from the worker, {sources['in_process']} in-process, "
        f"{sources['fell_back']} fell back"
    )
    reasons = sources["fallback_reasons"]
    if reasons:
        line += " (" + ", ".join(f"{code} {count}" for code, count in reasons.items()) + ")"
    return line
