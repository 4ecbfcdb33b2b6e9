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
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from hango.core.identity import Derived, changed_positions, derived, edited
from hango.core.messages import ContentBlock, Message, TextBlock, ToolResultBlock, ToolUseBlock
from hango.tokens.base import Estimator

DEFAULT_PREVIEW_CHARS = 200
"""Characters kept from a truncated argument string, and from each end of a tool result."""

_NO_PATHS: Mapping[str, str] = MappingProxyType({})

TRUNCATION_MARKER = re.compile(r"…\[truncated: \d+ chars, ~\d+ tokens; full content [^\]\n]*\]")
"""Matches the note left in truncated text (used to recognise already truncated values)."""


@dataclass(frozen=True)
class TruncationResult:
    """The truncated messages and how many blocks were shortened.

    ``messages`` is the very input tuple when nothing was shortened (``truncated == 0``).
    """

    messages: Sequence[Message]
    truncated: int

    @property
    def changed(self) -> bool:
        return self.truncated > 0


class TruncationMemo:
    """Remembers how each message object truncated, so a repeat costs nothing.

    The loop sends the same stored message objects call after call; without this, every
    call would re-estimate every old tool block (O(history)), and every call would build
    new copies that miss the estimator's per-object cache. Entries are keyed by object
    identity and checked through a weak reference, so a reused id never answers for a
    different message and nothing is kept alive. The answer for a message depends on the
    pass's settings too, so use one memo per (max_tokens, preview_chars, offloaded).
    """

    def __init__(self) -> None:
        self._entries: dict[int, tuple[weakref.ref[Message], Message, int]] = {}

    def get(self, message: Message) -> tuple[Message, int] | None:
        entry = self._entries.get(id(message))
        if entry is None or entry[0]() is not message:
            return None
        return entry[1], entry[2]

    def put(self, message: Message, result: tuple[Message, int]) -> None:
        key = id(message)
        entries = self._entries

        def forget(_ref: weakref.ref[Message]) -> None:
            entries.pop(key, None)

        self._entries[key] = (weakref.ref(message, forget), *result)


@dataclass(frozen=True)
class _Cutter:
    """The settings of one truncation pass, with the note for one block's id."""

    estimator: Estimator
    preview_chars: int
    location: str | None

    def note(self, original: str) -> str:
        where = "in the stored transcript"
        if self.location:
            where += f" or at {self.location}"
        tokens = self.estimator.estimate(original)
        return f"…[truncated: {len(original)} chars, ~{tokens} tokens; full content {where}]"

    def head(self, text: str) -> str:
        """``text`` cut to a head preview plus the note, or unchanged if that is not shorter."""
        if self._is_cut(text, tail=False):
            return text
        return self.force_head(text)

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


def truncate_tool_args(
    messages: tuple[Message, ...],
    *,
    protect_from: int,
    max_tokens: int,
    estimator: Estimator,
    offloaded: Mapping[str, str] = _NO_PATHS,
    preview_chars: int = DEFAULT_PREVIEW_CHARS,
    memo: TruncationMemo | None = None,
) -> TruncationResult:
    """Shorten large tool inputs and results in ``messages[:protect_from]``.

    A ``tool_use`` whose serialized input is estimated over ``max_tokens`` gets each long
    string value cut to a ``preview_chars`` head plus a note; if the input is still over
    budget, each remaining large top-level value becomes a preview string of its JSON. A
    ``tool_result`` whose text is estimated over ``max_tokens`` keeps a head and a tail
    of ``preview_chars`` around the note. ``offloaded`` maps a tool_use id to where its
    full content can be read back; the note names that path when present.

    ``max_tokens`` decides *which* blocks are shortened; the preview size does not adapt
    to it, so keep ``max_tokens`` well above ``preview_chars`` worth of tokens.
    """
    if protect_from < 0:
        raise ValueError(f"protect_from must be >= 0, got {protect_from}")
    if max_tokens < 0:
        raise ValueError(f"max_tokens must be >= 0, got {max_tokens}")
    if preview_chars < 0:
        raise ValueError(f"preview_chars must be >= 0, got {preview_chars}")
    shortened = list(messages)
    count = 0
    for index in range(min(protect_from, len(messages))):
        message, blocks_cut = _truncated_once(
            messages[index], max_tokens, estimator, offloaded, preview_chars, memo
        )
        if blocks_cut:
            shortened[index] = message
            count += blocks_cut
    if count == 0:
        return TruncationResult(messages, 0)
    return TruncationResult(tuple(shortened), count)


def _truncated_once(
    message: Message,
    max_tokens: int,
    estimator: Estimator,
    offloaded: Mapping[str, str],
    preview_chars: int,
    memo: TruncationMemo | None,
) -> tuple[Message, int]:
    """How ``message`` truncates (the memo's answer when it has seen the object)."""
    known = memo.get(message) if memo is not None else None
    if known is None:
        known = _truncate_message(message, max_tokens, estimator, offloaded, preview_chars)
        if memo is not None:
            memo.put(message, known)
    return known


class TruncationLedger:
    """``truncate_tool_args`` over one session's successive outgoing copies, paying for change.

    Call after call the outgoing messages are the previous call's objects plus what was
    appended; what truncation makes of each position (the truncated form, the blocks it
    cut, the tokens it saves) is kept and redone only at positions whose message changed
    (:func:`~hango.core.identity.changed_positions`). Positions are worked out lazily, up
    to the furthest one asked about, so a message in the keep window is never truncated
    before it leaves it. Sums over a range come from running totals (a Fenwick tree), so
    asking how much a range would clear costs O(log n), not O(range).
    """

    def __init__(
        self,
        *,
        max_tokens: int,
        estimator: Estimator,
        memo: TruncationMemo | None = None,
        preview_chars: int = DEFAULT_PREVIEW_CHARS,
    ) -> None:
        self.max_tokens = max_tokens
        self.estimator = estimator
        self.memo = memo if memo is not None else TruncationMemo()
        self.preview_chars = preview_chars
        self._messages: Sequence[Message] = ()
        self._forms: list[Message] = []
        self._blocks = RunningSums()
        self._saved = RunningSums()
        # The input before the latest update and the positions that update changed.
        self._moved: tuple[Sequence[Message], list[int]] = ((), [])
        # The latest truncated copy: its messages, the cut and the input it was made from.
        self._last: tuple[Derived, int, Sequence[Message]] | None = None

    def update(self, messages: Sequence[Message]) -> None:
        """Follow the new outgoing copy: positions whose message changed are redone."""
        known = min(len(self._forms), len(messages))
        del self._forms[known:]
        self._blocks.truncate(known)
        self._saved.truncate(known)
        changed = changed_positions(self._messages, messages)
        for index in changed:
            if index >= known:
                break
            form, blocks, saved = self._work_out(messages[index])
            self._forms[index] = form
            self._blocks.set(index, blocks)
            self._saved.set(index, saved)
        if messages is not self._messages:
            self._moved = (self._messages, changed)
        self._messages = messages

    def blocks_cut(self, start: int, end: int) -> int:
        """Blocks truncation shortens in ``messages[start:end]``."""
        self._reach(end)
        return self._blocks.range(start, end)

    def tokens_saved(self, start: int, end: int) -> int:
        """Estimated tokens truncating ``messages[start:end]`` clears."""
        self._reach(end)
        return self._saved.range(start, end)

    def truncated(self, protect_from: int) -> TruncationResult:
        """What ``truncate_tool_args(messages, protect_from=...)`` returns, from the ledger."""
        if protect_from < 0:
            raise ValueError(f"protect_from must be >= 0, got {protect_from}")
        end = min(protect_from, len(self._messages))
        count = self.blocks_cut(0, end)
        if count == 0:
            return TruncationResult(self._messages, 0)
        made = self._copy(end)
        self._last = (made, end, self._messages)
        return TruncationResult(made, count)

    def _copy(self, end: int) -> Derived:
        """The truncated forms below ``end``, the messages from there, made in what changed."""
        messages, forms = self._messages, self._forms
        parent, changes = self._lineage(end)
        if parent is None:
            return derived([*forms[:end], *messages[end:]], None)
        keep = min(len(parent), len(messages))
        return edited(
            parent,
            {i: forms[i] if i < end else messages[i] for i in changes if i < keep},
            keep=keep,
            tail=[forms[i] if i < end else messages[i] for i in range(keep, len(messages))],
        )

    def _lineage(self, end: int) -> tuple[Derived | None, list[int]]:
        """The previous truncated copy and where this one may differ from it, if known.

        Below the cut a position holds the form of its message, which changes only with
        the message; above it, the message itself. So against the copy made from the
        previous input, the changes are the input's changes and the positions between
        the two cuts.
        """
        if self._last is None:
            return None, []
        made, cut, source = self._last
        if source is self._messages:
            changes: list[int] = []
        elif source is self._moved[0]:
            changes = list(self._moved[1])
        else:
            return None, []
        changes.extend(range(min(cut, end), max(cut, end)))
        return made, changes

    def _reach(self, end: int) -> None:
        for index in range(len(self._forms), min(end, len(self._messages))):
            form, blocks, saved = self._work_out(self._messages[index])
            self._forms.append(form)
            self._blocks.append(blocks)
            self._saved.append(saved)

    def _work_out(self, message: Message) -> tuple[Message, int, int]:
        form, blocks = _truncated_once(
            message, self.max_tokens, self.estimator, _NO_PATHS, self.preview_chars, self.memo
        )
        if not blocks:
            return message, 0, 0
        estimate = self.estimator.estimate_message
        return form, blocks, estimate(message) - estimate(form)


class RunningSums:
    """Integers by position with O(log n) point updates and range sums (a Fenwick tree).

    Grows and shrinks at its end only, which is how an outgoing copy changes.
    """

    def __init__(self) -> None:
        self._values: list[int] = []
        self._tree: list[int] = [0]  # 1-based: _tree[i] sums values (i - lowbit(i), i]

    def __len__(self) -> int:
        return len(self._values)

    def append(self, value: int) -> None:
        self._values.append(value)
        i = len(self._values)
        low = i & -i
        # The node covers (i - low, i]: the new value plus what precedes it in that span.
        self._tree.append(value + self.prefix(i - 1) - self.prefix(i - low))

    def truncate(self, length: int) -> None:
        """Keep the first ``length`` values (a node depends only on values before it)."""
        del self._values[length:]
        del self._tree[length + 1 :]

    def set(self, index: int, value: int) -> None:
        delta = value - self._values[index]
        if not delta:
            return
        self._values[index] = value
        i = index + 1
        while i < len(self._tree):
            self._tree[i] += delta
            i += i & -i

    def prefix(self, end: int) -> int:
        """The sum of the first ``end`` values."""
        total = 0
        i = min(end, len(self._values))
        while i > 0:
            total += self._tree[i]
            i -= i & -i
        return total

    def range(self, start: int, end: int) -> int:
        """The sum of ``values[start:end]``."""
        return self.prefix(end) - self.prefix(start) if end > start else 0


def _truncate_message(
    message: Message,
    max_tokens: int,
    estimator: Estimator,
    offloaded: Mapping[str, str],
    preview_chars: int,
) -> tuple[Message, int]:
    if isinstance(message.content, str):
        return message, 0
    blocks: list[ContentBlock] = []
    count = 0
    for block in message.content:
        replacement: ContentBlock | None = None
        if isinstance(block, ToolUseBlock):
            cutter = _Cutter(estimator, preview_chars, offloaded.get(block.id))
            replacement = _truncate_tool_use(block, max_tokens, cutter)
        elif isinstance(block, ToolResultBlock):
            cutter = _Cutter(estimator, preview_chars, offloaded.get(block.tool_use_id))
            replacement = _truncate_tool_result(block, max_tokens, cutter)
        if replacement is None:
            blocks.append(block)
        else:
            blocks.append(replacement)
            count += 1
    if count == 0:
        return message, 0
    return message.model_copy(update={"content": tuple(blocks)}), count


def _truncate_tool_use(
    block: ToolUseBlock, max_tokens: int, cutter: _Cutter
) -> ToolUseBlock | None:
    """A copy of ``block`` with a shortened input, or ``None`` when it is within budget."""
    original: Any = block.input
    if cutter.estimator.estimate(_dumps(original)) <= max_tokens:
        return None
    shortened = _shorten_strings(original, cutter)
    if cutter.estimator.estimate(_dumps(shortened)) > max_tokens:
        shortened = _collapse_values(shortened, cutter)
    if shortened == original:
        return None
    return block.model_copy(update={"input": shortened})


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
    serialized = _dumps(value)
    collapsed = cutter.force_head(serialized)
    return value if collapsed == serialized else collapsed


def _truncate_tool_result(
    block: ToolResultBlock, max_tokens: int, cutter: _Cutter
) -> ToolResultBlock | None:
    """A copy of ``block`` with shortened text, or ``None`` when it is within budget."""
    content = block.content
    if content is None or cutter.estimator.estimate(block.text()) <= max_tokens:
        return None
    if isinstance(content, str):
        new_content: str | tuple[Any, ...] = cutter.head_and_tail(content)
    else:
        new_content = tuple(_shorten_part(part, cutter) for part in content)
    if new_content == content:
        return None
    return block.model_copy(update={"content": new_content})


def _shorten_part(part: Any, cutter: _Cutter) -> Any:
    if not isinstance(part, TextBlock):
        return part  # images are kept: the note is about text
    text = cutter.head_and_tail(part.text)
    return part if text == part.text else part.model_copy(update={"text": text})


def _dumps(value: Any) -> str:
    """The JSON text a value costs in the request (``str`` for anything not JSON)."""
    return json.dumps(value, ensure_ascii=False, default=str)
