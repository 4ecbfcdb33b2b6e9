"""Reading the history tool's answers back, independently of how it renders them.

The tool's ``read`` output is specified, not just produced: a ``<session_history_data``
line, the page, a closing tag, then an optional "offset=N" continuation line; the page is
a slice of a rendering made of ``=== ... ===`` message headers and ``--- block N: LABEL,
L chars ---`` block headers, each followed by exactly L characters of payload and a
newline. These helpers follow that specification to rebuild every message's payloads, so
a test (or the corpus probe in ``bench/``) can compare them with the stored messages.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from hango.core.messages import (
    ContentBlock,
    ImageBlock,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)

CLOSING = "\n</session_history_data>"
_OPENING = re.compile(r"<session_history_data [^\n]*\n")
_MORE = re.compile(r"offset=(\d+)\)$")
_MESSAGE = re.compile(
    r"=== (?:seq (\d+), turn (\d+), (\w+), (\d+) blocks|tool result [^\n]*) ===\n"
)
_BLOCK = re.compile(r"--- block (\d+): (.*), (\d+) chars ---\n")


@dataclass(frozen=True)
class ReadMessage:
    seq: int | None
    blocks: list[tuple[str, str]]  # (label, payload)


def page_body(answer: str) -> tuple[str, int | None]:
    """The page inside one answer, and the offset of the next page (``None``: the last)."""
    opening = _OPENING.match(answer)
    assert opening, f"not a history answer: {answer[:200]!r}"
    end = answer.rindex(CLOSING)
    more = _MORE.search(answer[end:])
    return answer[opening.end() : end], int(more.group(1)) if more else None


def read_all(answer: Callable[[Mapping[str, Any]], str], arguments: Mapping[str, Any]) -> str:
    """Every page of one read, joined: ``answer`` is called with ``offset`` until the end."""
    text, offset = page_body(answer(arguments))
    while offset is not None:
        page, next_offset = page_body(answer({**arguments, "offset": offset}))
        assert next_offset is None or next_offset > offset
        text, offset = text + page, next_offset
    return text


def parse_rendering(text: str) -> list[ReadMessage]:
    """The messages of a whole rendering, their blocks' labels and payloads verbatim."""
    found: list[ReadMessage] = []
    at = 0
    while at < len(text):
        header = _MESSAGE.match(text, at)
        assert header, f"expected a message header at {at}: {text[at : at + 80]!r}"
        message = ReadMessage(int(header.group(1)) if header.group(1) else None, [])
        at = header.end()
        while (block := _BLOCK.match(text, at)) is not None:
            start = block.end()
            end = start + int(block.group(3))
            assert text[end] == "\n", f"block payload at {start} is not {block.group(3)} chars"
            message.blocks.append((block.group(2), text[start:end]))
            at = end + 1
        found.append(message)
    return found


def expected_payload(block: ContentBlock) -> str:
    """What ``read`` must show of ``block``, from the block itself (not from the tool)."""
    if isinstance(block, TextBlock):
        return block.text
    if isinstance(block, ToolUseBlock):
        return json.dumps(block.input, ensure_ascii=False)
    if isinstance(block, ToolResultBlock):
        return block.text()
    if isinstance(block, ThinkingBlock):
        return block.thinking
    if isinstance(block, ImageBlock | RedactedThinkingBlock):
        return ""
    return json.dumps(block.to_api(), ensure_ascii=False)
