"""The command line's shape, kept light: ``hango --help`` imports nothing heavy.

The table of commands lets ``main`` build only the sub-parser of the command being run
(one import of its module); the others are stubs that show their one-line help. The
formatter shows every option's default and turns reStructuredText markup from the
modules' docstrings into plain text.
"""

from __future__ import annotations

import argparse
import math
import re
from typing import Any

# command -> (module under hango.cli that adds its parser, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "simulate": (
        "simulate",
        "run a scripted coding session through the real loop (offline by default)",
    ),
    "replay": (
        "replay",
        "replay a recorded session through the middleware (what would have been sent)",
    ),
    "chat": ("chat", "an interactive session against the Anthropic API"),
    "sessions": ("sessions", "list, show, resume, delete or prune sessions"),
    "history": ("sessions", "print a session's offloaded history"),
    "migrate": ("sessions", "upgrade the database schema (Alembic)"),
    "worker": ("worker", "run a Celery worker pool, started again when it dies"),
    "serve": ("serve", "run the Anthropic Messages API gateway (any client, no code change)"),
}

_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")
_LITERAL = re.compile(r"``([^`]+)``")


def plain(text: str) -> str:
    """``text`` without reStructuredText roles and literals (``:mod:`x``` and ````x````)."""
    return _LITERAL.sub(r"\1", _ROLE.sub(r"\1", text))


def summary(command: str) -> str:
    return COMMANDS[command][1]


class PlainFormatter(argparse.RawDescriptionHelpFormatter):
    """Plain text; every option's default shown unless it is empty or already stated."""

    def _format_text(self, text: str) -> str:
        return super()._format_text(plain(text))

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = plain(action.help or "")
        default = action.default
        shown = default not in (None, False, argparse.SUPPRESS) and not isinstance(default, list)
        if shown and "default" not in text and action.option_strings:
            text += " (default: %(default)s)"
        return text


def positive_int(text: str) -> int:
    """An ``int`` > 0; argparse turns the error into a usage error (exit 2)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {value}")
    return value


def non_negative_float(text: str) -> float:
    """A finite ``float`` >= 0 (seconds); argparse turns the error into a usage error."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a number >= 0, not {text!r}")
    return value


def add_store_options(
    parser: argparse.ArgumentParser, *, history: bool = False, migrate: bool = False
) -> None:
    """Where the command finds its state: the same flags, defaults and help everywhere."""
    parser.add_argument(
        "--database-url", help="the store (default: HANGO_DATABASE_URL, else SQLite in HANGO_HOME)"
    )
    if history:
        parser.add_argument(
            "--history-root",
            help="the history directory (default: HANGO_HISTORY_ROOT, else history/ in HANGO_HOME)",
        )
    if migrate:
        parser.add_argument(
            "--migrate",
            action="store_true",
            help="bring a PostgreSQL schema up to date first (as HANGO_AUTO_MIGRATE=1)",
        )


def add_stub(commands: Any, name: str) -> None:
    """A placeholder sub-parser: listed in ``hango --help`` without importing its module."""
    commands.add_parser(name, help=summary(name), add_help=False)


__all__ = ["COMMANDS", "PlainFormatter", "add_stub", "plain", "positive_int", "summary"]
