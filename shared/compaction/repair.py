"""Makes the outgoing copy of a stored transcript sendable, without touching the store.

The store is append-only, so whatever went into it stays: an assistant reply the API
returned with empty content, a turn that crashed between a tool call and its result, a
caller that appended a result twice, ``cache_control`` markers a client put on its own
messages. Sent as they are, any of these earns a 400 on every later call, and the session
is stuck for good. This module fixes them in the copy, one message for one message (the
copy stays aligned with the store's sequence numbers):

- empty or whitespace-only text blocks are dropped, and a message left with nothing
  gets a short placeholder;
- a user message answers exactly the tool calls of the assistant message before it:
  results for unknown or already answered ids are dropped, a call with no recorded result
  gets an error result saying so, and results come first in the message;
- ``cache_control`` is removed from message blocks: message breakpoints belong to the
  prompt-cache middleware, which must stay within the API's limit of four.

Unchanged messages are returned as the very same objects (the estimator caches by
identity).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from shared.core.messages import (
    ContentBlock,
    Message,
    StoredMessage,
    TextBlock,
    ToolResultBlock,
    WireModel,
)

BlockT = TypeVar("BlockT", bound=WireModel)

EMPTY_PLACEHOLDER = "[empty message]"
MISSING_RESULT = "[no result was recorded for this tool call; it was interrupted]"


def sendable(messages: Sequence[Message]) -> tuple[Message, ...]:
    """The messages with every repair above applied; the same objects where none was needed."""
    repaired: list[Message] = []
    for index, message in enumerate(messages):
        previous = messages[index - 1] if index > 0 else None
        repaired.append(_repair(message, previous))
    return tuple(repaired)


def _repair(message: Message, previous: Message | None) -> Message:
    if isinstance(message.content, str) and message.content.strip():
        awaited = previous is not None and any(previous.tool_uses())
        if message.role == "assistant" or not awaited:
            return message
    blocks = [_without_cache_control(b) for b in message.blocks() if not _is_empty_text(b)]
    if message.role == "user":
        blocks = _answering(blocks, previous)
    if not blocks:
        blocks = [TextBlock(text=EMPTY_PLACEHOLDER)]
    if _same(blocks, message):
        return message
    return Message(role=message.role, content=tuple(blocks))


def _answering(blocks: list[ContentBlock], previous: Message | None) -> list[ContentBlock]:
    """Exactly one result per call of ``previous``, in call order, ahead of anything else."""
    calls = [use.id for use in previous.tool_uses()] if previous is not None else []
    results: dict[str, ToolResultBlock] = {}
    others: list[ContentBlock] = []
    for block in blocks:
        if isinstance(block, ToolResultBlock):
            if block.tool_use_id in calls and block.tool_use_id not in results:
                results[block.tool_use_id] = block
        else:
            others.append(block)
    answered = [results.get(i) or _missing(i) for i in calls]
    return [*answered, *others]


def _missing(tool_use_id: str) -> ToolResultBlock:
    return ToolResultBlock(tool_use_id=tool_use_id, content=MISSING_RESULT, is_error=True)


def _is_empty_text(block: ContentBlock) -> bool:
    return isinstance(block, TextBlock) and not block.text.strip()


def _without_cache_control(block: ContentBlock) -> ContentBlock:
    if isinstance(block, ToolResultBlock):
        block = _clean_result(block)
    if getattr(block, "cache_control", None) is None:
        return block
    return _dropping_cache_control(block)


def _dropping_cache_control(block: BlockT) -> BlockT:
    """The block without the key (``cache_control: null`` is not what the API wants)."""
    data = block.to_api()
    data.pop("cache_control", None)
    return type(block).model_validate(data)


def _clean_result(block: ToolResultBlock) -> ToolResultBlock:
    if not isinstance(block.content, tuple):
        return block
    parts = tuple(
        _dropping_cache_control(p) if p.cache_control is not None else p
        for p in block.content
        if not _is_empty_text(p)
    )
    if parts == block.content:
        return block
    return block.model_copy(update={"content": parts or "(empty)"})


def _same(blocks: list[ContentBlock], message: Message) -> bool:
    if isinstance(message.content, str):
        return False
    original = message.blocks()
    return len(blocks) == len(original) and all(
        a is b for a, b in zip(blocks, original, strict=True)
    )


def merge_consecutive(
    stored: Sequence[StoredMessage],
) -> tuple[tuple[Message, ...], tuple[int | None, ...]]:
    """The outgoing messages, with consecutive same-role messages joined into one.

    A turn that failed after its user message leaves two user messages in a row; the API
    wants strict alternation, so the outgoing copy joins them (the store keeps both).
    Each joined message is anchored to the sequence number of its first part.
    """
    messages: list[Message] = []
    seqs: list[int | None] = []
    for item in stored:
        if messages and messages[-1].role == item.message.role:
            messages[-1] = _joined(messages[-1], item.message)
            continue
        messages.append(item.message)
        seqs.append(item.seq)
    return tuple(messages), tuple(seqs)


def _joined(first: Message, second: Message) -> Message:
    return Message(role=second.role, content=first.blocks() + second.blocks())


class SendableCopy:
    """``sendable(merge_consecutive(stored))`` for a growing stored list, paying for growth.

    The loop calls this with the stored messages from the record's keep boundary on, a
    list that only ever grows at its end. What was merged and repaired for the messages
    seen before is kept; only the last joined message (which a new message of the same
    role extends) and the new ones are redone. A list that does not extend the previous
    one (a new keep boundary, another session) is recomputed whole.
    """

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._stored: tuple[StoredMessage, ...] = ()
        self._joined: list[Message] = []
        self._starts: list[int] = []
        self._seqs: list[int] = []
        self._repaired: list[Message] = []

    def update(
        self, stored: Sequence[StoredMessage]
    ) -> tuple[tuple[Message, ...], tuple[int, ...]]:
        stored = tuple(stored)
        seen = len(self._stored)
        if len(stored) < seen or stored[:seen] != self._stored:
            self._reset()
            seen = 0
        self._extend(stored, seen)
        self._stored = stored
        return tuple(self._repaired), tuple(self._seqs)

    def _extend(self, stored: tuple[StoredMessage, ...], seen: int) -> None:
        if seen == len(stored):
            return
        start = seen
        if self._joined and self._joined[-1].role == stored[seen].message.role:
            start = self._starts[-1]  # the last joined message grows: redo it
            for parts in (self._joined, self._starts, self._seqs, self._repaired):
                parts.pop()
        for index in range(start, len(stored)):
            item = stored[index]
            if self._joined and index > start and self._joined[-1].role == item.message.role:
                self._joined[-1] = _joined(self._joined[-1], item.message)
                self._repaired[-1] = self._repair_last()
                continue
            self._joined.append(item.message)
            self._starts.append(index)
            self._seqs.append(item.seq)
            self._repaired.append(self._repair_last())

    def _repair_last(self) -> Message:
        previous = self._joined[-2] if len(self._joined) > 1 else None
        return _repair(self._joined[-1], previous)
