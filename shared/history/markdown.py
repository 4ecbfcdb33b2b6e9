"""Markdown rendering of evicted messages for the history file.

The history file is the only place an evicted message survives in readable form, so the
rendering is verbatim and lossless for everything the model can use: text, thinking,
every ``tool_use`` input (as JSON) and every ``tool_result`` text. Each payload sits in
its own fenced block whose fence is longer than any run of backticks inside it, so no
content (a transcript about Markdown, a file full of ```) can break out of its block
or fake a heading of the file.

The output is deterministic (no clocks; messages and blocks in their stored order): the same
evicted range always renders to the same bytes, which keeps offloads idempotent.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from hango.core.messages import (
    ContentBlock,
    ImageBlock,
    RedactedThinkingBlock,
    StoredMessage,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)

_BACKTICK_RUN = re.compile(r"`+")
# One encoder for every value (``json.dumps`` with options builds a new one per call).
_encode = json.JSONEncoder(ensure_ascii=False).encode
_SCALARS = frozenset({str, int, float, bool, type(None)})
# A flat object with one key per line (what :func:`readable_json` makes of one).
_encode_lines = json.JSONEncoder(ensure_ascii=False, separators=(",\n  ", ": ")).encode


def fence_for(content: str) -> str:
    """A backtick fence longer than the longest backtick run in ``content`` (at least 3)."""
    if "```" not in content:  # most content: no run of three to outgrow (a C-speed search)
        return "```"
    longest = max((len(run) for run in _BACKTICK_RUN.findall(content)), default=0)
    return "`" * max(3, longest + 1)


def fenced(content: str, info: str = "") -> str:
    """``content`` inside a fenced code block that nothing in it can close."""
    fence = fence_for(content)
    return f"{fence}{info}\n{content}\n{fence}"


def render_evicted(session_id: str, turn: int, evicted: Sequence[StoredMessage]) -> str:
    """The Markdown section recording one evicted range, ending with a newline."""
    if not evicted:
        raise ValueError(f"nothing to render for session {session_id!r} turn {turn}: no messages")
    first, last = evicted[0].seq, evicted[-1].seq
    parts = [
        f"## Turn {turn}: messages {first}\u2013{last}",
        f"Session `{session_id}`: {len(evicted)} messages evicted from the model's context "
        f"at turn {turn}, recorded verbatim.",
    ]
    for stored in evicted:
        # Headings and blocks are parts of one join (messages are separated as their
        # blocks are): each block's text is copied once, into the section.
        message = stored.message
        parts.append(f"### Message {stored.seq} \u00b7 {message.role} \u00b7 turn {stored.turn}")
        parts.extend(map(_render_block, message.blocks()))
    # The closing newline added to the last part, not to the whole (tens of MB to copy).
    parts[-1] += "\n"
    return "\n\n".join(parts)


def _render_block(block: ContentBlock) -> str:
    if isinstance(block, TextBlock):
        return fenced(block.text, "text")
    if isinstance(block, ToolUseBlock):
        return f"**tool_use** `{block.name}` (id `{block.id}`)\n\n" + fenced(
            readable_json(block.input), "json"
        )
    if isinstance(block, ToolResultBlock):
        return _render_tool_result(block)
    if isinstance(block, ThinkingBlock):
        return "**thinking**\n\n" + fenced(block.thinking, "text")
    if isinstance(block, RedactedThinkingBlock):
        return "**redacted thinking** (encrypted by the provider; nothing readable to keep)"
    if isinstance(block, ImageBlock):
        return f"**image** ({_media_type(block.source)}; not stored in the history file)"
    return f"**{block.type} block**\n\n" + fenced(readable_json(block.to_api()), "json")


def readable_json(value: object) -> str:
    """``value`` as JSON with one top-level key per line, each value compact.

    As readable as ``indent=2`` for the flat objects tool inputs are, and made by the C
    encoder: ``indent`` falls back to the pure-Python one, which made a compacting
    call's offload of a few hundred tool calls cost more than the rest of the call.
    """
    if not isinstance(value, dict) or not value:
        return _encode(value)
    if all(type(key) is str and type(item) in _SCALARS for key, item in value.items()):
        # A flat object (most tool inputs): the same lines from one call of the encoder,
        # whose item separator starts each key on its own line.
        return "{\n  " + _encode_lines(value)[1:-1] + "\n}"
    lines = (f"  {_encode(str(key))}: {_encode(item)}" for key, item in value.items())
    return "{\n" + ",\n".join(lines) + "\n}"


def _render_tool_result(block: ToolResultBlock) -> str:
    flag = " **(error)**" if block.is_error else ""
    heading = f"**tool_result** for `{block.tool_use_id}`{flag}"
    images = _image_count(block)
    if images:
        heading += f" ({images} image(s) not stored in the history file)"
    return f"{heading}\n\n" + fenced(block.text(), "text")


def _image_count(block: ToolResultBlock) -> int:
    if block.content is None or isinstance(block.content, str):
        return 0
    return sum(1 for item in block.content if isinstance(item, ImageBlock))


def _media_type(source: dict[str, object]) -> str:
    media_type = source.get("media_type")
    return str(media_type) if media_type else str(source.get("type", "unknown source"))
