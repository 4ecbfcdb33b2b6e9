"""``hango chat``: an interactive session against the Anthropic API.

Each line you type is one turn of the real agent loop: the full middleware chain, the
file tools over the history backend (read_file, write_file, edit_file, ls,
compact_conversation), the configured store. --session resumes a session. The
assistant's answers go to stdout, the turn's figures to stderr; /exit or end of input
leaves. HANGO_ANTHROPIC_BASE_URL points it at another Messages API endpoint.
"""

from __future__ import annotations

import argparse
import sys
import uuid
from collections.abc import Iterator
from typing import Any

from hango.agent.loop import TurnResult
from hango.cli.errors import EXIT_OK, error_line, failure_for
from hango.cli.output import notice
from hango.cli.parsing import add_store_options, summary
from hango.cli.wiring import anthropic_provider, instrumented, settings_with, telemetry
from hango.core.errors import ConfigError, HangoError
from hango.core.ids import validate_session_id
from hango.wiring.agent import build_agent

PROMPT = "you> "
EXIT_WORDS = frozenset({"/exit", "/quit"})


def add_parser(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "chat",
        help=summary("chat"),
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    parser.add_argument("--session", help="resume this session (default: a new chat-XXXXXXXX)")
    parser.add_argument("--model", help="model id (default: HANGO_MODEL)")
    add_store_options(parser, history=True, migrate=True)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    settings = settings_with(
        model=args.model,
        database_url=args.database_url,
        history_root=args.history_root,
        auto_migrate=True if args.migrate else None,
    )
    session_id = (
        validate_session_id(args.session) if args.session else f"chat-{uuid.uuid4().hex[:8]}"
    )
    provider = anthropic_provider(settings)
    status = EXIT_OK
    with telemetry(instrument_celery=bool(settings.redis_url)) as handle:
        chat, summary, observer = instrumented(handle, provider, provider)
        agent = build_agent(
            settings, provider=chat, summarizer_provider=summary, observers=(observer,)
        )
        window = agent.profile.max_input_tokens
        notice(
            f"session {session_id} with {settings.model} (window {window:,} tokens); "
            "/exit or end of input to leave"
        )
        for line in _lines():
            try:
                result = agent.loop.run_turn(session_id, line)
            except ConfigError:
                raise  # nothing later can succeed either
            except (HangoError, OSError) as error:
                # One failed turn does not end the conversation; the next line may work.
                notice(error_line("chat", error, args))
                status = failure_for(error).code
                continue
            _show(result)
    return status


def _lines() -> Iterator[str]:
    interactive = sys.stdin.isatty()
    while True:
        if interactive:
            try:
                line = input(PROMPT)
            except EOFError:
                return
        else:
            line = sys.stdin.readline()
            if not line:
                return
        text = line.strip()
        if text in EXIT_WORDS:
            return
        if text:
            yield text


def _show(result: TurnResult) -> None:
    answer = result.response.as_message().text() if result.response else ""
    sys.stdout.write((answer or "(no text)") + "\n")
    sys.stdout.flush()
    figures = (
        f"turn {result.turn}: {result.input_tokens:,} input tokens, {result.model_calls} calls"
    )
    figures += f", {result.tool_calls} tools" if result.tool_calls else ""
    figures += "".join(
        f", compacted ({c.reason}: {c.tokens_before:,} → {c.tokens_after:,} tokens)"
        for c in result.compactions
    )
    notice(f"[{figures}]")
