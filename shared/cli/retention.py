"""``hango sessions delete`` and ``hango sessions prune``: retention of stored sessions.

Deleting a session removes its rows (messages, runs, lease, the session) in one
transaction, then its history files (the offloaded transcript and its large tool
results). A session with a turn running in some process is refused, not deleted.
Files the agent wrote with its file tools elsewhere in the history are not the session's
alone and are kept.
"""

from __future__ import annotations

import argparse
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from hango.cli.output import notice, plural, print_json, redact_url, stdout_console
from hango.cli.parsing import add_store_options
from hango.cli.wiring import existing_store, store_settings
from hango.core.errors import SessionBusyError, UnknownSessionError
from hango.core.ids import validate_session_id
from hango.core.settings import Settings
from hango.history.base import HistoryBackend
from hango.history.paths import conversation_history_path, large_tool_results_dir
from hango.simulate.workspace import SIMULATIONS_DIR
from hango.store import Store
from hango.store.retention import delete_session, idle_sessions
from hango.wiring.history import history_from_settings

_AGE = re.compile(r"^(\d+)([dhm])$")
_UNITS = {"d": "days", "h": "hours", "m": "minutes"}


def add_actions(actions: Any) -> None:
    remove = actions.add_parser(
        "delete", help="delete a session: its messages, runs and offloaded history files"
    )
    remove.add_argument("session", help="the session id (`hango sessions list` shows them)")
    _common(remove, run_delete)
    prune = actions.add_parser(
        "prune", help="delete every session with no message for longer than --older-than"
    )
    prune.add_argument(
        "--older-than", required=True, type=age, metavar="AGE", help="e.g. 30d, 12h or 90m"
    )
    prune.add_argument("--dry-run", action="store_true", help="list them; delete nothing")
    _common(prune, run_prune)


def _common(parser: argparse.ArgumentParser, run: Any) -> None:
    add_store_options(parser, history=True)
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.set_defaults(run=run)


def age(text: str) -> timedelta:
    """``30d``, ``12h`` or ``90m`` as a duration (argparse reports anything else)."""
    found = _AGE.match(text.strip())
    if found is None or int(found.group(1)) == 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not an age like 30d, 12h or 90m")
    return timedelta(**{_UNITS[found.group(2)]: int(found.group(1))})


def run_delete(args: argparse.Namespace) -> int:
    settings = store_settings(args)
    session_id = validate_session_id(args.session)
    store = existing_store(settings)
    if store is None or store.session(session_id) is None:
        raise UnknownSessionError(session_id, database=redact_url(settings.database_url))
    files = remove_session(store, _history(settings, store), session_id)
    if args.json:
        print_json({"deleted": [session_id], "history_files": files})
    else:
        stdout_console().print(f"deleted session {session_id} and {plural(files, 'history file')}")
    return 0


def run_prune(args: argparse.Namespace) -> int:
    settings = store_settings(args)
    store = existing_store(settings)
    if store is None:  # a SQLite file never created: nothing is stored, nothing is idle
        _report_prune(args, [], [], [], 0)
        return 0
    idle = idle_sessions(store, datetime.now(UTC) - args.older_than)
    deleted, busy, files = [], [], 0
    history = _history(settings, store)
    for session_id in [] if args.dry_run else idle:
        try:
            files += remove_session(store, history, session_id)
            deleted.append(session_id)
        except SessionBusyError:
            busy.append(session_id)
    _report_prune(args, idle, deleted, busy, files)
    return 0


def remove_session(store: Store, history: HistoryBackend, session_id: str) -> int:
    """The rows first (refused while a turn runs), then the session's own history files."""
    delete_session(store, session_id)
    paths = [
        conversation_history_path(session_id),
        *history.ls(large_tool_results_dir(session_id)),
        *history.ls(f"{SIMULATIONS_DIR}/{session_id}"),  # a simulated session's workspace
    ]
    return sum(history.delete(path) for path in paths)


def _history(settings: Settings, store: Store) -> HistoryBackend:
    return history_from_settings(settings, engine=store.engine)


def _report_prune(
    args: argparse.Namespace, idle: list[str], deleted: list[str], busy: list[str], files: int
) -> None:
    if args.json:
        found = {"idle": idle, "deleted": deleted, "busy": busy, "history_files": files}
        print_json({**found, "dry_run": args.dry_run})
        return
    console = stdout_console()
    if args.dry_run:
        console.print(f"{plural(len(idle), 'session')} idle: " + (", ".join(idle) or "none"))
        return
    console.print(f"deleted {plural(len(deleted), 'session')} and {plural(files, 'history file')}")
    if busy:
        notice(f"kept {', '.join(busy)}: a turn is running there now")
