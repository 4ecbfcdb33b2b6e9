"""The summarizer's request and the summary message that replaces the evicted messages.

The summary is a briefing for a fresh agent that continues the work, so the prompt asks
for fixed sections and an identifier-preservation clause: agents that lose paths, ids or
commands in a summary fabricate them afterwards (the most common complaint about
compaction in peer projects).

The summary request is itself a request the validator must accept: one user message,
no tools, every ``tool_use``/``tool_result`` of the evicted range rendered as text. Its
transcript is bounded to ``DEFAULT_SUMMARY_INPUT_CHARS`` (see :func:`render_transcript`).

Everything here is deterministic: the summary message opens the compacted history and
carries a prompt-cache breakpoint, so the same inputs must give the same bytes.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any, NamedTuple

from hango.compaction.jobs import SummaryJob
from hango.core.messages import (
    Message,
    RedactedThinkingBlock,
    Request,
    StoredMessage,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)

SUMMARY_SECTIONS = (
    "Goal and user requests",
    "Current state",
    "Files and artifacts",
    "Decisions",
    "Errors and fixes",
    "Open questions",
    "Next step",
)

MAX_LISTED_ARTIFACTS = 100

# The history tool's name (``hango.tools.history``), named here because the summary message
# tells the model about it and this pure core imports no tools.
HISTORY_TOOL_NAME = "session_history"

# About 100k tokens at 4 characters a token: half of a 200k window, leaving room for the
# prompt, the previous summary and the reply on the smallest model we summarize with.
DEFAULT_SUMMARY_INPUT_CHARS = 400_000

SUMMARY_SYSTEM_PROMPT = (
    "You write the briefing that lets a fresh agent continue a long working session. The "
    "agent will see your briefing in place of the earlier messages, followed by the most "
    "recent messages verbatim. It cannot ask you questions, so the briefing must be "
    "complete enough to continue the work without repeating it.\n\n"
    "IDENTIFIER PRESERVATION: copy verbatim, never paraphrase or abbreviate, every "
    "identifier the work depends on: ids, UUIDs and hashes, file paths and file names, "
    "URLs, hosts and ports, branch names, commands and their flags, function, class and "
    "variable names, error messages, exact tool-call results that matter (numbers, "
    "versions, outputs), the decisions taken, the open questions and the current plan. "
    "If unsure whether a detail matters, keep it.\n\n"
    "Write Markdown with exactly these sections, in this order (write 'None.' under a "
    "section with nothing to report):\n"
    + "".join(f"## {title}\n" for title in SUMMARY_SECTIONS)
    + "\nUnder 'Goal and user requests' keep every user request and constraint, quoting "
    "the user's own words where they are short. Under 'Current state' say what is done, "
    "what is in progress and what is verified. Under 'Files and artifacts' list every "
    "file created, read or changed, with what changed. Under 'Next step' give the single "
    "next action, precise enough to execute.\n\n"
    "Do not call any tools. Reply with the briefing only: no preamble, no closing remarks."
)


def build_summary_request(job: SummaryJob, *, model: str, max_tokens: int) -> Request:
    """The summarizer call: one user message holding the previous summary and the transcript."""
    transcript = render_transcript(job.evicted)
    return Request(
        model=model,
        max_tokens=max_tokens,
        system=(TextBlock(text=SUMMARY_SYSTEM_PROMPT),),
        messages=(Message(role="user", content=(TextBlock(text=_instructions(job, transcript)),)),),
    )


def _instructions(job: SummaryJob, transcript: str) -> str:
    span = f"messages {job.from_seq} to {job.to_seq} of session {job.session_id}"
    if job.previous_summary:
        head = (
            "Below is the previous briefing, which covers everything before these messages, "
            f"followed by the newly evicted {span}. Update the previous summary with the "
            "newly evicted messages: produce one briefing that covers both, keeping every "
            "identifier from either.\n\n"
            f"<previous_summary>\n{job.previous_summary}\n</previous_summary>\n\n"
        )
    else:
        head = f"Below are the evicted {span}. Write the briefing for them.\n\n"
    length = ""
    if job.max_tokens:
        length = f" Keep the briefing under {job.max_tokens} tokens: only that much room is left."
    elif job.budget:
        length = f" Keep the briefing under {job.budget} tokens."
    return (
        f"{head}<transcript>\n{transcript}\n</transcript>\n\n"
        "Very long tool inputs and results in the transcript may be cut to their head and "
        "tail; each cut is marked. Write the briefing now, with the sections listed in "
        f"your instructions. Do not call any tools.{length}"
    )


def build_summary_message(
    summary: str,
    *,
    offload_path: str,
    artifacts: Sequence[str],
    saved_to: int,
) -> Message:
    """The single user message that opens a compacted history, whose messages 1 to
    ``saved_to`` the history file holds."""
    text = (
        "This session is being continued from an earlier conversation that ran out of "
        "context. The earlier messages are summarized below. The full transcript of the "
        f"{saved_to} earlier messages (sequence 1 to {saved_to}) is saved at "
        f"{offload_path}; use {HISTORY_TOOL_NAME} (search, read) or read_file to recover "
        "details (exact file contents, command output, error text) the summary leaves out.\n\n"
        f"<summary>\n{summary.strip()}\n</summary>"
        f"{_artifact_section(artifacts)}\n\n"
        "Continue the work from where it left off, without asking the user to repeat "
        "anything."
    )
    return Message(role="user", content=(TextBlock(text=text),))


def _artifact_section(artifacts: Sequence[str]) -> str:
    if not artifacts:
        return ""
    listed = [f"- {item}" for item in artifacts[:MAX_LISTED_ARTIFACTS]]
    if len(artifacts) > MAX_LISTED_ARTIFACTS:
        listed.append(f"- ... and {len(artifacts) - MAX_LISTED_ARTIFACTS} more in the transcript")
    return "\n\nFiles and artifacts the earlier messages referred to:\n" + "\n".join(listed)


# --- The evicted range as text -------------------------------------------------------

# Per-payload caps tried in turn until the transcript fits; ``None`` means "verbatim".
_PAYLOAD_CAPS: tuple[int | None, ...] = (None, 16_000, 8_000, 4_000, 2_000, 1_000, 500)


def render_transcript(
    evicted: Sequence[StoredMessage], *, max_chars: int = DEFAULT_SUMMARY_INPUT_CHARS
) -> str:
    """The evicted messages as plain text for the summarizer, at most ``max_chars`` long.

    When the verbatim text is too long, each tool input, tool result and thinking block
    is cut to its head and tail (16,000 characters, then halved down to 500); if even
    that does not fit, the middle of the whole transcript is dropped (a quarter of the
    bound from the start, the rest from the end). Every cut is marked in the text.
    """
    names = {use.id: use.name for stored in evicted for use in stored.message.tool_uses()}
    pieces = [_pieces(stored, names) for stored in evicted]
    # Each cap's length is worked out from the pieces' lengths; only the cap that fits is
    # rendered.
    sizes = _sizes(pieces)
    for cap in _PAYLOAD_CAPS:
        if sizes.at(cap) <= max_chars:
            return _render(pieces, cap)
    return _drop_middle(pieces, _PAYLOAD_CAPS[-1], sizes.at(_PAYLOAD_CAPS[-1]), max_chars)


class _Payload(NamedTuple):
    """A tool input, tool result or thinking text: what a cap cuts."""

    text: str


_Pieces = list[list[str | _Payload]]  # the pieces of each message


def _pieces(stored: StoredMessage, names: dict[str, str]) -> list[str | _Payload]:
    """One message's rendering, its lines joined, the payloads left to clip."""
    pieces: list[str | _Payload] = [f"[seq {stored.seq}] {stored.message.role.upper()}:"]
    for block in stored.message.blocks():
        if isinstance(block, TextBlock):
            pieces += ["\n", block.text]
        elif isinstance(block, ToolUseBlock):
            arguments = _Payload(_encode(block.input))
            pieces += [f"\n[tool call {block.name} id={block.id}] ", arguments]
        elif isinstance(block, ToolResultBlock):
            name = names.get(block.tool_use_id, "unknown tool")
            flag = " ERROR" if block.is_error else ""
            header = f"\n[tool result for {block.tool_use_id} ({name}){flag}]\n"
            pieces += [header, _Payload(block.text())]
        elif isinstance(block, ThinkingBlock):
            pieces += ["\n[thinking] ", _Payload(block.thinking)]
        elif not isinstance(block, RedactedThinkingBlock):
            pieces.append(f"\n[{block.type} block]")
    return pieces


class _Sizes(NamedTuple):
    """The rendering's length apart from the payloads, and each payload's length."""

    plain: int
    payloads: list[int]

    def at(self, cap: int | None) -> int:
        """``len(_render(pieces, cap))``, without rendering: a payload over ``cap`` keeps
        ``kept`` characters (see :func:`clip`) and gains the cut note."""
        if cap is None:
            return self.plain + sum(self.payloads)
        kept, note = cap // 2 * 2, len(_CUT_NOTE) - len("{}")
        clipped = [n if n <= cap else kept + note + len(str(n - kept)) for n in self.payloads]
        return self.plain + sum(clipped)


def _sizes(pieces: _Pieces) -> _Sizes:
    separators = 2 * max(len(pieces) - 1, 0)
    plain = sum(len(p) for message in pieces for p in message if isinstance(p, str))
    payloads = [len(p.text) for message in pieces for p in message if isinstance(p, _Payload)]
    return _Sizes(separators + plain, payloads)


_CUT_NOTE = "\n[... {} characters omitted here ...]\n"
# One encoder for every tool input (``json.dumps`` with options builds one per call).
_encode = json.JSONEncoder(ensure_ascii=False).encode


def clip(text: str, cap: int | None) -> str:
    """``text`` cut to its head and tail when longer than ``cap``, with the cut marked."""
    if cap is None or len(text) <= cap:
        return text
    half = cap // 2
    return text[:half] + _CUT_NOTE.format(len(text) - 2 * half) + text[-half:]


def _drop_middle(pieces: _Pieces, cap: int | None, length: int, max_chars: int) -> str:
    """The rendering at ``cap`` (``length`` characters) without its middle. Only the
    messages the two ends reach are rendered: a long evicted range (thousands of messages)
    keeps a few hundred kilobytes of its rendering."""
    note = "\n\n[... {} characters of the transcript omitted here to fit the bound ...]\n\n"
    room = max(0, max_chars - len(note.format(length)))
    head = room // 4
    tail = room - head
    omitted = length - head - tail
    start = _render(pieces, cap, head)[:head]
    end = _render(pieces[::-1], cap, tail, reverse=True)[-tail:] if tail else ""
    return start + note.format(omitted) + end


def _render(
    pieces: _Pieces, cap: int | None, chars: float = math.inf, *, reverse: bool = False
) -> str:
    """The messages of ``pieces`` rendered at ``cap``, the first ones that reach ``chars``
    characters (in reverse order: their rendering is the end of the whole one)."""
    rendered: list[str] = []
    reached = -2  # no separator before the first message
    for message in pieces:
        if reached >= chars:
            break
        rendered.append("".join(p if isinstance(p, str) else clip(p.text, cap) for p in message))
        reached += 2 + len(rendered[-1])
    return "\n\n".join(rendered[::-1] if reverse else rendered)


# --- The artifact index --------------------------------------------------------------

_PATH_KEYS = frozenset(
    {"path", "paths", "file", "files", "file_path", "filepath", "filename", "file_name"}
    | {"notebook_path", "dir", "directory", "cwd", "url", "urls", "uri"}
)
_COMMAND_KEYS = frozenset({"command", "cmd", "script"})
_URL = re.compile(r"https?://[^\s'\"<>`)\]]+")
_PATH = re.compile(r"(?:~|\.{1,2})?/[\w.@+%=-]+(?:/[\w.@+%=-]*)*|[\w.@+%=-]+(?:/[\w.@+%=-]+)+")
_PATH_TOKEN = re.compile(rf"(?<![\w/.~@+%=-])(?:{_PATH.pattern})")
_OFFLOADED_DIR = "/large_tool_results/"
_OFFLOADED = re.compile(rf"{_OFFLOADED_DIR}[\w.-]+(?:/[\w.-]+)?")
_TRAILING = ".,;:'\""
# Redirection targets in command lines, not artifacts of the work.
_NOT_ARTIFACTS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"})


def artifact_index(evicted: Sequence[StoredMessage]) -> list[str]:
    """File paths and URLs the evicted range worked on, in order of first appearance.

    Taken from tool inputs: values under path-like keys (``path``, ``file_path``, ``url``,
    ...), path and URL tokens of command lines, and any other input value that is a path
    or URL on its own; plus the offloaded large tool results the range referred to.
    """
    found: dict[str, None] = {}
    for stored in evicted:
        for block in stored.message.blocks():
            if isinstance(block, ToolUseBlock):
                _collect_artifacts(block.input, "", found)
            elif isinstance(block, ToolResultBlock):
                text = block.text()
                # A substring search first: most results name no offloaded result, and the
                # expression would scan each of them through.
                if _OFFLOADED_DIR in text:
                    found.update(dict.fromkeys(_OFFLOADED.findall(text)))
    return list(found)


def _collect_artifacts(value: Any, key: str, found: dict[str, None]) -> None:
    """Adds the artifacts of a tool input ``value`` (under ``key``) to ``found``, in order."""
    if isinstance(value, str):  # the most common value first
        _add_artifacts_in_text(value.strip(), key, found)
    elif isinstance(value, dict):
        for child_key, child in value.items():
            _collect_artifacts(child, str(child_key).lower(), found)
    elif isinstance(value, list):
        for item in value:
            _collect_artifacts(item, key, found)


def _add_artifacts_in_text(value: str, key: str, found: dict[str, None]) -> None:
    if not value or len(value) > 1024 or "\n" in value:
        return
    if key in _COMMAND_KEYS:
        urls = _URL.findall(value)
        found.update(dict.fromkeys(url.rstrip(_TRAILING) for url in urls))
        for url in urls:
            value = value.replace(url, " ")
        paths = (path.rstrip(_TRAILING) for path in _PATH_TOKEN.findall(value))
        found.update(dict.fromkeys(path for path in paths if path not in _NOT_ARTIFACTS))
    elif key in _PATH_KEYS or _URL.fullmatch(value) or _PATH.fullmatch(value):
        found[value] = None
