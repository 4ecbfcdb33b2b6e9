"""Tool-argument truncation: the cheapest way to shrink an outgoing request.

In messages older than the keep window, large ``tool_use`` inputs (``write_file`` bodies,
``edit_file`` patches, any big argument) and large ``tool_result`` texts are replaced by a
preview plus a size note. The stored messages are never touched: this builds new frozen
messages for the outgoing copy only.

What never changes: ids, tool names, roles, ``is_error``, cache_control, block order and
block counts, and the keys of a tool input (it stays a JSON object with the same keys,
so the request stays valid). Only string values, and as a last resort whole values, are
shortened.

The output is a pure function of the input: no clock, no randomness, dict key order
kept, so the same history truncates to byte-identical requests turn after turn (which
keeps the prompt-cache prefix stable). Already truncated text carries the marker and is
left alone, so truncating twice gives the same result as truncating once. A value is
only ever replaced by something shorter.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hango.core.messages import ContentBlock, Message, TextBlock, ToolResultBlock, ToolUseBlock
from hango.tokens.base import Estimator
from hango.tokens.framing import FramedEstimator, compact_json

DEFAULT_PREVIEW_CHARS = 200
"""Characters kept from a truncated argument string, and from each end of a tool result."""

TRUNCATION_MARKER = re.compile(r"…\[truncated: \d+ chars, ~\d+ tokens; full content [^\]\n]*\]")
"""Matches the note left in truncated text (used to recognise already truncated values)."""


@dataclass(frozen=True)
class TruncationResult:
    """The truncated messages (the very input sequence when none was shortened) and how
    many blocks were shortened."""

    messages: Sequence[Message]
    truncated: int


@dataclass(frozen=True)
class _Cutter:
    """The settings of one truncation pass: the tokens a tool block may take before it is
    shortened, how to tell, and the note it leaves."""

    estimator: Estimator
    max_tokens: int
    preview_chars: int

    def note(self, original: str) -> str:
        tokens = self.estimator.estimate(original)
        return (
            f"…[truncated: {len(original)} chars, ~{tokens} tokens; "
            "full content in the stored transcript]"
        )

    def head(self, text: str) -> str:
        """``text`` cut to a head preview plus the note, or unchanged if that is not shorter."""
        return text if self._is_cut(text, tail=False) else self.force_head(text)

    def force_head(self, text: str) -> str:
        """Like :meth:`head`, even when ``text`` contains notes of its own (serialized JSON)."""
        shortened = text[: self.preview_chars] + self.note(text)
        return shortened if len(shortened) < len(text) else text

    def head_and_tail(self, text: str) -> str:
        """``text`` cut to its head and tail around the note, or unchanged if not shorter."""
        if self._is_cut(text, tail=True):
            return text
        keep = self.preview_chars
        shortened = f"{text[:keep]}\n{self.note(text)}\n{text[-keep:] if keep else ''}"
        return shortened if len(shortened) < len(text) else text

    def _is_cut(self, text: str, *, tail: bool) -> bool:
        """Whether ``text`` is already the output of :meth:`head` / :meth:`head_and_tail`."""
        slack = 1 if tail else 0  # the newlines around the note
        allowed_after = self.preview_chars + slack if tail else 0
        return any(
            found.start() <= self.preview_chars + slack and len(text) - found.end() <= allowed_after
            for found in TRUNCATION_MARKER.finditer(text)
        )

    def fits(self, text: str) -> bool:
        return self.estimator.estimate(text) <= self.max_tokens

    def covers(self, message: Message, tokens: int | None) -> bool:
        """Whether every tool block of ``message`` is within budget by the message's own
        estimate: ``tokens`` (the outgoing copy's, counted when the message joined it or
        stored with it), else the estimator's (cached for the message object). A
        :class:`FramedEstimator` counts in it, in full, the very text each block is judged
        on (an input's compact JSON, a result's text), so it bounds each block's estimate;
        not a result's several text parts, judged joined.
        """
        if not isinstance(self.estimator, FramedEstimator):
            return False
        tokens = self.estimator.estimate_message(message) if tokens is None else tokens
        return tokens <= self.max_tokens and all(
            isinstance(r.content, str | None) for r in message.tool_results()
        )


def truncate_tool_args(
    messages: Sequence[Message],
    *,
    protect_from: int,
    max_tokens: int,
    estimator: Estimator,
    preview_chars: int = DEFAULT_PREVIEW_CHARS,
) -> TruncationResult:
    """Shorten large tool inputs and results in ``messages[:protect_from]``.

    A ``tool_use`` whose input (its compact JSON, as the request carries it) is estimated
    over ``max_tokens`` gets each long string value cut to a ``preview_chars`` head plus a
    note; if the input is still over budget, each remaining large top-level value becomes
    a preview string of its JSON. A ``tool_result`` whose text is estimated over
    ``max_tokens`` keeps a head and a tail of ``preview_chars`` around the note.

    ``max_tokens`` decides *which* blocks are shortened; the preview size does not adapt
    to it, so keep ``max_tokens`` well above ``preview_chars`` worth of tokens.
    """
    given = {"protect_from": protect_from, "max_tokens": max_tokens, "preview_chars": preview_chars}
    for name, value in given.items():
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
    shortened = list(messages)
    count = 0
    cutter = _Cutter(estimator, max_tokens, preview_chars)
    for index in range(min(protect_from, len(messages))):
        message, blocks_cut = _truncate_message(messages[index], cutter, None)
        if blocks_cut:
            shortened[index] = message
            count += blocks_cut
    if count == 0:
        return TruncationResult(messages, 0)
    return TruncationResult(tuple(shortened), count)


class Truncation:
    """What truncation makes of one message under fixed settings, for the outgoing copy
    (which keeps the answer per position): the form sent, the blocks cut and the estimated
    tokens that saves. The form keeps the message's role, its blocks' order and their ids."""

    def __init__(self, *, max_tokens: int, estimator: Estimator) -> None:
        self.estimator = estimator
        self._cutter = _Cutter(estimator, max_tokens, DEFAULT_PREVIEW_CHARS)

    def __call__(self, message: Message, tokens: int) -> tuple[Message, int, int]:
        """``tokens``: the message's estimate (by this truncation's estimator)."""
        form, blocks = _truncate_message(message, self._cutter, tokens)  # message, 0: uncut
        saved = tokens - self.estimator.estimate_message(form) if blocks else 0
        return form, blocks, saved


def _truncate_message(message: Message, cutter: _Cutter, tokens: int | None) -> tuple[Message, int]:
    if isinstance(message.content, str) or cutter.covers(message, tokens):
        return message, 0
    blocks: list[ContentBlock] = []
    count = 0
    for block in message.content:
        replacement: ContentBlock | None = None
        if isinstance(block, ToolUseBlock):
            replacement = _truncate_tool_use(block, cutter)
        elif isinstance(block, ToolResultBlock):
            replacement = _truncate_tool_result(block, cutter)
        blocks.append(block if replacement is None else replacement)
        count += replacement is not None
    if count == 0:
        return message, 0
    return message.model_copy(update={"content": tuple(blocks)}), count


def _truncate_tool_use(block: ToolUseBlock, cutter: _Cutter) -> ToolUseBlock | None:
    """A copy of ``block`` with a shortened input, or ``None`` when it is within budget."""
    original: Any = block.input
    if cutter.fits(compact_json(original)):
        return None
    shortened = _shorten_strings(original, cutter)
    if not cutter.fits(compact_json(shortened)):
        shortened = _collapse_values(shortened, cutter)
    return None if shortened == original else block.model_copy(update={"input": shortened})


def _shorten_strings(value: Any, cutter: _Cutter) -> Any:
    """``value`` rebuilt with every long string cut to a head preview (never mutated)."""
    if isinstance(value, str):
        return cutter.head(value)
    if isinstance(value, dict):
        return {key: _shorten_strings(item, cutter) for key, item in value.items()}
    if isinstance(value, list):
        return [_shorten_strings(item, cutter) for item in value]
    if isinstance(value, tuple):
        return tuple(_shorten_strings(item, cutter) for item in value)
    return value


def _collapse_values(value: Any, cutter: _Cutter) -> Any:
    """Replace each large value by a preview of its JSON; a dict keeps all its keys."""
    if isinstance(value, dict):
        return {key: _collapse_one(item, cutter) for key, item in value.items()}
    return _collapse_one(value, cutter)


def _collapse_one(value: Any, cutter: _Cutter) -> Any:
    if isinstance(value, str):
        return value  # strings were already cut by _shorten_strings
    # The JSON text the value costs in the request (``str`` for anything not JSON).
    serialized = json.dumps(value, ensure_ascii=False, default=str)
    collapsed = cutter.force_head(serialized)
    return value if collapsed == serialized else collapsed


def _truncate_tool_result(block: ToolResultBlock, cutter: _Cutter) -> ToolResultBlock | None:
    """A copy of ``block`` with shortened text, or ``None`` when it is within budget."""
    content = block.content
    if content is None or cutter.fits(block.text()):
        return None
    if isinstance(content, str):
        new_content: str | tuple[Any, ...] = cutter.head_and_tail(content)
    else:
        new_content = tuple(_shorten_part(part, cutter) for part in content)
    return None if new_content == content else block.model_copy(update={"content": new_content})


def _shorten_part(part: Any, cutter: _Cutter) -> Any:
    if not isinstance(part, TextBlock):
        return part  # images are kept: the note is about text
    text = cutter.head_and_tail(part.text)
    return part if text == part.text else part.model_copy(update={"text": text})
