"""How a failed command ends: one clear line on stderr and an exit code per kind of error.

The line says what was wrong (the error's own message names the bad input) and what to
do about it. No traceback unless ``--debug``: a traceback is for the people who write
the code, the one line is for the people who run it.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.exc import SQLAlchemyError

from shared.core.errors import (
    CannotFitError,
    ConfigError,
    HangoError,
    HistoryPathError,
    InvalidInputError,
    InvalidSessionIdError,
    ProviderError,
    QueueUnavailableError,
    SummarizerError,
    TranscriptError,
    UnknownSessionError,
)

EXIT_OK = 0
EXIT_FAILED = 1  # an unexpected error, or a product error without a code of its own
EXIT_USAGE = 2  # argparse's own code for a bad command line
EXIT_CONFIG = 3
EXIT_TRANSCRIPT = 4
EXIT_SESSION = 5
EXIT_PROVIDER = 6
EXIT_CANNOT_FIT = 7
EXIT_QUEUE = 8
EXIT_DATABASE = 9
EXIT_INTERRUPTED = 130


@dataclass(frozen=True)
class Failure:
    code: int
    hint: str


_FAILURES: tuple[tuple[type[BaseException], Failure], ...] = (
    (
        ConfigError,
        Failure(EXIT_CONFIG, "fix that setting (flag or environment variable) and retry"),
    ),
    (TranscriptError, Failure(EXIT_TRANSCRIPT, "fix the transcript file; nothing was written")),
    (InvalidSessionIdError, Failure(EXIT_SESSION, "session ids are safe file names")),
    (UnknownSessionError, Failure(EXIT_SESSION, "`hango sessions list` shows the sessions")),
    (HistoryPathError, Failure(EXIT_SESSION, "use a path inside the history root")),
    (
        CannotFitError,
        Failure(EXIT_CANNOT_FIT, "raise --max-input-tokens or shorten the largest tool results"),
    ),
    (InvalidInputError, Failure(EXIT_SESSION, "the session is unchanged; send another message")),
    (
        QueueUnavailableError,
        Failure(EXIT_QUEUE, "start a worker (`celery -A worker worker`) or run without --queue"),
    ),
    (
        ProviderError,
        Failure(
            EXIT_PROVIDER,
            "check ANTHROPIC_API_KEY and HANGO_ANTHROPIC_BASE_URL, or use the offline default",
        ),
    ),
    (SummarizerError, Failure(EXIT_PROVIDER, "the extractive summarizer needs no model")),
    (
        SQLAlchemyError,
        Failure(EXIT_DATABASE, "check --database-url / HANGO_DATABASE_URL and that it is up"),
    ),
)


def failure_for(error: BaseException) -> Failure:
    """The exit code and advice for ``error`` (the most specific class listed wins)."""
    for kind, failure in _FAILURES:
        if isinstance(error, kind):
            return failure
    if isinstance(error, HangoError):
        return Failure(EXIT_FAILED, "run with --debug for details")
    return Failure(EXIT_FAILED, "this is a bug; run with --debug and report the traceback")


def error_line(command: str, error: BaseException) -> str:
    """``hango COMMAND: error: WHAT (WHAT TO DO)`` on one line."""
    failure = failure_for(error)
    if isinstance(error, HangoError):
        what = error.message
    elif isinstance(error, SQLAlchemyError):
        what = f"database error: {_first_line(str(error.__cause__ or error))}"
    else:
        what = f"unexpected {type(error).__name__}: {_first_line(str(error))}"
    prefix = f"hango {command}" if command else "hango"
    return f"{prefix}: error: {_first_line(what)} ({failure.hint})"


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else "(no message)"
