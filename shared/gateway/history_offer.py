"""What the gateway offers the model, and how one client request's rounds end (pure).

The tool's name and definition beside the client's tools, whether an answer is followed
by an internal round, the room a round's results have in the window, and the stop reason,
usage and content the client and the loop get from the rounds
(:mod:`hango.gateway.history_rounds` drives them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hango.compaction.summary_prompt import HISTORY_TOOL_NAME
from hango.core.messages import JsonObject, Response
from hango.gateway.splice import Ending
from hango.tools.builtin import ToolOutcome, tool_error
from hango.tools.history import history_tool_definition
from hango.tools.history_calls import split_history_calls

RENAMED = "hango_session_history"
# Characters of a result per token of the room left (as the library sizes its pages:
# dense identifiers and non-Latin text run at fewer characters a token than prose).
CHARS_PER_TOKEN = 2
# Tokens kept back for the messages' framing around the results.
RESULT_MARGIN = 256


def offers(rounds: int, raw: Mapping[str, Any]) -> bool:
    """Whether a compacted request ``raw`` gets the tool: rounds are allowed, and the client
    did not forbid tool calls (``tool_choice: none``)."""
    choice = raw.get("tool_choice")
    return rounds > 0 and not (isinstance(choice, dict) and choice.get("type") == "none")


def fitted(outcomes: list[ToolOutcome], room: int | None) -> list[ToolOutcome]:
    """The results, each that would overflow the window (``room`` tokens left) replaced."""
    if room is None or sum(len(o.content) for o in outcomes) <= room * CHARS_PER_TOKEN:
        return outcomes
    return [too_large(o, room, len(outcomes)) for o in outcomes]


def internal_round_follows(response: Response, name: str, done: int, limit: int) -> bool:
    """Whether the gateway answers ``response`` and calls again: it calls only the history
    tool, and fewer than ``limit`` internal rounds were ``done``."""
    return split_history_calls(response.content, name).only_history and done < limit


def room(response: Response, window: int | None) -> int | None:
    """Tokens left in the window for the next round's results: the window less what the
    round read and wrote (the next request holds both) and a margin for the framing."""
    if window is None:
        return None
    used = response.usage.total_input_tokens() + response.usage.output_tokens
    return max(0, window - used - RESULT_MARGIN)


def too_large(outcome: ToolOutcome, room: int, calls: int) -> ToolOutcome:
    """A result that would overflow the window, replaced by an error the model can act on."""
    if len(outcome.content) * calls <= room * CHARS_PER_TOKEN:
        return outcome
    return tool_error(
        f"this result ({len(outcome.content)} characters) does not fit the context left for "
        f"this request (about {room} tokens); search with fewer results, or read fewer "
        "messages or another offset"
    )


def offered_name(tools: Any) -> str:
    """The tool's name in this request: ``session_history`` unless the client's tool has it."""
    taken = {t.get("name") for t in tools or () if isinstance(t, dict)}
    candidates = [HISTORY_TOOL_NAME, RENAMED, *(f"{RENAMED}_{n}" for n in range(2, 100))]
    return next(name for name in candidates if name not in taken)


def with_tool(raw: JsonObject, name: str) -> JsonObject:
    """The client's body with the tool's definition after the client's tools."""
    definition = history_tool_definition(name).to_api()
    if name != HISTORY_TOOL_NAME:
        definition["description"] += (
            f" (The summary calls this tool {HISTORY_TOOL_NAME}; here that name is another "
            f"tool's, and this one is {name}.)"
        )
    return {**raw, "tools": [*(raw.get("tools") or ()), definition]}


def ending_of(responses: list[Response], name: str) -> Ending:
    """The stop reason and usage the client's message ends with."""
    last = responses[-1]
    stop = last.stop_reason
    if stop == "tool_use" and not split_history_calls(last.content, name).client:
        stop = "end_turn"  # it called only the history tool: nothing for the client to run
    if len(responses) == 1:
        return Ending(stop, {})
    usage: JsonObject = {
        "input_tokens": last.usage.input_tokens,
        "output_tokens": sum(r.usage.output_tokens for r in responses),
    }
    for key in ("cache_creation_input_tokens", "cache_read_input_tokens"):
        value = getattr(last.usage, key)
        if value is not None:
            usage[key] = value
    return Ending(stop, usage)


def for_loop(responses: list[Response], name: str, ending: Ending) -> Response:
    """The message the loop reads: what the client got, with the first round's usage (the
    request the loop built; the later rounds are added to the turn's usage apart)."""
    content = tuple(
        block for r in responses for block in split_history_calls(r.content, name).client_blocks
    )
    update = {"content": content, "stop_reason": ending.stop_reason}
    return responses[0].model_copy(update=update)
