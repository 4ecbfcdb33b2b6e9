"""``hango simulate``: a long scripted coding session through the real loop, offline.

The scripted user and model drive the real agent loop and middleware on a small window,
so truncation and several compactions happen within a minute; the summaries go through
the same provider path as in a deployment. Everything else is the configured stack: the
embedded default (SQLite and a history directory in HANGO_HOME, in-process summarizer)
unless flags or HANGO_* variables say otherwise. The same seed and settings give the same
figures on every run, in a fresh or a reused location.
"""

from __future__ import annotations

import argparse
import logging
import math
import time
from statistics import mean
from typing import Any

from hango.cli.costs import AnsweredCalls, MeteredPrefix, MeteredProvider, PrefixCalls, run_costs
from hango.cli.errors import hango_command, store_flags
from hango.cli.output import (
    by_reason,
    cache_table,
    compaction_json,
    compaction_table,
    key_value_table,
    plural,
    print_json,
    redact_url,
    route_totals,
    route_totals_line,
    stdout_console,
    summary_sources,
    summary_sources_line,
)
from hango.cli.parsing import add_store_options, positive_int, summary
from hango.cli.progress import LiveProgress, RunStats
from hango.cli.replaying import settle_presummaries
from hango.cli.wiring import (
    anthropic_provider,
    history_file,
    instrumented,
    require_worker,
    telemetry,
    with_window,
)
from hango.core.errors import ConfigError
from hango.core.messages import Request
from hango.core.settings import Settings, load_settings
from hango.middleware.observer import NullObserver
from hango.middleware.summary_route import ProviderPrefix
from hango.providers.base import Provider
from hango.simulate.runner import Simulation, SimulationOutcome, build_simulation, scripted_model

DEFAULT_TURNS = 24
DEFAULT_SEED = 7
# Small enough that truncation and several compactions happen in well under a minute.
DEFAULT_WINDOW = 16_000


def add_parser(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "simulate",
        help=summary("simulate"),
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    parser.add_argument(
        "--turns", type=positive_int, default=DEFAULT_TURNS, help="user turns to play"
    )
    parser.add_argument(
        "--seed", type=int, default=DEFAULT_SEED, help="seed of the scripted user and model"
    )
    parser.add_argument(
        "--max-input-tokens",
        type=positive_int,
        default=DEFAULT_WINDOW,
        help="the model's window for this run",
    )
    parser.add_argument("--model", help="model id (default: HANGO_MODEL)")
    parser.add_argument("--session", help="session id (default: a new sim-SEED-NNNNNNNN)")
    parser.add_argument(
        "--provider",
        choices=("scripted", "anthropic"),
        default="scripted",
        help="who answers: the offline scripted model, or the Anthropic API",
    )
    add_store_options(parser, history=True, migrate=True)
    parser.add_argument(
        "--queue",
        action="store_true",
        help="summaries and offloads through Celery (HANGO_REDIS_URL)",
    )
    parser.add_argument(
        "--summarizer-latency",
        metavar="SECONDS",
        help="seconds each scripted summary takes, in-process (default "
        "HANGO_SIMULATED_SUMMARIZER_LATENCY, 0); give a worker the same variable",
    )
    parser.add_argument(
        "--model-latency",
        metavar="SECONDS",
        help="seconds each of the scripted agent's own calls takes (default 0: at once); "
        "gives a pre-summary time to be ready by the trigger",
    )
    parser.add_argument(
        "--json", action="store_true", help="print a JSON summary instead of tables"
    )
    # Overflows and summarizer fallbacks are part of the command's own report.
    parser.set_defaults(run=run, log_level=logging.ERROR)


def _seconds(text: str | None, flag: str) -> float | None:
    """A flag's seconds (finite, >= 0), or a one-line error naming the flag."""
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise ConfigError(f"{flag} must be a number of seconds >= 0, not {text!r}", variable=flag)
    return value


def simulation_settings(args: argparse.Namespace) -> Settings:
    flags = {
        "model": args.model,
        "database_url": args.database_url,
        "history_root": args.history_root,
        "simulated_summarizer_latency": _seconds(args.summarizer_latency, "--summarizer-latency"),
        "auto_migrate": True if args.migrate else None,
    }
    base = load_settings(**{key: value for key, value in flags.items() if value is not None})
    overrides: dict[str, Any] = {
        **{key: value for key, value in flags.items() if value is not None},
        "model_profiles": with_window(base, args.max_input_tokens),
    }
    if not args.queue:
        overrides["redis_url"] = None  # the embedded default: no services, even if Redis is set
    return load_settings(**overrides)


def run(args: argparse.Namespace) -> int:
    settings = simulation_settings(args)
    if args.queue:
        require_worker(settings)
    model_latency = _seconds(args.model_latency, "--model-latency") or 0.0
    model = (
        scripted_model(settings, args.seed, model_latency=model_latency)
        if args.provider == "scripted"
        else None
    )
    provider: Provider = model if model is not None else anthropic_provider(settings)
    stats = RunStats()
    progress = LiveProgress(stats, turns=args.turns, window=args.max_input_tokens)
    clock = CallClock(model_latency)
    agent_costs, summary_costs = run_costs(settings)
    prefix_calls = PrefixCalls()
    with telemetry(instrument_celery=args.queue) as handle:
        chat, summary, observer = instrumented(handle, provider, provider)
        simulation = build_simulation(
            settings,
            seed=args.seed,
            provider=chat,
            summarizer_provider=MeteredProvider(summary, summary_costs),
            session_id=args.session,
            observers=(stats, progress, observer, AnsweredCalls(agent_costs), clock),
            model=model,
            pacing={
                **(simulated_pacing(args, settings, clock) or {}),
                # Every prefix-route call summed (the queued path has none).
                "prefix_summarizer": MeteredPrefix(
                    ProviderPrefix(summary, settings.summarizer_timeout), prefix_calls
                ),
            },
        )
        started = time.monotonic()
        with progress:
            outcome = simulation.run(args.turns, progress.turn_done)
            settle_presummaries(simulation.agent.loop)
        elapsed = time.monotonic() - started
        simulation.agent.store.engine.dispose()
    report = simulation_report(args, settings, simulation, outcome, stats, elapsed)
    report["cache"] = agent_costs.to_json()
    report["summarizer_cost"] = summary_costs.to_json()
    report["prefix_summary_cost"] = prefix_calls.to_json(agent_costs.profile.price)
    report["trigger_compactions"] = stats.trigger_compactions_json(summary_costs.profile.price)
    if args.json:
        print_json(report)
    else:
        _print_tables(args, report, outcome)
    return 0


class CallClock(NullObserver):
    """The scripted session's clock: it moves only as each model call takes ``model_latency``
    on it, so a seeded run paces its pre-summaries the same way every time."""

    def __init__(self, model_latency: float) -> None:
        self.now = 0.0
        self.model_latency = model_latency

    def __call__(self) -> float:
        return self.now

    def request_sent(self, session_id: str, turn: int, request: Request, input_tokens: int) -> None:
        self.now += self.model_latency


def simulated_pacing(
    args: argparse.Namespace, settings: Settings, clock: CallClock
) -> dict[str, Any] | None:
    """Pre-summaries paced on the scripted clock (calls at ``--model-latency``, summaries
    at ``--summarizer-latency``), so a seeded run decides the same way on any machine;
    the worker's real clock with ``--queue`` or a real model."""
    if args.queue or args.provider != "scripted":
        return None
    return {"clock": clock, "summary_seconds": settings.simulated_summarizer_latency}


def simulation_report(
    args: argparse.Namespace,
    settings: Settings,
    simulation: Simulation,
    outcome: SimulationOutcome,
    stats: RunStats,
    elapsed: float,
) -> dict[str, Any]:
    """The machine-readable summary ``--json`` prints (and the tables show)."""
    sent = stats.sent_tokens
    return {
        "session_id": outcome.session_id,
        "provider": args.provider,
        "model": settings.model,
        "seed": args.seed,
        "turns": len(outcome.turns),
        "max_input_tokens": args.max_input_tokens,
        "database_url": redact_url(settings.database_url),
        "queue": bool(args.queue),
        "model_calls": outcome.model_calls,
        "tool_calls": outcome.tool_calls,
        "summary_calls": simulation.model.summary_calls if simulation.model else None,
        "stored_messages": outcome.stored_messages,
        "compactions": [compaction_json(record) for record in outcome.compactions],
        "compactions_by_reason": by_reason(outcome.compactions),
        "summaries": summary_sources(outcome.compactions),
        "summary_routes": route_totals(outcome.compactions),
        "trigger_wait_ms": stats.trigger_wait_ms(),
        "presummary_hit_rate": stats.presummary_hit_rate(),
        "presummary_ready_rate": stats.presummary_ready_rate(),
        "truncated_tool_args": stats.truncated_args,
        "overflow_retries": stats.overflow_retries,
        "invalid_requests_blocked": stats.invalid_blocked,
        "breakpoints_last_request": stats.breakpoints,
        "input_tokens_sent": {
            "max": max(sent, default=0),
            "mean": round(mean(sent)) if sent else 0,
        },
        "session_counters": {
            "last_input_tokens": outcome.session.last_input_tokens,
            "compactions": outcome.session.compactions,
        },
        "history_file": (
            history_file(simulation.history, outcome.history_path)
            if outcome.history_written
            else None
        ),
        "elapsed_seconds": round(elapsed, 2),
    }


def _print_tables(
    args: argparse.Namespace, report: dict[str, Any], outcome: SimulationOutcome
) -> None:
    console = stdout_console()
    console.print(
        f"[bold]Simulated {plural(report['turns'], 'turn')}[/bold] "
        f"of session {report['session_id']} "
        f"({report['provider']} model {report['model']}, seed {report['seed']}, window "
        f"{report['max_input_tokens']:,} tokens) in {report['elapsed_seconds']:.1f}s"
    )
    if outcome.compactions:
        console.print(compaction_table(outcome.compactions))
    else:
        console.print("No compaction happened: raise --turns or lower --max-input-tokens.")
    counters = report["session_counters"]
    console.print(
        key_value_table(
            "Session",
            [
                ("last input tokens (counter)", counters["last_input_tokens"]),
                ("compactions (counter)", counters["compactions"]),
                ("stored messages (never rewritten)", report["stored_messages"]),
                ("model calls", report["model_calls"]),
                ("tool calls", report["tool_calls"]),
                (
                    "summarizer calls",
                    report["summary_calls"] if report["summary_calls"] is not None else "-",
                ),
                ("summaries", summary_sources_line(report["summaries"])),
                ("summary routes", route_totals_line(report["summary_routes"])),
                ("waited for summaries at the trigger", _waits(report["trigger_wait_ms"])),
                ("pre-summaries installed at the trigger", _rate(report["presummary_hit_rate"])),
                ("pre-summaries ready at the trigger", _rate(report["presummary_ready_rate"])),
                ("truncated tool arguments", report["truncated_tool_args"]),
                ("overflow retries", report["overflow_retries"]),
                ("invalid requests blocked", report["invalid_requests_blocked"]),
                ("max input tokens sent", report["input_tokens_sent"]["max"]),
                ("cache breakpoints (last request)", report["breakpoints_last_request"]),
            ],
        )
    )
    console.print(
        cache_table(
            "Prompt cache and cost (simulated cache; each model at its own price)",
            {
                f"agent ({report['cache']['model']})": report["cache"],
                f"summarizer ({report['summarizer_cost']['model']})": report["summarizer_cost"],
            },
        )
    )
    console.print(f"History file: {report['history_file'] or '(none yet: nothing was evicted)'}")
    flags = store_flags(args, history=True)
    hango = hango_command()  # runs as printed in a shell without this venv activated
    console.print(f"Inspect it: {hango} sessions show {report['session_id']}{flags}")
    if report["history_file"]:
        console.print(f"Read its offloaded history: {hango} history {report['session_id']}{flags}")


def _waits(waits: dict[str, float | None]) -> str:
    if waits["p50"] is None:
        return "-"
    return f"p50 {waits['p50']:,.0f} ms, p95 {waits['p95']:,.0f} ms"


def _rate(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:.0%}"
