"""``hango replay TRANSCRIPT``: what the middleware would have sent for a recorded session.

TRANSCRIPT is a Messages API request JSON ({"system", "tools", "messages"}) or a
Claude Code session JSONL. For every assistant message, the request the agent would
have sent at that point goes through the full middleware chain with the chosen profile;
the recorded message is then fed back as the model's reply. A request over the window is
refused as the API would refuse it (measured with the configured estimator), so the
overflow ladder runs as it would live. --dump-requests writes one line per recorded
assistant message: the JSON body of the request that was answered.

The transcript is validated completely first: a malformed one is refused with the line
or message index, and nothing is written (no database, no history, no dump). Replay uses
a throwaway SQLite database and history directory unless --database-url /
--history-root are given, and never runs the recorded tools. The same transcript and
settings give the same figures on every run: the replayed session's id comes from the
transcript's content, not from chance.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from hango.cli.costs import EstimatedPrefix, EstimatedSummaries, MeteredProvider, run_costs
from hango.cli.output import (
    by_reason,
    cache_table,
    compaction_json,
    compaction_table,
    key_value_table,
    plural,
    print_json,
    route_totals,
    route_totals_line,
    stdout_console,
    summary_sources,
    summary_sources_line,
)
from hango.cli.parsing import non_negative_float, positive_int, summary
from hango.cli.progress import RunStats
from hango.cli.replaying import (
    RecordedReplies,
    ReplayClock,
    ReplayRun,
    TokenFigures,
    replay_transcript,
    transcript_tools,
)
from hango.cli.transcripts import Transcript, load_transcript
from hango.cli.wiring import anthropic_provider, history_file, instrumented, telemetry, with_window
from hango.compaction.extractive import ExtractiveSummarizer
from hango.core.errors import ConfigError
from hango.core.messages import Request
from hango.core.profiles import Profiles
from hango.core.settings import Settings, load_settings
from hango.cost.meter import CacheMeter, cache_json, estimated_sizes, recorded_report
from hango.history.paths import conversation_history_path
from hango.store.buffered import BufferedStore
from hango.store.repository import Store, scratch_sqlite_engine
from hango.tokens import make_estimator
from hango.wiring.agent import Agent, build_agent, open_store

# Time between two model calls of a transcript without timestamps: a tool round of a
# coding agent (an answer streamed, a tool run) takes seconds.
DEFAULT_CALL_SECONDS = 5.0


def add_parser(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "replay",
        help=summary("replay"),
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    parser.add_argument("transcript", type=Path, help="Messages API JSON or Claude Code JSONL")
    parser.add_argument("--model", help="model id whose profile applies (default HANGO_MODEL)")
    parser.add_argument(
        "--max-input-tokens", type=positive_int, help="override the profile's window"
    )
    parser.add_argument(
        "--summarizer",
        choices=("extractive", "anthropic"),
        default="extractive",
        help="who writes the summaries: offline extraction, or the Anthropic API",
    )
    parser.add_argument(
        "--summarizer-latency",
        type=non_negative_float,
        metavar="SECONDS",
        help="seconds each summary takes on the replayed clock (default: as measured)",
    )
    parser.add_argument(
        "--call-seconds",
        type=non_negative_float,
        default=DEFAULT_CALL_SECONDS,
        metavar="SECONDS",
        help="time between two model calls when the transcript records none "
        f"(default {DEFAULT_CALL_SECONDS:g})",
    )
    parser.add_argument(
        "--database-url", help="keep the replayed session (default: throwaway SQLite)"
    )
    parser.add_argument("--history-root", help="keep the offloaded history (default: throwaway)")
    parser.add_argument(
        "--dump-requests", type=Path, metavar="OUT.jsonl", help="one request body per line"
    )
    parser.add_argument(
        "--max-bytes",
        type=positive_int,
        help="refuse a larger transcript (default HANGO_REPLAY_MAX_BYTES, 64 MiB)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print a JSON summary instead of tables"
    )
    # Overflows and summarizer fallbacks are part of the command's own report.
    parser.set_defaults(run=run, log_level=logging.ERROR)


def run(args: argparse.Namespace) -> int:
    limit = args.max_bytes or load_settings().replay_max_bytes
    # Everything is validated before anything is written.
    # Not kept: its messages are parsed again as the replay reaches them.
    transcript = load_transcript(args.transcript, max_bytes=limit, keep=False)
    _check_dump_target(args.dump_requests, args.transcript)
    with tempfile.TemporaryDirectory(prefix="hango-replay-") as scratch:
        settings = replay_settings(args, Path(scratch))
        summarizer_provider = (
            anthropic_provider(settings) if args.summarizer == "anthropic" else None
        )
        with telemetry() as handle, _dump_file(args.dump_requests) as dump:
            estimator = make_estimator(settings.estimator)
            window = Profiles.from_settings(settings).resolve(settings.model).max_input_tokens
            replies = RecordedReplies(window=window, estimator=estimator)
            clock = ReplayClock(transcript, args.call_seconds)
            stats = RunStats()
            chat, summary, observer = instrumented(handle, replies, summarizer_provider or replies)
            _, summary_costs = run_costs(settings)
            prefix_summarizer = (
                None if summarizer_provider else EstimatedPrefix(ExtractiveSummarizer(), estimator)
            )
            agent = build_agent(
                settings,
                store=replay_store(settings, args.database_url),
                provider=chat,
                summarizer_provider=(
                    MeteredProvider(summary, summary_costs) if summarizer_provider else None
                ),
                summarizer=(
                    None
                    if summarizer_provider
                    else EstimatedSummaries(ExtractiveSummarizer(), summary_costs, estimator)
                ),
                observers=(stats, observer),
                extra_tools=transcript_tools(transcript),
                system_prompt=transcript.system,
                clock=clock,
                # The same estimator object as the recorded provider's: the session's
                # outgoing copy keeps running sums for its own estimator only, so another
                # instance made the provider's window check walk every message per call.
                estimator=estimator,
                summary_seconds=args.summarizer_latency,
                **_prefix_route(prefix_summarizer),
            )
            session_id = replay_session_id(args.transcript, agent)
            meter = CacheMeter(agent.profile, estimated_sizes(estimator))

            def on_call(request: Request, answer: int) -> None:
                # The answer's recorded time stands for the request's: the simulated
                # cache then expires entries as the recorded session's pauses would.
                meter.add(request, now=transcript.time_of(answer))
                if dump is not None:
                    _write_line(dump, request.to_api())

            outcome = replay_transcript(
                agent,
                replies,
                transcript,
                session_id=session_id,
                estimator=estimator,
                on_call=on_call,
                clock=clock,
            )
            report = replay_report(args, settings, agent, transcript, session_id, outcome, stats)
            report["cache"] = replay_cache_json(meter, transcript)
            report["summarizer_cost"] = {
                **summary_costs.to_json(),
                "estimated": summarizer_provider is None,
            }
            report["prefix_summary_cost"] = (
                None
                if prefix_summarizer is None
                else prefix_summarizer.calls.to_json(agent.profile.price)
            )
            report["trigger_compactions"] = stats.trigger_compactions_json(
                summary_costs.profile.price
            )
            agent.store.flush()
            agent.store.engine.dispose()
    if args.json:
        print_json(report)
    else:
        _print_tables(report, outcome)
    return 0


def _prefix_route(prefix: EstimatedPrefix | None) -> dict[str, Any]:
    """How replay makes a prefix-route summary: by extraction, priced as the prefix request
    would have been (estimated); with a model summarizer the route is closed, because the
    agent's replies are recorded and cannot answer a summary request."""
    if prefix is not None:
        return {"prefix_summarizer": prefix}
    return {"prefix_closed": "replay: the agent's replies are recorded"}


def replay_cache_json(meter: CacheMeter, transcript: Transcript) -> dict[str, Any]:
    """The simulated cache object, with the transcript's recorded usage beside it.

    ``recorded`` is ``null`` unless the transcript carries the API's usage (a Claude Code
    JSONL does); both are priced at the replayed model's profile, so they compare.
    """
    price = meter.profile.price
    recorded = recorded_report(list(transcript.recorded_usage))
    return {
        **cache_json(meter.report, price),
        "ttl_from_timestamps": any(t is not None for t in transcript.times),
        "recorded": cache_json(recorded, price) if recorded.requests else None,
    }


def replay_session_id(transcript: Path, agent: Agent) -> str:
    """``replay-`` and twelve digits from the transcript's content: the same on every run.

    The id is part of the summary text the requests carry, so a random one would move
    the figures; twelve digits are the same number of tokens whatever they are. A kept
    database that already holds the id gets the next digits of the same chain.
    """
    digest = hashlib.sha256(transcript.read_bytes()).hexdigest()
    while True:
        candidate = f"replay-{int(digest, 16) % 10**12:012d}"
        if agent.store.session(candidate) is None:
            return candidate
        digest = hashlib.sha256(digest.encode()).hexdigest()


def replay_store(settings: Settings, database_url: str | None) -> Store:
    """The store replay writes: the user's (``--database-url``) as any command opens it, or
    a scratch SQLite file whose commits are not synced (it is deleted at the end). The
    scratch file is this process's alone, so its store answers the loop's reads from what
    it wrote and writes a batch of turns per transaction (``BufferedStore``): the loop's
    ~17 statements a turn were about half of a replay's CPU."""
    if database_url:
        return open_store(settings)
    return BufferedStore.fresh(scratch_sqlite_engine(settings.database_url))


def replay_settings(args: argparse.Namespace, scratch: Path) -> Settings:
    flags: dict[str, Any] = {"model": args.model} if args.model else {}
    base = load_settings(**flags)
    overrides: dict[str, Any] = {
        **flags,
        "model_profiles": with_window(base, args.max_input_tokens),
        "redis_url": None,  # replay is in-process: no queue, no worker
        "database_url": args.database_url or f"sqlite:///{scratch / 'replay.db'}",
        "history_root": args.history_root or scratch / "history",
    }
    if not args.database_url:
        overrides["history_backend"] = "local"
    return load_settings(**overrides)


def _check_dump_target(path: Path | None, transcript: Path) -> None:
    """Refuse a dump target that would fail at the end, or overwrite the transcript."""
    if path is None:
        return
    problem = None
    if not path.parent.is_dir():
        problem = f"no directory {str(path.parent)!r}"
    elif path.is_dir():
        problem = f"{str(path)!r} is a directory; name a file"
    elif path.resolve() == transcript.resolve():
        problem = f"{str(path)!r} is the transcript itself"
    elif not os.access(path.parent, os.W_OK):
        problem = f"cannot write in {str(path.parent)!r}"
    if problem is not None:
        raise ConfigError(f"--dump-requests: {problem}", variable="--dump-requests")


@contextlib.contextmanager
def _dump_file(path: Path | None) -> Iterator[IO[str] | None]:
    """The dump, written beside its target and moved in place only when the replay succeeds."""
    if path is None:
        yield None
        return
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(temporary, 0o666 & ~umask)  # an ordinary file, not mkstemp's private 0600
    try:
        with open(descriptor, "w", encoding="utf-8") as handle:
            yield handle
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def _write_line(dump: IO[str], body: dict[str, Any]) -> None:
    dump.write(json.dumps(body, ensure_ascii=False) + "\n")


def replay_report(
    args: argparse.Namespace,
    settings: Settings,
    agent: Agent,
    transcript: Transcript,
    session_id: str,
    outcome: ReplayRun,
    stats: RunStats,
) -> dict[str, Any]:
    """The machine-readable summary ``--json`` prints (and the tables show)."""
    virtual = conversation_history_path(session_id)
    kept = bool(args.history_root) and agent.history.exists(virtual)
    return {
        "transcript": str(args.transcript),
        "format": transcript.format,
        "messages": transcript.count,
        "turns": outcome.turns,
        "model": settings.model,
        "max_input_tokens": agent.profile.max_input_tokens,
        "trigger_tokens": agent.profile.trigger_tokens,
        "summarizer": args.summarizer,
        "session_id": session_id if args.database_url else None,
        "calls": outcome.calls,
        "compactions": len(outcome.compactions),
        "compactions_by_reason": by_reason(outcome.compactions),
        "compaction_records": [compaction_json(record) for record in outcome.compactions],
        "summaries": summary_sources(outcome.compactions),
        "summary_routes": {
            **route_totals(outcome.compactions),
            "estimated": args.summarizer == "extractive",
        },
        "trigger_wait_ms": stats.trigger_wait_ms(),
        "presummary_hit_rate": stats.presummary_hit_rate(),
        "presummary_ready_rate": stats.presummary_ready_rate(),
        "pacing": {
            "from_timestamps": any(t is not None for t in transcript.times),
            "call_seconds": args.call_seconds,
            "summarizer_latency": args.summarizer_latency,
        },
        "truncated_tool_args": stats.truncated_args,
        "invalid_requests_blocked": stats.invalid_blocked,
        "overflow_retries": stats.overflow_retries,
        "tokens_sent": _max_and_mean(outcome.sent, outcome.calls),
        "tokens_raw": _max_and_mean(outcome.raw, outcome.calls),
        "estimator": settings.estimator,
        "dump_requests": str(args.dump_requests) if args.dump_requests else None,
        "history_file": history_file(agent.history, virtual) if kept else None,
    }


def _max_and_mean(figures: TokenFigures, calls: int) -> dict[str, int]:
    return {"max": figures.largest, "mean": round(figures.total / calls) if calls else 0}


def _print_tables(report: dict[str, Any], outcome: ReplayRun) -> None:
    console = stdout_console()
    console.print(
        f"[bold]Replayed {plural(report['calls'], 'model call')}[/bold] of "
        f"{report['transcript']} ({report['format']}, {plural(report['messages'], 'message')}, "
        f"{plural(report['turns'], 'turn')}) with "
        f"{report['model']}: window {report['max_input_tokens']:,}, "
        f"trigger {report['trigger_tokens']:,} tokens"
    )
    if outcome.compactions:
        console.print(compaction_table(outcome.compactions))
    sent, raw = report["tokens_sent"], report["tokens_raw"]
    cache = report["cache"]
    columns = {"simulated": cache}
    if cache["recorded"] is not None:
        columns["recorded"] = cache["recorded"]
    console.print(cache_table(f"Prompt cache and input cost ({report['model']} prices)", columns))
    console.print(
        key_value_table(
            "Requests",
            [
                ("model calls", report["calls"]),
                (
                    "compactions",
                    ", ".join(f"{k} {v}" for k, v in report["compactions_by_reason"].items())
                    or "0",
                ),
                ("summaries", summary_sources_line(report["summaries"])),
                ("summary routes", route_totals_line(report["summary_routes"])),
                ("waited for summaries at the trigger", _waits(report["trigger_wait_ms"])),
                ("pre-summaries installed at the trigger", _rate(report["presummary_hit_rate"])),
                ("pre-summaries ready at the trigger", _rate(report["presummary_ready_rate"])),
                ("pacing", _pacing(report["pacing"])),
                ("truncated tool arguments", report["truncated_tool_args"]),
                ("invalid requests blocked", report["invalid_requests_blocked"]),
                (
                    f"max tokens sent vs raw ({report['estimator']})",
                    f"{sent['max']:,} vs {raw['max']:,}",
                ),
                (
                    f"mean tokens sent vs raw ({report['estimator']})",
                    f"{sent['mean']:,} vs {raw['mean']:,}",
                ),
                ("requests dumped to", report["dump_requests"] or "-"),
                ("history file", report["history_file"] or "-"),
            ],
        )
    )


def _waits(waits: dict[str, float | None]) -> str:
    if waits["p50"] is None:
        return "-"
    return f"p50 {waits['p50']:,.0f} ms, p95 {waits['p95']:,.0f} ms"


def _pacing(pacing: dict[str, Any]) -> str:
    calls = "recorded timestamps" if pacing["from_timestamps"] else f"{pacing['call_seconds']:g} s"
    latency = pacing["summarizer_latency"]
    summaries = "as measured" if latency is None else f"{latency:g} s each"
    return f"calls {calls}, summaries {summaries}"


def _rate(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:.0%}"
