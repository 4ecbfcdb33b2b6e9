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
from dataclasses import dataclass, field
from typing import Any

from hango.compaction.summary_prompt import artifact_index
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
from hango.store import Store
from hango.tools.history import PAGE_CHARS, HistoryScope, HistoryTool, StoreTranscripts

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


# --- Probing a replayed session ----------------------------------------------------------


@dataclass
class Probe:
    """What the history tool gave back over one session's evicted messages."""

    evicted: int = 0
    read_exact: int = 0
    results: int = 0
    results_exact: int = 0
    identifiers: int = 0
    found_top5: int = 0
    misses: list[str] = field(default_factory=list)
    # The first line of each evicted error result, searched for as the model would.
    error_lines: int = 0
    error_lines_top5: int = 0

    def add(self, other: Probe) -> None:
        for name in _COUNTS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.misses.extend(other.misses)


_COUNTS = (
    "evicted",
    "read_exact",
    "results",
    "results_exact",
    "identifiers",
    "found_top5",
    "error_lines",
    "error_lines_top5",
)


def evicted_to(store: Store, session_id: str) -> int:
    """The last sequence number any compaction of the session evicted (0: none did)."""
    kept = [r.kept_from_seq for run in store.runs(session_id) for r in run.state.compactions]
    return max(kept, default=1) - 1


def probe_session(store: Store, session_id: str, *, page_chars: int = PAGE_CHARS) -> Probe:
    """Read every evicted message back through the tool, and search every identifier of the
    artifact index over them; compared with the store's messages, read directly."""
    scope = HistoryScope(session_id)
    tool = HistoryTool(StoreTranscripts(store), page_chars=page_chars)

    def answer(arguments: Mapping[str, Any]) -> str:
        outcome = tool.answer(arguments, scope)
        assert not outcome.is_error, outcome.content
        return outcome.content

    evicted = store.messages(session_id, to_seq=evicted_to(store, session_id))
    probe = Probe(evicted=len(evicted))
    for stored in evicted:
        _probe_read(probe, answer, stored)
    every = store.messages(session_id)
    found = _found_top5(answer, artifact_index(evicted), every, probe.misses)
    probe.identifiers, probe.found_top5 = len(found), sum(found)
    errors = _found_top5(answer, error_lines(evicted), every, probe.misses)
    probe.error_lines, probe.error_lines_top5 = len(errors), sum(errors)
    return probe


def _probe_read(
    probe: Probe, answer: Callable[[Mapping[str, Any]], str], stored: StoredMessage
) -> None:
    """Count ``stored`` read back exactly, whole and tool result by tool result."""
    [read] = parse_rendering(read_all(answer, {"command": "read", "from_seq": stored.seq}))
    wanted = [expected_payload(block) for block in stored.message.blocks()]
    probe.read_exact += read.seq == stored.seq and [p for _, p in read.blocks] == wanted
    for block in stored.message.tool_results():
        text = read_all(answer, {"command": "read", "tool_use_id": block.tool_use_id})
        probe.results += 1
        probe.results_exact += parse_rendering(text)[0].blocks[0][1] == block.text()


def _found_top5(
    answer: Callable[[Mapping[str, Any]], str],
    queries: list[str],
    stored: list[StoredMessage],
    misses: list[str],
) -> list[bool]:
    """For each query, whether a block among its first five hits holds it verbatim."""
    every = {m.seq: m for m in stored}
    found = []
    for query in queries:
        hits = search_hits(answer({"command": "search", "query": query, "limit": 5}))
        found.append(any(_holds(every[seq].message.blocks()[b - 1], query) for seq, b in hits))
        if not found[-1]:
            misses.append(query)
    return found


def error_lines(evicted: list[StoredMessage]) -> list[str]:
    """The first non-blank line (at most 200 characters) of each error result, once each."""
    lines: dict[str, None] = {}
    for stored in evicted:
        for block in stored.message.tool_results():
            first = next((line.strip() for line in block.text().splitlines() if line.strip()), "")
            if block.is_error and first and len(first) <= 200:
                lines[first] = None
    return list(lines)


def search_hits(answer: str) -> list[tuple[int, int]]:
    """The (seq, block) of each hit of a search answer, best first."""
    return [(int(seq), int(block)) for seq, block in _HIT.findall(answer)]


_HIT = re.compile(r"^\d+\. seq (\d+), turn \d+, \w+, block (\d+): ", re.M)


def _holds(block: ContentBlock, identifier: str) -> bool:
    """Whether ``block``'s own content holds ``identifier`` (a tool input's string values)."""
    if isinstance(block, ToolUseBlock):
        return any(identifier in value for value in _strings(block.input))
    return identifier in expected_payload(block)


def _strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for child in value.values() for s in _strings(child)]
    if isinstance(value, list):
        return [s for child in value for s in _strings(child)]
    return [value] if isinstance(value, str) else []
