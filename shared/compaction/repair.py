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
  prompt-cache middleware, which must stay within the API's limit of four;
- a ``tool_use`` id already used earlier in the copy (a model or a client that restarts
  its id counter, a resumed scripted run) is renamed ``{id}_{n}``, the first free ``n``
  from 2, and the result answering it with it, so ids are unique across the request.
  The renaming depends only on the messages before, so every call sends the same bytes.

Unchanged messages are returned as the very same objects (the estimator caches by
identity).
"""

from __future__ import annotations

from typing import TypeVar

from hango.core.messages import (
    ContentBlock,
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    WireModel,
)

BlockT = TypeVar("BlockT", bound=WireModel)

EMPTY_PLACEHOLDER = "[empty message]"
MISSING_RESULT = "[no result was recorded for this tool call; it was interrupted]"


class UsedIds:
    """The tool_use ids of the copy so far; renames a reused one in the next message.

    Applied to already repaired messages: a user message after an assistant message with
    calls opens with exactly one result per call, in call order, so its results are
    renamed by position.
    """

    def __init__(self) -> None:
        self._taken: set[str] = set()
        # Per message, the final ids of its calls (the ids it took): an assistant message's
        # tuple, the empty one for any other. No object per message beyond that tuple: a
        # restarted session repairs every message it reads at once.
        self._done: list[tuple[str, ...]] = []

    def unique(self, message: Message) -> Message:
        previous = self._done[-1] if self._done else ()
        calls: tuple[str, ...] = ()
        if message.role == "assistant":
            message, calls = self._unique_calls(message)
        else:
            message = _answer_renamed(message, previous)
        self._done.append(calls)
        return message

    def drop_last(self) -> None:
        """Forget the last message (the incremental copy redoes it)."""
        self._taken.difference_update(self._done.pop())

    def _unique_calls(self, message: Message) -> tuple[Message, tuple[str, ...]]:
        uses = tuple(message.tool_uses())
        if not uses:
            return message, ()
        final = tuple(self._take(use.id) for use in uses)
        if final == tuple(use.id for use in uses):
            return message, final
        ids = iter(final)
        blocks = tuple(
            block.model_copy(update={"id": next(ids)}) if isinstance(block, ToolUseBlock) else block
            for block in message.blocks()
        )
        return Message(role=message.role, content=blocks), final

    def _take(self, tool_id: str) -> str:
        chosen, n = tool_id, 2
        while chosen in self._taken:
            chosen, n = f"{tool_id}_{n}", n + 1
        self._taken.add(chosen)
        return chosen


def _answer_renamed(message: Message, calls: tuple[str, ...]) -> Message:
    """The user message with its leading results carrying the calls' final ids."""
    blocks = message.blocks()
    if not calls or len(blocks) < len(calls):
        return message
    heads = blocks[: len(calls)]
    if all(
        isinstance(b, ToolResultBlock) and b.tool_use_id == i
        for b, i in zip(heads, calls, strict=True)
    ):
        return message
    renamed = tuple(
        b.model_copy(update={"tool_use_id": i}) if isinstance(b, ToolResultBlock) else b
        for b, i in zip(heads, calls, strict=True)
    )
    return Message(role=message.role, content=(*renamed, *blocks[len(calls) :]))


def repair_message(message: Message, previous: Message | None) -> Message:
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
    # A call id used twice in one message takes its results in order, one each.
    wanted = {i: calls.count(i) for i in calls}
    results: dict[str, list[ToolResultBlock]] = {}
    others: list[ContentBlock] = []
    for block in blocks:
        if isinstance(block, ToolResultBlock):
            taken = results.setdefault(block.tool_use_id, [])
            if len(taken) < wanted.get(block.tool_use_id, 0):
                taken.append(block)
        else:
            others.append(block)
    answered = [_next_result(results, i) for i in calls]
    return [*answered, *others]


def _next_result(results: dict[str, list[ToolResultBlock]], tool_use_id: str) -> ToolResultBlock:
    waiting = results.get(tool_use_id)
    if waiting:
        return waiting.pop(0)
    return ToolResultBlock(tool_use_id=tool_use_id, content=MISSING_RESULT, is_error=True)


def _is_empty_text(block: ContentBlock) -> bool:
    return isinstance(block, TextBlock) and not block.text.strip()


def _without_cache_control(block: ContentBlock) -> ContentBlock:
    if isinstance(block, ToolResultBlock) and isinstance(block.content, tuple):
        parts = tuple(_dropping_cache_control(p) for p in block.content if not _is_empty_text(p))
        if parts != block.content:
            block = block.model_copy(update={"content": parts or "(empty)"})
    return _dropping_cache_control(block)


def _dropping_cache_control(block: BlockT) -> BlockT:
    """The block without the key (``cache_control: null`` is not what the API wants)."""
    if getattr(block, "cache_control", None) is None:
        return block
    data = block.to_api()
    data.pop("cache_control", None)
    return type(block).model_validate(data)


def _same(blocks: list[ContentBlock], message: Message) -> bool:
    if isinstance(message.content, str):
        return False
    original = message.blocks()
    return len(blocks) == len(original) and all(
        a is b for a, b in zip(blocks, original, strict=True)
    )


def joined(first: Message, second: Message) -> Message:
    return Message(role=second.role, content=first.blocks() + second.blocks())
