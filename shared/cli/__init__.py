"""The ``hango`` command.

    hango simulate              a scripted coding session through the real loop (offline)
    hango replay TRANSCRIPT     what the middleware would have sent for a recorded session
    hango chat                  an interactive session against the Anthropic API
    hango sessions list|show    the sessions, their counters and compaction records
    hango sessions delete|prune retention: one session, or those idle for longer than an age
    hango history SESSION       a session's offloaded history
    hango migrate               bring the database schema up to date
    hango worker [OPTIONS]      the Celery worker pool, restarted when it dies

Each command is a thin shell in its own module, imported only when that command runs
(``hango --help`` stays fast). A failure prints one line (what was wrong, which input,
what to do) and exits with the code of its kind (``hango.cli.errors``); ``--debug``
adds the traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from hango.cli.errors import EXIT_INTERRUPTED, EXIT_USAGE, error_line, failure_for
from hango.cli.parsing import COMMANDS, PlainFormatter, add_stub

Runner = Callable[[argparse.Namespace], int]
PACKAGE = "hango-context"
_GLOBAL_FLAGS = frozenset({"--debug", "-q", "--quiet", "-v", "--verbose", "-vv"})


def build_parser(command: str | None = "") -> argparse.ArgumentParser:
    """The parser; with ``command`` given, only that command's module is imported.

    ``""`` (the default) builds every command in full; ``None`` builds none (enough for
    ``hango --help`` and ``--version``).
    """
    parser = argparse.ArgumentParser(
        prog="hango",
        description="Keeps long LLM-agent sessions inside the model's context window "
        "without ever rewriting the transcript.",
        epilog="Exit codes: see the README's table (0 ok, 2 bad command line, 3-9 by kind).",
        formatter_class=PlainFormatter,
    )
    parser.add_argument("--version", action="version", version=f"hango {_version()}")
    _add_global_flags(parser, suppress=False)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    wanted = {name for name in COMMANDS if command == "" or name == command}
    modules = {COMMANDS[name][0] for name in wanted}
    built: set[str] = set()
    for name, (module_name, _) in COMMANDS.items():
        if module_name in modules and module_name not in built:
            module = importlib.import_module(f"hango.cli.{module_name}")
            adder: Callable[[Any], None] = getattr(module, "add_parsers", None) or module.add_parser
            adder(commands)
            built.add(module_name)
        elif module_name not in modules:
            add_stub(commands, name)
    _for_every_command(parser)
    return parser


def _add_global_flags(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """``--debug``, ``-q`` and ``-v``; sub-parsers add them with a suppressed default, so
    ``hango replay x --debug`` works as well as ``hango --debug replay x``."""
    off: dict[str, Any] = {"default": argparse.SUPPRESS} if suppress else {"default": False}
    count: dict[str, Any] = {"default": argparse.SUPPRESS} if suppress else {"default": 0}
    parser.add_argument(
        "--debug", action="store_true", help="show tracebacks and debug logs", **off
    )
    parser.add_argument(
        "-q", "--quiet", action="store_true",
        help="no progress or notices on stderr (results and errors still print)", **off,
    )  # fmt: skip
    parser.add_argument(
        "-v", "--verbose", action="count", help="more log output (-vv: debug logs)", **count
    )


def _for_every_command(parser: argparse.ArgumentParser) -> None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in action.choices.values():
                command.formatter_class = PlainFormatter
                if command.add_help:  # not a stub
                    _add_global_flags(command, suppress=True)
                _for_every_command(command)


def _command_in(argv: Sequence[str]) -> str | None:
    """The command named on the command line (global flags may come first)."""
    for word in argv:
        if word in COMMANDS:
            return word
        if word not in _GLOBAL_FLAGS:
            return None
    return None


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(PACKAGE)
    except PackageNotFoundError:
        return "unknown (not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(_command_in(words))
    args, extra = parser.parse_known_args(words)
    if extra and not getattr(args, "passthrough", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.extra = extra  # `hango worker` hands its options to celery
    run: Runner | None = getattr(args, "run", None)
    if run is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    from hango.cli.output import set_quiet

    set_quiet(args.quiet)
    _configure_logging(
        debug=args.debug,
        verbose=args.verbose or 0,
        level=getattr(args, "log_level", logging.WARNING),
        quiet=args.quiet,
    )
    try:
        return run(args)
    except KeyboardInterrupt:
        sys.stderr.write(f"hango {args.command}: interrupted\n")
        return EXIT_INTERRUPTED
    except Exception as error:
        if args.debug:
            traceback.print_exc()
        command = " ".join(filter(None, (args.command, getattr(args, "action", None))))
        sys.stderr.write(error_line(command, error, args) + "\n")
        return failure_for(error).code


# Said at every command's default level: an unknown model's guessed window (every figure
# depends on it) and a HANGO_* variable that is no setting (most likely a typo).
ALWAYS_SAID = ("hango.core.profiles", "hango.core.settings")


def _configure_logging(*, debug: bool, verbose: int, level: int, quiet: bool = False) -> None:
    if debug or verbose >= 2:
        level = logging.DEBUG
    elif verbose == 1:
        level = min(level, logging.INFO)
    logging.basicConfig(
        level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    if level > logging.WARNING and not quiet:
        for name in ALWAYS_SAID:
            logging.getLogger(name).setLevel(logging.WARNING)


__all__ = ["build_parser", "main"]
