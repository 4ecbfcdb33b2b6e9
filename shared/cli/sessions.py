"""``hango sessions list|show``, ``hango history`` and ``hango migrate``: the stored state.

These commands only read (``migrate`` only upgrades the schema). A SQLite database that
does not exist yet is reported as empty instead of being created by a read.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from shared.cli.output import (
    compaction_json,
    compaction_table,
    key_value_table,
    notice,
    print_json,
    redact_url,
    stdout_console,
)
from shared.cli.wiring import history_file, settings_with
from shared.core.errors import UnknownSessionError
from shared.core.ids import validate_session_id
from shared.core.settings import Settings
from shared.history.paths import conversation_history_path
from shared.store import Store
from shared.wiring.history import history_from_settings


def add_parsers(commands: Any) -> None:
    sessions = commands.add_parser("sessions", help="list sessions, or show one")
    actions = sessions.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="every session with its counters")
    _store_flags(listing)
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(run=run_list)
    show = actions.add_parser("show", help="a session's counters and compaction records")
    show.add_argument("session")
    _store_flags(show, history=True)
    show.add_argument("--json", action="store_true")
    show.set_defaults(run=run_show)

    history = commands.add_parser("history", help="print a session's offloaded history")
    history.add_argument("session")
    _store_flags(history, history=True)
    history.set_defaults(run=run_history)

    migrate = commands.add_parser("migrate", help="upgrade the database schema (Alembic)")
    _store_flags(migrate)
    migrate.set_defaults(run=run_migrate)


def _store_flags(parser: argparse.ArgumentParser, *, history: bool = False) -> None:
    parser.add_argument("--database-url", help="default HANGO_DATABASE_URL")
    if history:
        parser.add_argument("--history-root", help="default HANGO_HISTORY_ROOT")


def _settings(args: argparse.Namespace) -> Settings:
    return settings_with(
        database_url=args.database_url, history_root=getattr(args, "history_root", None)
    )


def existing_store(settings: Settings) -> Store | None:
    """The store, or ``None`` when it is a SQLite file that was never created."""
    url = make_url(settings.database_url)
    database = url.database
    on_disk = url.get_backend_name() == "sqlite" and database and database != ":memory:"
    if on_disk and not Path(str(database)).expanduser().exists():
        return None
    return Store.from_url(settings.database_url)


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
            f"{s.model}, created {s.created_at:%Y-%m-%d %H:%M}, last input {s.last_input_tokens:,} "
            f"tokens, {s.compactions} compactions",
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
        raise UnknownSessionError(session_id)
    runs = store.runs(session_id)
    records = [record for run in store.runs(session_id) for record in run.state.compactions]
    history = history_from_settings(settings, engine=store.engine)
    virtual = conversation_history_path(session_id)
    shown_path = history_file(history, virtual) if history.exists(virtual) else None
    report = {
        **_session_json(info.id, info.model, info.last_input_tokens, info.compactions),
        "created_at": info.created_at.isoformat(),
        "turns": len(runs),
        "failed_turns": sum(1 for run in runs if run.status == "failed"),
        "stored_messages": len(store.messages(session_id)),
        "compaction_records": [compaction_json(record) for record in records],
        "history_file": shown_path,
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
                ("history file", shown_path or "(none: nothing evicted yet)"),
            ],
        )
    )
    if records:
        console.print(compaction_table(records, title="Compaction records (run state)"))
    return 0


def run_history(args: argparse.Namespace) -> int:
    settings = _settings(args)
    session_id = validate_session_id(args.session)
    store = existing_store(settings)
    history = history_from_settings(settings, engine=store.engine if store else None)
    try:
        text = history.read(conversation_history_path(session_id))
    except FileNotFoundError:
        if store is None or store.session(session_id) is None:
            raise UnknownSessionError(session_id) from None
        notice(f"session {session_id} has no offloaded history yet (nothing was evicted)")
        return 0
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0


def run_migrate(args: argparse.Namespace) -> int:
    settings = _settings(args)
    Store.from_url(settings.database_url).migrate()
    notice(f"database {redact_url(settings.database_url)} is at the latest schema revision")
    return 0
