"""What a run did, as the loop reports it, and the live view of it.

``RunStats`` is a loop observer that only counts (calls, tokens sent, compactions,
truncated arguments, blocked requests, overflow retries, cache breakpoints); the
commands build their summaries from it. ``LiveProgress`` shows it while the run goes: a
rich live line when stderr is a terminal, one plain line per turn otherwise (CI logs).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from types import TracebackType

from rich.live import Live
from rich.text import Text

from hango.agent.loop import TurnResult
from hango.cli.output import by_reason, is_quiet, plain_requested, stderr_console
from hango.compaction.record import CompactionRecord
from hango.compaction.validate import count_breakpoints
from hango.core.messages import Request, Response
from hango.core.price import Price
from hango.middleware.observer import NullObserver

# A pre-summary installed after waiting less than this was ready (the wait is the lock
# and the future's hand-over, not the summary).
READY_WITHIN = 0.001


@dataclass
class RunStats(NullObserver):
    """Counts what the loop reports; never raises."""

    model_calls: int = 0
    sent_tokens: list[int] = field(default_factory=list)  # of the requests that were answered
    refused_tokens: list[int] = field(default_factory=list)  # of the requests refused as too long
    compactions: list[CompactionRecord] = field(default_factory=list)
    truncated_args: int = 0
    invalid_blocked: int = 0
    overflow_retries: int = 0
    breakpoints: int = 0
    trigger_waits: list[float] = field(default_factory=list)  # seconds, one per compaction
    presummary_hits: int = 0  # compactions at the trigger that installed a pre-summary
    # Per compaction at the trigger, in order: (turn, installed a pre-summary, seconds waited).
    trigger_compactions: list[tuple[int, bool, float]] = field(default_factory=list)
    current_turn: int = 0
    _pending: int = 0

    def request_sent(self, session_id: str, turn: int, request: Request, input_tokens: int) -> None:
        self.model_calls += 1
        self.current_turn = turn
        self._pending = input_tokens
        self.breakpoints = count_breakpoints(request)

    def response_received(self, session_id: str, turn: int, response: Response) -> None:
        # The provider's own usage is the truth; the pipeline's figure when it reports none.
        reported = response.usage.total_input_tokens()
        self.sent_tokens.append(reported if reported > 0 else self._pending)

    def compacted(self, session_id: str, record: CompactionRecord) -> None:
        self.compactions.append(record)

    def overflow_retry(self, session_id: str, turn: int, rung: str) -> None:
        # The request just sent was refused as too long: it does not count as sent.
        self.overflow_retries += 1
        self.refused_tokens.append(self._pending)

    def tool_args_truncated(self, session_id: str, turn: int, count: int) -> None:
        self.truncated_args += count

    def invalid_request_blocked(self, session_id: str, turn: int, violations: list[str]) -> None:
        self.invalid_blocked += 1

    def summary_waited(
        self, session_id: str, turn: int, seconds: float, *, presummarized: bool = False
    ) -> None:
        self.trigger_waits.append(seconds)
        self.presummary_hits += presummarized
        self.trigger_compactions.append((turn, presummarized, seconds))

    def presummary_hit_rate(self) -> float | None:
        """Share of the compactions at the trigger that installed a pre-summary (0-1)."""
        if not self.trigger_waits:
            return None
        return round(self.presummary_hits / len(self.trigger_waits), 3)

    def presummary_ready_rate(self) -> float | None:
        """Share of the compactions at the trigger whose pre-summary was ready (no wait)."""
        if not self.trigger_compactions:
            return None
        ready = sum(
            1
            for _, installed, waited in self.trigger_compactions
            if installed and waited < READY_WITHIN
        )
        return round(ready / len(self.trigger_compactions), 3)

    def trigger_compactions_json(self, price: Price | None = None) -> list[dict[str, object]]:
        """Per compaction at the trigger: its turn, whether a pre-summary was installed and
        ready, the wait (ms), who made the summary and what its calls cost at ``price``
        (the summarizer model's; the whole chain of an extended pre-summary, none of the
        pre-summaries that were not used)."""
        records = {r.at_turn: r for r in self.compactions if r.reason == "threshold"}
        return [
            {
                "turn": turn,
                "presummary": installed,
                "ready": installed and waited < READY_WITHIN,
                "wait_ms": round(1000 * waited, 1),
                **_summary_json(records.get(turn), price),
            }
            for turn, installed, waited in self.trigger_compactions
        ]

    def trigger_wait_ms(self) -> dict[str, float | None]:
        """p50 and p95 of what compactions at the trigger held their turn (ms)."""
        waits = sorted(1000 * seconds for seconds in self.trigger_waits)
        if not waits:
            return {"p50": None, "p95": None}
        return {
            "p50": round(_nearest_rank(waits, 50), 1),
            "p95": round(_nearest_rank(waits, 95), 1),
        }

    @property
    def last_sent(self) -> int:
        return self.sent_tokens[-1] if self.sent_tokens else 0


def _summary_json(record: CompactionRecord | None, price: Price | None) -> dict[str, object]:
    usage = None if record is None else record.summary_usage
    cost = None
    if record is not None and record.route is not None and record.route.cost_usd is not None:
        # Priced when made, each call at its route's model (cache reads on the prefix route).
        cost = round(record.route.cost_usd, 6)
    elif usage is not None and price is not None:
        # Summary requests carry no cache breakpoint: every input token at the base price.
        spent = price.input_cost(0, 0, usage.total_input_tokens())
        cost = round(spent + price.output_cost(usage.output_tokens), 6)
    return {
        "summarizer": None if record is None else record.summarizer,
        "summary_route": None if record is None or record.route is None else record.route.name,
        "summary_cost_usd": cost,
    }


class LiveProgress(NullObserver):
    """Shows ``stats`` while a run goes; use as a context manager around the run."""

    def __init__(
        self, stats: RunStats, *, turns: int, window: int, live: bool | None = None
    ) -> None:
        self.stats = stats
        self.turns = turns
        self.window = window
        # NO_COLOR: no escape at all, and a live line is drawn with cursor escapes.
        self.live = (sys.stderr.isatty() and not plain_requested()) if live is None else live
        self._display: Live | None = None

    def __enter__(self) -> LiveProgress:
        if self.live and not is_quiet():
            self._display = Live(self._line(), console=stderr_console(), auto_refresh=False)
            self._display.__enter__()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._display is not None:
            self._display.__exit__(kind, error, trace)
            self._display = None

    # Observer hooks: refresh the live line as the turn goes.
    def request_sent(self, session_id: str, turn: int, request: Request, input_tokens: int) -> None:
        self._refresh()

    def response_received(self, session_id: str, turn: int, response: Response) -> None:
        self._refresh()

    def compacted(self, session_id: str, record: CompactionRecord) -> None:
        self._refresh()

    def turn_done(self, number: int, result: TurnResult) -> None:
        """Called after each turn: the live line, or one plain line."""
        if self._display is not None:
            self._refresh()
            return
        if is_quiet():
            return
        sys.stderr.write(self.plain_line(number, result) + "\n")
        sys.stderr.flush()

    def plain_line(self, number: int, result: TurnResult) -> str:
        parts = [
            f"turn {number}/{self.turns}: input {result.input_tokens:,}/{self.window:,} tokens",
            f"{result.model_calls} calls, {result.tool_calls} tools",
            f"truncated args {self.stats.truncated_args}",
            f"breakpoints {self.stats.breakpoints}",
        ]
        parts += [
            f"compaction {c.reason} {c.tokens_before:,}→{c.tokens_after:,} "
            f"({c.evicted_messages} evicted)"
            for c in result.compactions
        ]
        return ", ".join(parts)

    def _refresh(self) -> None:
        if self._display is not None:
            self._display.update(self._line(), refresh=True)

    def _line(self) -> Text:
        stats = self.stats
        used = stats.last_sent
        filled = min(20, used * 20 // max(1, self.window))
        reasons = ", ".join(f"{k} {v}" for k, v in by_reason(stats.compactions).items())
        line = Text()
        line.append(f"turn {stats.current_turn}/{self.turns}  ", style="bold")
        line.append(f"input {used:,} / {self.window:,} ")
        line.append("█" * filled, style="green" if filled < 17 else "yellow")
        line.append("░" * (20 - filled), style="dim")
        line.append(f"  calls {stats.model_calls}  truncated args {stats.truncated_args}")
        line.append(f"  compactions {len(stats.compactions)}")
        line.append(f" ({reasons})" if reasons else "")
        line.append(f"  breakpoints {stats.breakpoints}")
        return line


def _nearest_rank(ordered: list[float], percentile: int) -> float:
    """The nearest-rank percentile of an ordered, non-empty list."""
    index = max(0, -(-percentile * len(ordered) // 100) - 1)
    return ordered[index]
