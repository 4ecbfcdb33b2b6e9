"""Loading recorded agent sessions for ``hango replay``.

Two shapes are read:

* a JSON file in the Messages API request shape ``{"system", "tools", "messages"}``
  (extra top-level keys such as ``source`` are ignored);
* a Claude Code session JSONL file: one entry per line, where ``user`` and ``assistant``
  entries carry ``message: {role, content}``. Claude Code streams one assistant reply
  over several entries and writes each tool result as its own entry, so consecutive
  entries of one role are merged back into one message; every other entry type
  (``summary``, ``system``, ``file-history-snapshot``, sub-agent side chains) is skipped.
  Two recorded figures are kept beside the messages: the ``usage`` the API returned for
  each reply (``message.usage`` of its assistant entries, once per reply ``message.id``;
  the last entry of a streamed reply wins) and each message's ``timestamp``, which lets
  ``hango replay`` price the recorded session and expire the simulated cache on time.

A transcript is validated completely before anything uses it (roles, tool_use /
tool_result pairing, unique tool ids) and every error names the line (JSONL) or the
message index (JSON), so a replay never starts on input it would choke on halfway.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, TypeVar, overload

from pydantic import BaseModel, ValidationError

from hango.compaction.validate import position_violations
from hango.core.api_rules import MAX_TOOL_INPUT_DEPTH, message_problem
from hango.core.errors import TranscriptError
from hango.core.messages import (
    ContentBlock,
    Message,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolDefinition,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)

ItemT = TypeVar("ItemT", bound=BaseModel)

TranscriptFormat = Literal["messages-json", "claude-code-jsonl"]


@dataclass(frozen=True)
class Transcript:
    """A validated recorded session: what the agent was given and what was said."""

    source: str
    format: TranscriptFormat
    system: tuple[TextBlock, ...]
    tools: tuple[ToolDefinition, ...]
    messages: tuple[Message, ...]
    locations: tuple[str, ...]  # where each message came from, for error messages
    # The API's usage of each recorded reply, in order (Claude Code JSONL only).
    recorded_usage: tuple[Usage, ...] = ()
    # When each message was recorded, in seconds since the epoch (None: not recorded).
    times: tuple[float | None, ...] = field(default=())
    # How many messages it has (``messages`` is empty when they were not kept).
    count: int = 0
    # The messages parsed again, one at a time, when they were not kept.
    reread: Callable[[], Iterator[Message]] | None = None

    def each_message(self) -> Iterator[Message]:
        """The messages in order, kept or read again as they are asked for."""
        return iter(self.messages) if self.reread is None else self.reread()

    def time_of(self, index: int) -> float | None:
        """When message ``index`` was recorded, if the transcript says."""
        return self.times[index] if index < len(self.times) else None

    @property
    def assistant_messages(self) -> int:
        return sum(1 for message in self.each_message() if message.role == "assistant")


def load_transcript(path: Path, *, max_bytes: int, keep: bool = True) -> Transcript:
    """Read and validate a transcript file, or raise :class:`TranscriptError`.

    A file over ``max_bytes`` is refused before it is read (a pipe, whose size is not
    known, is read up to the limit and no further): parsing holds the text and every
    message at once, a few times the file's size.
    """
    source = str(path)
    try:
        with path.open("rb") as handle:
            _refuse_over(os.fstat(handle.fileno()).st_size, max_bytes, source)
            data = handle.read(max_bytes + 1)
    except FileNotFoundError:
        raise TranscriptError("no such file", source=source, location="file") from None
    except OSError as exc:
        raise TranscriptError(f"cannot read it ({exc})", source=source, location="file") from None
    _refuse_over(len(data), max_bytes, source)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TranscriptError(
            f"not UTF-8 (byte {exc.start}: {exc.reason})", source=source, location="file"
        ) from None
    del data
    if _looks_like_jsonl(path, text):
        return parse_claude_code_jsonl(text, source, keep=keep)
    return parse_messages_json(text, source)


def _refuse_over(size: int, max_bytes: int, source: str) -> None:
    if size > max_bytes:
        raise TranscriptError(
            f"{size:,} bytes, over the replay limit of {max_bytes:,} "
            "(raise it with --max-bytes or HANGO_REPLAY_MAX_BYTES)",
            source=source,
            location="file",
        )


def _looks_like_jsonl(path: Path, text: str) -> bool:
    if path.suffix == ".jsonl":
        return True
    if path.suffix == ".json":
        return False
    first = text.lstrip().split("\n", 1)[0]
    try:
        entry = json.loads(first)
    except json.JSONDecodeError:
        return False
    return isinstance(entry, dict) and "messages" not in entry


# --- Messages API JSON -------------------------------------------------------------------


def parse_messages_json(text: str, source: str) -> Transcript:
    """Parse ``{"system", "tools", "messages"}``; errors name the message index."""
    try:
        body = _json(text, source, "top level")
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        raise TranscriptError(
            f"not valid JSON ({exc.msg})", source=source, location=where
        ) from None
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        raise TranscriptError(
            'expected a JSON object with a "messages" list (the Messages API request shape)',
            source=source,
            location="top level",
        )
    system = _parse_system(body.get("system"), source)
    tools = _parse_tools(body.get("tools"), source)
    merged = _MessageBuilder()
    for index, raw in enumerate(body["messages"]):
        location = f"messages[{index}]"
        message = _message(raw, source, location)
        merged.add(message.role, message.blocks(), location, original=message)
    return _validated(source, "messages-json", system, tools, merged)


def _parse_system(raw: Any, source: str) -> tuple[TextBlock, ...]:
    if raw is None or raw == "":
        return ()
    if isinstance(raw, str):
        return (TextBlock(text=raw),)
    if not isinstance(raw, list):
        raise TranscriptError(
            "must be a string or a list of text blocks", source=source, location="system"
        )
    return _parse_items(TextBlock, raw, source, "system")


def _parse_items(model: type[ItemT], raw: list[Any], source: str, key: str) -> tuple[ItemT, ...]:
    """Each item of the ``key`` list as ``model``; a bad one is named by its index."""
    items = []
    for index, item in enumerate(raw):
        try:
            items.append(model.model_validate(item))
        except ValidationError as exc:
            raise TranscriptError(
                _first_error(exc), source=source, location=f"{key}[{index}]"
            ) from None
    return tuple(items)


def _parse_tools(raw: Any, source: str) -> tuple[ToolDefinition, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise TranscriptError("must be a list of tool definitions", source=source, location="tools")
    tools = _parse_items(ToolDefinition, raw, source, "tools")
    names = [tool.name for tool in tools]
    for index, name in enumerate(names):
        if name in names[:index]:
            raise TranscriptError(
                f"duplicate tool name {name!r}", source=source, location=f"tools[{index}]"
            )
    return tools


def _message(raw: Any, source: str, location: str) -> Message:
    """One raw message; only ``role`` and ``content`` are kept (the API accepts no others)."""
    if not isinstance(raw, dict) or "role" not in raw or "content" not in raw:
        raise TranscriptError(
            'expected an object with "role" and "content"', source=source, location=location
        )
    try:
        message = Message.model_validate({"role": raw["role"], "content": raw["content"]})
    except ValidationError as exc:
        raise TranscriptError(_first_error(exc), source=source, location=location) from None
    problem = message_problem(message)  # ids, names, finite numbers, depth
    if problem is not None:
        raise TranscriptError(problem, source=source, location=location)
    return message


def _json(text: str, source: str, location: str) -> Any:
    """``json.loads(text)``, a nesting too deep for the parser named as such."""
    try:
        return json.loads(text)
    except RecursionError:
        raise TranscriptError(
            "JSON nested too deep to parse (thousands of levels); a tool input may nest "
            f"at most {MAX_TOOL_INPUT_DEPTH} levels",
            source=source,
            location=location,
        ) from None


def _first_error(exc: ValidationError) -> str:
    # For a union (string or blocks) the deepest location is the branch that nearly matched.
    first = max(exc.errors(), key=lambda error: len(error["loc"]))
    where = _readable_location(first["loc"])
    return f"{where}: {first['msg']}" if where else str(first["msg"])


def _readable_location(loc: tuple[int | str, ...]) -> str:
    """``content[0].tool_use_id`` rather than pydantic's union and tag names."""
    shown = ""
    after_index = False
    for part in loc:
        if isinstance(part, int):
            shown += f"[{part}]"
            after_index = True
        elif "[" in part or (after_index and part in _BLOCK_TAGS) or part in ("str", "tuple"):
            after_index = False
        else:
            shown += f".{part}" if shown else part
            after_index = False
    return shown


_BLOCK_TAGS = frozenset(
    {"text", "image", "tool_use", "tool_result", "thinking", "redacted_thinking", "other"}
)


# --- Claude Code JSONL ---------------------------------------------------------------------


def _lines(text: str) -> Iterator[str]:
    """The lines of ``text`` one at a time (``splitlines`` would copy them all at once)."""
    start = 0
    while start < len(text):
        end = text.find("\n", start)
        if end < 0:
            end = len(text)
        yield text[start:end].rstrip("\r")
        start = end + 1


def parse_claude_code_jsonl(text: str, source: str, *, keep: bool = True) -> Transcript:
    """Parse a Claude Code session log; errors name the line.

    ``keep=False``: the messages are validated as they are read and not kept; the
    transcript reads them again from ``text`` when asked (:meth:`Transcript.each_message`),
    so a replay holds a few messages of the file at a time, not all of it parsed.
    """
    usages: dict[str, Usage] = {}
    checked = _Checked(source, keep=keep)
    for draft in _jsonl_drafts(text, source, usages):
        checked.add(draft)
    transcript = checked.transcript("claude-code-jsonl", (), ())
    if not keep:
        transcript = replace(transcript, reread=lambda: _reread_jsonl(text, source))
    return replace(transcript, recorded_usage=tuple(usages.values()))


def _jsonl_drafts(text: str, source: str, usages: dict[str, Usage]) -> Iterator[_Draft]:
    """The messages of a Claude Code log as merged drafts, each once no later entry can
    change it; ``usages`` gets each reply's recorded usage."""
    merged = _MessageBuilder()
    for number, entry in _jsonl_entries(text, source):
        location = f"line {number}"
        if entry.get("type") not in ("user", "assistant") or entry.get("isSidechain") is True:
            continue
        raw = entry.get("message")
        role = entry["type"]
        if not isinstance(raw, dict) or raw.get("role") != role:
            raise TranscriptError(
                f'a {role} entry needs "message": {{"role": "{role}", "content": ...}}',
                source=source,
                location=location,
            )
        message = _message(raw, source, location)
        _keep_usage(usages, raw, number, source)
        kept = tuple(block for block in message.blocks() if _worth_replaying(block))
        if kept:
            at = _timestamp(entry.get("timestamp"), source, location)
            merged.add(message.role, kept, location, reply_id=raw.get("id"), at=at)
            yield from merged.settled()
    yield from merged.drafts


def _reread_jsonl(text: str, source: str) -> Iterator[Message]:
    """The messages of a log validated before, parsed again one at a time."""
    for draft in _jsonl_drafts(text, source, {}):
        yield _draft_message(draft)


def _keep_usage(usages: dict[str, Usage], raw: dict[str, Any], number: int, source: str) -> None:
    """The reply's recorded ``usage``, once per reply id (a later entry's replaces it).

    A reply that read no prompt token at all (Claude Code records its own error notices
    as assistant entries with zero usage) was no API call and is not counted.
    """
    if raw.get("role") != "assistant" or raw.get("usage") is None:
        return
    try:
        usage = Usage.model_validate(raw["usage"])
    except ValidationError as exc:
        raise TranscriptError(
            f"usage: {_first_error(exc)}", source=source, location=f"line {number}"
        ) from None
    fields = (usage.input_tokens, usage.cache_read_input_tokens, usage.cache_creation_input_tokens)
    if any(value is not None and value < 0 for value in fields):
        raise TranscriptError(
            "usage: token counts cannot be negative", source=source, location=f"line {number}"
        )
    if usage.total_input_tokens() == 0:
        return
    reply = raw.get("id")
    usages[reply if isinstance(reply, str) else f"line {number}"] = usage


def _timestamp(raw: Any, source: str, location: str) -> float | None:
    """An entry's ISO 8601 ``timestamp`` in seconds since the epoch (absent: ``None``)."""
    if raw is None:
        return None
    moment = None
    if isinstance(raw, str):
        try:
            moment = datetime.fromisoformat(raw.replace("Z", "+00:00"))
        except ValueError:
            moment = None
    if moment is None or moment.tzinfo is None:
        raise TranscriptError(
            f"timestamp {raw!r} is not an ISO 8601 time with a zone",
            source=source,
            location=location,
        )
    return moment.timestamp()


def _jsonl_entries(text: str, source: str) -> Iterator[tuple[int, dict[str, Any]]]:
    for number, line in enumerate(_lines(text), start=1):
        if not line.strip():
            continue
        try:
            entry = _json(line, source, f"line {number}")
        except json.JSONDecodeError as exc:
            raise TranscriptError(
                f"not valid JSON ({exc.msg}, column {exc.colno})",
                source=source,
                location=f"line {number}",
            ) from None
        if not isinstance(entry, dict):
            raise TranscriptError(
                "expected a JSON object", source=source, location=f"line {number}"
            )
        yield number, entry


def _worth_replaying(block: ContentBlock) -> bool:
    # Recorded thinking is signed for the original model and request; the replayed
    # requests do not enable thinking, so it is left out (as the API would ignore it).
    if isinstance(block, ThinkingBlock | RedactedThinkingBlock):
        return False
    # The API rejects empty text blocks; Claude Code occasionally records them.
    return not (isinstance(block, TextBlock) and not block.text.strip())


# --- merging and validation ----------------------------------------------------------------


@dataclass
class _Draft:
    role: str
    blocks: list[ContentBlock]
    locations: list[str]  # one per block
    where: str  # where the message starts (it may have no block at all)
    reply_id: str | None = None
    original: Message | None = None  # kept as recorded when nothing was merged into it
    at: float | None = None  # when its first entry was recorded


class _MessageBuilder:
    """Merges consecutive same-role entries into messages, remembering each block's origin."""

    def __init__(self) -> None:
        self.drafts: list[_Draft] = []

    def add(
        self,
        role: str,
        blocks: tuple[ContentBlock, ...],
        location: str,
        *,
        reply_id: Any = None,
        original: Message | None = None,
        at: float | None = None,
    ) -> None:
        origins = [location] * len(blocks)
        if self._continues_interleaved_reply(role, reply_id):
            # One streamed reply whose tool results were logged between its parts: the
            # parts belong to the assistant message before those results.
            self._extend(self.drafts[-2], blocks, origins)
        elif self.drafts and self.drafts[-1].role == role:
            self._extend(self.drafts[-1], blocks, origins)
        else:
            reply = reply_id if isinstance(reply_id, str) else None
            self.drafts.append(_Draft(role, list(blocks), origins, location, reply, original, at))

    @staticmethod
    def _extend(draft: _Draft, blocks: tuple[ContentBlock, ...], origins: list[str]) -> None:
        draft.blocks.extend(blocks)
        draft.locations.extend(origins)
        draft.original = None

    def settled(self) -> Iterator[_Draft]:
        """The drafts no later entry can change, taken out of the builder: all but the
        last two (an entry extends the last draft, or the one before across results)."""
        while len(self.drafts) > 2:
            yield self.drafts.pop(0)

    def _continues_interleaved_reply(self, role: str, reply_id: Any) -> bool:
        if role != "assistant" or not isinstance(reply_id, str) or len(self.drafts) < 2:
            return False
        previous, between = self.drafts[-2], self.drafts[-1]
        if between.role != "user":
            return False
        only_results = all(isinstance(block, ToolResultBlock) for block in between.blocks)
        return previous.reply_id == reply_id and only_results


def _validated(
    source: str,
    fmt: TranscriptFormat,
    system: tuple[TextBlock, ...],
    tools: tuple[ToolDefinition, ...],
    merged: _MessageBuilder,
) -> Transcript:
    checked = _Checked(source, keep=True)
    for draft in merged.drafts:
        checked.add(draft)
    return checked.transcript(fmt, system, tools)


def _draft_message(draft: _Draft) -> Message:
    return draft.original or Message.model_validate(
        {"role": draft.role, "content": tuple(draft.blocks)}
    )


class _Around(Sequence[Message]):
    """The messages around one position of a stream, at their positions in the whole
    conversation (what :func:`position_violations` looks at: the position and its two
    neighbours), ``length`` long so far."""

    def __init__(self, messages: dict[int, Message], length: int) -> None:
        self.messages, self.length = messages, length

    def __len__(self) -> int:
        return self.length

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Message]: ...
    def __getitem__(self, index: int | slice) -> Message | Sequence[Message]:
        if isinstance(index, slice):
            raise TypeError("the messages around a position are read one at a time")
        return self.messages[index]


class _Checked:
    """A transcript's messages validated as they come, a message once its follower is known.

    Everything the API would refuse (roles, tool_use / tool_result pairing, unique tool
    ids, empty content or text, a result given twice) is found here, so that nothing is
    written for a transcript that cannot replay. The first problem of each kind is kept
    and raised at the end in the order a check of the whole list raised them (the first
    role, the pairing, an assistant message at all, the API's rules), so the error does
    not depend on whether the messages were kept.
    """

    def __init__(self, source: str, *, keep: bool) -> None:
        self.source, self.keep = source, keep
        # The last three messages: the one being checked and its neighbours.
        self.recent: list[tuple[_Draft, Message]] = []
        self.count = self.assistants = 0
        self.use_ids: set[str] = set()  # for the pairing check's duplicate ids
        self.seen_ids: set[str] = set()  # for the API's rules
        self.problems: dict[str, TranscriptError] = {}
        self.messages: list[Message] = []
        self.locations: list[str] = []
        self.times: list[float | None] = []

    def add(self, draft: _Draft) -> None:
        message = _draft_message(draft)
        if not self.count and draft.role != "user":
            self._problem("role", "the conversation must start with a user message", draft.where)
        self.count += 1
        self.assistants += draft.role == "assistant"
        self.recent = [*self.recent[-2:], (draft, message)]
        if self.count > 1:
            self._check(self.count - 2)
        self.times.append(draft.at)
        if self.keep:
            self.messages.append(message)
            self.locations.append(draft.where)

    def transcript(
        self,
        fmt: TranscriptFormat,
        system: tuple[TextBlock, ...],
        tools: tuple[ToolDefinition, ...],
    ) -> Transcript:
        """The validated transcript, or the first problem found."""
        if not self.count:
            raise TranscriptError(
                "no user or assistant messages", source=self.source, location="file"
            )
        self._check(self.count - 1)
        if not self.assistants:
            self._problem("assistant", "no assistant message to replay", "file")
        for kind in ("role", "pairing", "assistant", "rules"):
            if kind in self.problems:
                raise self.problems[kind]
        return Transcript(
            self.source,
            fmt,
            system,
            tools,
            tuple(self.messages),
            tuple(self.locations),
            times=tuple(self.times),
            count=self.count,
        )

    def _check(self, index: int) -> None:
        """Check the message at ``index`` (the one before the newest, or the newest)."""
        at = len(self.recent) - (self.count - index)
        draft = self.recent[at][0]
        previous = self.recent[at - 1][0] if index else None
        follower = self.recent[at + 1][0] if at + 1 < len(self.recent) else None
        if "pairing" not in self.problems:
            try:
                _check_pair(previous, draft, follower, self.source, self.use_ids)
            except TranscriptError as error:
                self.problems["pairing"] = error
        if "rules" not in self.problems:
            first = index - at
            around = {first + n: message for n, (_, message) in enumerate(self.recent)}
            for violation in position_violations(_Around(around, self.count), index, self.seen_ids):
                self._problem("rules", violation.detail, draft.where)
                break

    def _problem(self, kind: str, detail: str, location: str) -> None:
        self.problems.setdefault(
            kind, TranscriptError(detail, source=self.source, location=location)
        )


def _check_pair(
    previous: _Draft | None,
    draft: _Draft,
    follower: _Draft | None,
    source: str,
    seen: set[str],
) -> None:
    """Every tool_use answered in the next message, every tool_result answering the previous."""
    asked = _tool_use_ids(draft, source, seen)
    answered = _answered_ids(follower)
    for tool_id, location in asked.items():
        if follower is not None and tool_id not in answered:
            raise TranscriptError(
                f"tool_use {tool_id} has no tool_result in the next message",
                source=source,
                location=location,
            )
    previous_asked = _tool_use_ids(previous, source, None) if previous is not None else {}
    for block, location in zip(draft.blocks, draft.locations, strict=True):
        if isinstance(block, ToolResultBlock) and block.tool_use_id not in previous_asked:
            raise TranscriptError(
                f"tool_result for {block.tool_use_id} answers no tool_use of the previous message",
                source=source,
                location=location,
            )


def _tool_use_ids(draft: _Draft, source: str, seen: set[str] | None) -> dict[str, str]:
    asked: dict[str, str] = {}
    for block, location in zip(draft.blocks, draft.locations, strict=True):
        if not isinstance(block, ToolUseBlock):
            continue
        if draft.role != "assistant":
            raise TranscriptError("tool_use in a user message", source=source, location=location)
        if seen is not None:
            if block.id in seen:
                raise TranscriptError(
                    f"duplicate tool_use id {block.id}", source=source, location=location
                )
            seen.add(block.id)
        asked[block.id] = location
    return asked


def _answered_ids(draft: _Draft | None) -> set[str]:
    if draft is None:
        return set()
    return {block.tool_use_id for block in draft.blocks if isinstance(block, ToolResultBlock)}


def split_turns(messages: Iterable[Message]) -> list[tuple[Message, ...]]:
    """Cut a conversation into turns: each starts at a user message that answers no tool."""
    return list(each_turn(messages))


def each_turn(messages: Iterable[Message]) -> Iterator[tuple[Message, ...]]:
    """:func:`split_turns` one turn at a time, reading ``messages`` as it goes."""
    turn: list[Message] = []
    for message in messages:
        if turn and message.role == "user" and not any(message.tool_results()):
            yield tuple(turn)
            turn = []
        turn.append(message)
    if turn:
        yield tuple(turn)
