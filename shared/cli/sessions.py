"""``hango sessions list|show``, ``hango history`` and ``hango migrate``: the stored state.

These commands only read (``migrate`` only upgrades the schema). A SQLite database that
does not exist yet is reported as empty instead of being created by a read. The defaults
are the ones every command uses (in HANGO_HOME), so they find the same state from any
directory; a history file that the session's compaction records name but the history
does not hold is an error that says where it looked, never "nothing evicted".
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from hango.agent.loop import TurnResult, summarizer_usage
from hango.cli.output import (
    compaction_json,
    compaction_table,
    key_value_table,
    notice,
    plural,
    print_json,
    redact_url,
    stdout_console,
    usage_json,
)
from hango.cli.parsing import add_store_options, summary
from hango.cli.retention import add_actions
from hango.cli.wiring import (
    anthropic_provider,
    existing_store,
    history_file,
    instrumented,
    settings_with,
    store_settings,
    telemetry,
)
from hango.compaction.record import CompactionRecord
from hango.core.errors import MissingHistoryError, UnknownSessionError
from hango.core.ids import validate_session_id
from hango.core.settings import Settings
from hango.cost.meter import UsageTotals, totals_json
from hango.history.base import HistoryBackend
from hango.history.paths import conversation_history_path
from hango.store import Store
from hango.wiring.agent import build_agent
from hango.wiring.history import history_from_settings


def add_parsers(commands: Any) -> None:
    sessions = commands.add_parser("sessions", help=summary("sessions"))
    actions = sessions.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="every session with its counters")
    add_store_options(listing)
    _json_flag(listing)
    listing.set_defaults(run=run_list)
    show = actions.add_parser("show", help="a session's counters and compaction records")
    show.add_argument("session", help="the session id (`hango sessions list` shows them)")
    add_store_options(show, history=True)
    _json_flag(show)
    show.set_defaults(run=run_show)

    resume = actions.add_parser(
        "resume",
        help="finish the turn a crashed process left unfinished (Anthropic API; reuses a "
        "summary the worker already committed)",
    )
    resume.add_argument("session", help="the session id (`hango sessions list` shows them)")
    resume.add_argument("--model", help="model id (default HANGO_MODEL)")
    add_store_options(resume, history=True)
    _json_flag(resume)
    resume.set_defaults(run=run_resume)

    history = commands.add_parser("history", help=summary("history"))
    history.add_argument("session", help="the session id (`hango sessions list` shows them)")
    add_store_options(history, history=True)
    history.set_defaults(run=run_history)
    add_actions(actions)  # delete, prune

    migrate = commands.add_parser("migrate", help=summary("migrate"))
    add_store_options(migrate)
    migrate.set_defaults(run=run_migrate)


def _json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")


def _settings(args: argparse.Namespace) -> Settings:
    return store_settings(args)


def run_list(args: argparse.Namespace) -> int:
    settings = _settings(args)
    store = existing_store(settings)
    found = store.sessions() if store is not None else []
    if args.json:
        print_json(
            [_session_json(s.id, s.model, s.last_input_tokens, s.compactions) for s in found]
        )
        return 0
    if not found:
        notice(f"no sessions in {redact_url(settings.database_url)}")
        return 0
    rows = [
        (
            s.id,
            f"{s.model}, created {s.created_at:%Y-%m-%d %H:%M}, last input "
            f"{plural(s.last_input_tokens, 'token')}, {plural(s.compactions, 'compaction')}",
        )
        for s in found
    ]
    stdout_console().print(
        key_value_table(f"Sessions in {redact_url(settings.database_url)}", rows)
    )
    return 0


def _session_json(
    session_id: str, model: str, last_input_tokens: int, compactions: int
) -> dict[str, Any]:
    return {
        "id": session_id,
        "model": model,
        "last_input_tokens": last_input_tokens,
        "compactions": compactions,
    }


def run_show(args: argparse.Namespace) -> int:
    settings = _settings(args)
    session_id = validate_session_id(args.session)
    store = existing_store(settings)
    info = store.session(session_id) if store is not None else None
    if store is None or info is None:
        raise UnknownSessionError(session_id, database=redact_url(settings.database_url))
    runs = store.runs(session_id)
    records = [record for run in runs for record in run.state.compactions]
    history = history_from_settings(settings, engine=store.engine)
    virtual = conversation_history_path(session_id)
    shown_path = history_file(history, virtual) if history.exists(virtual) else None
    missing = _missing_history(history, records)
    corrections = store.latest_state(session_id).token_corrections
    report = {
        **_session_json(info.id, info.model, info.last_input_tokens, info.compactions),
        "created_at": info.created_at.isoformat(),
        "turns": len(runs),
        "failed_turns": sum(1 for run in runs if run.status == "failed"),
        "stored_messages": len(store.messages(session_id)),
        "compaction_records": [compaction_json(record) for record in records],
        "summarizer_usage": usage_json(summarizer_usage(records)),
        "history_file": shown_path,
        "usage": totals_json(info.usage),
        "token_corrections": {model: round(value, 4) for model, value in corrections.items()},
    }
    if args.json:
        print_json(report)
        return 0
    console = stdout_console()
    console.print(
        key_value_table(
            f"Session {info.id}",
            [
                ("model", info.model),
                ("created", f"{info.created_at:%Y-%m-%d %H:%M:%S %Z}"),
                ("turns (failed)", f"{report['turns']} ({report['failed_turns']})"),
                ("stored messages", report["stored_messages"]),
                ("last input tokens (counter)", info.last_input_tokens),
                ("compactions (counter)", info.compactions),
                ("summarizer tokens in / out", _usage_text(report["summarizer_usage"])),
                *usage_rows(info.usage),
                ("token correction (real / estimated)", _corrections_text(corrections)),
                ("history file", shown_path or _no_history_file(missing)),
            ],
        )
    )
    if records:
        console.print(compaction_table(records, title="Compaction records (run state)"))
    _fail_if_missing(session_id, settings, history, missing)
    return 0


def _usage_text(usage: dict[str, int] | None) -> str:
    if usage is None:
        return "(no model summary)"
    return f"{usage['input_tokens']:,} / {usage['output_tokens']:,}"


def _corrections_text(corrections: dict[str, float]) -> str:
    """The per-model factor the token figure learned from real usage (the run state's)."""
    if not corrections:
        return "- (no usage reported yet)"
    return ", ".join(f"{model} x{value:.3f}" for model, value in sorted(corrections.items()))


def usage_rows(usage: UsageTotals) -> list[tuple[str, str]]:
    """The session's real usage as the provider reported it: cache read ratio and cost."""
    ratio = usage.read_ratio
    if ratio is None:
        return [("cache read ratio (real usage)", "- (no usage reported yet)")]
    return [
        (
            "cache read ratio (real usage)",
            f"{ratio:.3f} (read {usage.read_tokens:,}, written {usage.write_tokens:,}, "
            f"uncached {usage.uncached_tokens:,} tokens)",
        ),
        ("input cost (real usage)", f"${usage.input_cost_usd:.4f}"),
        ("output tokens (real usage)", f"{usage.output_tokens:,}"),
    ]


def _missing_history(history: HistoryBackend, records: list[CompactionRecord]) -> list[str]:
    """The offload paths the records name that the history backend does not hold."""
    named = dict.fromkeys(record.offload_path for record in records if record.offload_path)
    return [path for path in named if not history.exists(path)]


def _no_history_file(missing: list[str]) -> str:
    return "(missing: see the error below)" if missing else "(none: nothing evicted yet)"


def _fail_if_missing(
    session_id: str, settings: Settings, history: HistoryBackend, missing: list[str]
) -> None:
    if not missing:
        return
    raise MissingHistoryError(
        f"session {session_id}'s compaction records offloaded to {missing[0]}, but "
        f"{_where(settings, history, missing[0])} does not hold it (written with another "
        "--history-root / HANGO_HISTORY_ROOT or HANGO_HISTORY_BACKEND?)",
        session_id=session_id,
        path=missing[0],
    )


def _where(settings: Settings, history: HistoryBackend, virtual: str) -> str:
    if settings.history_backend == "postgres":
        return f"the history table of {redact_url(settings.database_url)}"
    return history_file(history, virtual)


def run_history(args: argparse.Namespace) -> int:
    settings = _settings(args)
    session_id = validate_session_id(args.session)
    store = existing_store(settings)
    history = history_from_settings(settings, engine=store.engine if store else None)
    try:
        text = history.read(conversation_history_path(session_id))
    except FileNotFoundError:
        if store is None or store.session(session_id) is None:
            where = redact_url(settings.database_url)
            raise UnknownSessionError(session_id, database=where) from None
        records = [r for run in store.runs(session_id) for r in run.state.compactions]
        _fail_if_missing(session_id, settings, history, _missing_history(history, records))
        notice(f"session {session_id} has no offloaded history yet (nothing was evicted)")
        return 0
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0


def run_migrate(args: argparse.Namespace) -> int:
    settings = _settings(args)
    before, after = Store.from_url(
        settings.database_url, create_directory=settings.database_in_home
    ).migrate()
    where = redact_url(settings.database_url)
    if before == after:
        notice(f"database {where} was already at the latest schema revision ({after})")
    else:
        notice(f"database {where}: applied revisions {before or 'none'} → {after}")
    return 0


def run_resume(args: argparse.Namespace) -> int:
    """Finish the session's unfinished turn through the configured stack; say what happened.

    The turn keeps its number and run state, so its queue jobs keep their keys: a summary
    the dead process dispatched and a worker committed is taken from Redis, not paid again.
    """
    settings = settings_with(
        model=args.model,
        database_url=args.database_url,
        history_root=getattr(args, "history_root", None),
    )
    session_id = validate_session_id(args.session)
    store = existing_store(settings)
    if store is None or store.session(session_id) is None:
        raise UnknownSessionError(session_id, database=redact_url(settings.database_url))
    latest = store.latest_run(session_id)
    if latest is None or latest.status != "running":
        # Said before any key is asked for: there is nothing to send to the model.
        store.engine.dispose()
        return _resume_report(args, session_id, None)
    provider = anthropic_provider(settings)
    with telemetry(instrument_celery=bool(settings.redis_url)) as handle:
        chat, summarizer, observer = instrumented(handle, provider, provider)
        agent = build_agent(
            settings,
            provider=chat,
            summarizer_provider=summarizer,
            observers=(observer,),
            store=store,
        )
        result = agent.loop.resume(session_id)
        store.engine.dispose()
    return _resume_report(args, session_id, result)


def _resume_report(args: argparse.Namespace, session_id: str, result: TurnResult | None) -> int:
    report = {
        "session_id": session_id,
        "resumed_turn": result.turn if result else None,
        "model_calls": result.model_calls if result else 0,
    }
    if args.json:
        print_json(report)
    elif result is None:
        stdout_console().print(f"session {session_id}: no unfinished turn to resume")
    else:
        stdout_console().print(
            f"session {session_id}: resumed and finished turn {result.turn} "
            f"({result.model_calls} model calls)"
        )
    return 0
