"""How a failed command ends: one clear line on stderr and an exit code per kind of error.

The line says what was wrong (the error's own message names the bad input) and what to
do about it; a command shown in the advice carries the flags that were in effect, so it
runs as printed. No traceback unless ``--debug``: a traceback is for the people who
write the code, the one line is for the people who run it. The codes are documented in
the README's table (a test keeps the two equal).
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from hango.core.errors import (
    EXIT_WORKER_CONFIG,
    CannotFitError,
    ConfigError,
    HangoError,
    HistoryPathError,
    InvalidInputError,
    InvalidRequestError,
    InvalidSessionIdError,
    MissingHistoryError,
    ProviderError,
    QueueUnavailableError,
    SchemaNotReadyError,
    SessionBusyError,
    SummarizerError,
    TranscriptError,
    TurnLeaseLostError,
    UnknownSessionError,
)

EXIT_OK = 0
EXIT_FAILED = 1  # an unexpected error, or a product error without a code of its own
EXIT_USAGE = 2  # argparse's own code for a bad command line (also a bad flag value)
EXIT_CONFIG = 3
EXIT_TRANSCRIPT = 4
EXIT_SESSION = 5
EXIT_PROVIDER = 6
EXIT_CANNOT_FIT = 7
EXIT_QUEUE = 8
EXIT_DATABASE = 9
EXIT_BUSY = 10
EXIT_INTERRUPTED = 130

# code -> what it means; the README's exit-code table lists exactly these.
EXIT_CODES: dict[int, str] = {
    EXIT_OK: "success",
    EXIT_FAILED: "unexpected error (a bug: rerun with --debug and report the traceback)",
    EXIT_USAGE: "bad command line: unknown command or flag, or a bad flag value",
    EXIT_CONFIG: "a setting (flag or HANGO_* variable) is invalid or missing",
    EXIT_TRANSCRIPT: "a transcript file cannot be read; nothing was written",
    EXIT_SESSION: "a session or its history is unknown, invalid or missing",
    EXIT_PROVIDER: "the model provider or the summarizer failed",
    EXIT_CANNOT_FIT: "even the newest messages do not fit the model's window",
    EXIT_QUEUE: "Redis or the Celery workers cannot be reached (--queue)",
    EXIT_DATABASE: "the database is unreachable, not migrated, or failed",
    EXIT_BUSY: "another process is running a turn on the session, or took it over",
    EXIT_WORKER_CONFIG: "`hango worker`: the worker refused to start over its configuration "
    "(e.g. no API key for `HANGO_WORKER_SUMMARIZER=anthropic`); it is not restarted until "
    "that is fixed",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C)",
}


@dataclass(frozen=True)
class Failure:
    code: int
    hint: str  # "{flags}" stands for the store flags in effect


_KEY_HINT = "check ANTHROPIC_API_KEY and HANGO_ANTHROPIC_BASE_URL"

_FAILURES: tuple[tuple[type[BaseException], Failure], ...] = (
    (
        ConfigError,
        Failure(EXIT_CONFIG, "fix that setting (flag or environment variable) and retry"),
    ),
    (TranscriptError, Failure(EXIT_TRANSCRIPT, "fix the transcript file; nothing was written")),
    (InvalidSessionIdError, Failure(EXIT_SESSION, "session ids are safe file names")),
    (UnknownSessionError, Failure(EXIT_SESSION, "`hango sessions list{flags}` shows the sessions")),
    (MissingHistoryError, Failure(EXIT_SESSION, "pass the --history-root it was written with")),
    (HistoryPathError, Failure(EXIT_SESSION, "use a path inside the history root")),
    (CannotFitError, Failure(EXIT_CANNOT_FIT, "")),
    (InvalidInputError, Failure(EXIT_SESSION, "the session is unchanged; send another message")),
    (QueueUnavailableError, Failure(EXIT_QUEUE, "or run without --queue (everything in-process)")),
    # A request refused as malformed (by the API or by the last guard before sending) is
    # not a credentials problem: pointing at the key would send the user the wrong way.
    (
        InvalidRequestError,
        Failure(EXIT_PROVIDER, "the stored transcript is unchanged; rerun with --debug"),
    ),
    (
        ProviderError,
        Failure(EXIT_PROVIDER, _KEY_HINT),
    ),
    (SummarizerError, Failure(EXIT_PROVIDER, "the extractive summarizer needs no model")),
    (SchemaNotReadyError, Failure(EXIT_DATABASE, "")),
    # The session is fine: another process holds it. Waiting longer, or retrying once that
    # process is done, is the remedy; a lost lease means the other process owns the turn now.
    (
        SessionBusyError,
        Failure(EXIT_BUSY, "retry when it is done, or raise HANGO_SESSION_BUSY_TIMEOUT"),
    ),
    (
        TurnLeaseLostError,
        Failure(EXIT_BUSY, "the process that took the session finishes the turn; check it"),
    ),
)
_DATABASE_FAILURE = Failure(
    EXIT_DATABASE, "check --database-url / HANGO_DATABASE_URL and that it is up"
)
# Commands that run offline without a provider: a provider error can point there.
_OFFLINE_DEFAULT = {"simulate": "or drop --provider anthropic for the offline scripted model"}


def failure_for(error: BaseException) -> Failure:
    """The exit code and advice for ``error`` (the most specific class listed wins)."""
    for kind, failure in _FAILURES:
        if isinstance(error, kind):
            return failure
    if _is_database_error(error):
        return _DATABASE_FAILURE
    if isinstance(error, HangoError):
        return Failure(EXIT_FAILED, "run with --debug for details")
    return Failure(EXIT_FAILED, "this is a bug; run with --debug and report the traceback")


def _is_database_error(error: BaseException) -> bool:
    # Imported only when a command failed: ``hango --help`` does not load SQLAlchemy.
    from sqlalchemy.exc import SQLAlchemyError

    return isinstance(error, SQLAlchemyError)


def error_line(command: str, error: BaseException, args: argparse.Namespace | None = None) -> str:
    """``hango COMMAND: error: WHAT (WHAT TO DO)`` on one line."""
    what, hint = _what(error), failure_for(error).hint
    verb = command.split(" ")[0]
    if isinstance(error, CannotFitError) and verb in ("simulate", "replay"):
        # The library's advice (after the last "; ") names settings these commands
        # override with their flag.
        what = what.rsplit("; ", 1)[0]
        hint = f"raise --max-input-tokens above {error.tokens:,}"
    if isinstance(error, SchemaNotReadyError):  # the database the command was given
        what = what.replace("`hango migrate`", f"`hango migrate{store_flags(args)}`")
    if hint == _KEY_HINT and verb in _OFFLINE_DEFAULT:
        hint = f"{hint}, {_OFFLINE_DEFAULT[verb]}"
    hint = hint.replace("{flags}", store_flags(args))
    prefix = f"hango {command}" if command else "hango"
    line = f"{prefix}: error: {_first_line(what)}" + (f" ({hint})" if hint else "")
    return runnable_commands(line)


def hango_command() -> str:
    """``hango`` as a shell finds it; else the absolute path of the script that runs now.

    A hint is copied into another shell, often without this venv activated: the path of
    the venv's own script runs there as printed.
    """
    script = Path(sys.argv[0])
    if script.name != "hango":
        return "hango"
    found = shutil.which("hango")
    if found is not None and Path(found).resolve() == script.resolve():
        return "hango"
    return shlex.quote(str(script.absolute()))


def runnable_commands(text: str) -> str:
    """``text`` with every backquoted `hango ...` command runnable as printed."""
    command = hango_command()
    return text if command == "hango" else text.replace("`hango ", f"`{command} ")


def store_flags(args: argparse.Namespace | None, *, history: bool = False) -> str:
    """`` --database-url URL [--history-root DIR]`` as given on the command line, quoted."""
    if args is None:
        return ""
    from hango.core.settings import mask_password, sqlite_path

    given: list[tuple[str, str]] = []
    url = getattr(args, "database_url", None)
    if url:
        path = sqlite_path(url)
        # Absolute, so the hint runs from any directory.
        if path is not None and not path.is_absolute():
            url = f"sqlite:///{path.absolute()}"
        # A password is never printed, even in a hint (that one hint then needs it retyped).
        given.append(("--database-url", mask_password(url)))
    root = getattr(args, "history_root", None)
    if history and root:
        given.append(("--history-root", str(Path(root).expanduser().absolute())))
    return "".join(f" {flag} {shlex.quote(value)}" for flag, value in given)


def _what(error: BaseException) -> str:
    if isinstance(error, HangoError):
        return error.message
    if _is_database_error(error):
        return f"database error: {_first_line(str(error.__cause__ or error))}"
    return f"unexpected {type(error).__name__}: {_first_line(str(error))}"


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else "(no message)"
