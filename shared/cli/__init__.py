"""The ``hango`` command.

    hango simulate              a scripted coding session through the real loop (offline)
    hango replay TRANSCRIPT     what the middleware would have sent for a recorded session
    hango chat                  an interactive session against the Anthropic API
    hango sessions list|show    the sessions, their counters and compaction records
    hango history SESSION       a session's offloaded history
    hango migrate               bring the database schema up to date

Each command is a thin shell in its own module. A failure prints one line (what was
wrong, which input, what to do) and exits non-zero; ``--debug`` adds the traceback.
"""

from __future__ import annotations

import argparse
import logging
import sys
import traceback
from collections.abc import Callable, Sequence

from shared.cli import chat, replay, sessions, simulate
from shared.cli.errors import EXIT_INTERRUPTED, EXIT_USAGE, error_line, failure_for

Runner = Callable[[argparse.Namespace], int]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hango",
        description="Keeps long LLM-agent sessions inside the model's context window "
        "without ever rewriting the transcript.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    simulate.add_parser(commands)
    replay.add_parser(commands)
    chat.add_parser(commands)
    sessions.add_parsers(commands)
    _accept_debug_anywhere(parser)
    return parser


def _accept_debug_anywhere(parser: argparse.ArgumentParser) -> None:
    """``hango replay x --debug`` works as well as ``hango --debug replay x``."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in action.choices.values():
                command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS)
                _accept_debug_anywhere(command)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    run: Runner | None = getattr(args, "run", None)
    if run is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    _configure_logging(debug=args.debug, level=getattr(args, "log_level", logging.WARNING))
    try:
        return run(args)
    except KeyboardInterrupt:
        sys.stderr.write(f"hango {args.command}: interrupted\n")
        return EXIT_INTERRUPTED
    except Exception as error:
        if args.debug:
            traceback.print_exc()
        command = " ".join(filter(None, (args.command, getattr(args, "action", None))))
        sys.stderr.write(error_line(command, error) + "\n")
        return failure_for(error).code


def _configure_logging(*, debug: bool, level: int) -> None:
    logging.basicConfig(
        level=logging.DEBUG if debug else level,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


__all__ = ["build_parser", "main"]
