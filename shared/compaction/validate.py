"""The request validator: the Messages API's structural 400s, found before sending.

The pipeline never sends a request the API would refuse for its shape: a request with a
dangling ``tool_use`` or an orphan ``tool_result`` is refused on every retry, which
poisons the session for good (langchain#38352, deepagents#270). So every outgoing request,
summary requests included, is checked here first.

Violations are data, not exceptions: the caller decides (abandon the compaction, fall back
to mechanical truncation, log). Each ``detail`` is the text the API answers for the same
mistake, so a log line reads like the 400 it prevented.

Rules checked: at least one message, the first a user message; roles alternate; every
``tool_use`` answered among the leading blocks of the next message, once; every
``tool_result`` answering a ``tool_use`` of the message before; unique ``tool_use`` ids; no
empty content (but a final assistant message) and no blank text; no empty system block
and at most four ``cache_control`` breakpoints.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from hango.core.messages import Message, Request, TextBlock, ToolResultBlock, ToolUseBlock
from hango.core.sent import live_view

ViolationKind = Literal[
    "alternation",
    "first_not_user",
    "missing_tool_result",
    "orphan_tool_result",
    "duplicate_tool_use_id",
    "duplicate_tool_result",
    "empty_content",
    "too_many_breakpoints",
]

MAX_BREAKPOINTS = 4


@dataclass(frozen=True)
class Violation:
    """One reason the API would refuse the request, at ``messages[message_index]``."""

    kind: ViolationKind
    message_index: int
    detail: str


def validate_request(request: Request) -> list[Violation]:
    """Every structural violation in the request (empty list: valid)."""
    violations = validate_messages(request.sent_messages())
    for index in fixed_facts(request).empty_system:
        detail = f"system.{index}: text content blocks must be non-empty"
        violations.append(Violation("empty_content", 0, detail))
    breakpoints = count_breakpoints(request)
    if breakpoints > MAX_BREAKPOINTS:
        detail = (
            f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. "
            f"Found {breakpoints}."
        )
        violations.append(Violation("too_many_breakpoints", 0, detail))
    return violations


def count_breakpoints(request: Request) -> int:
    """Every ``cache_control`` in the request, tool-result parts included (a session's copy
    keeps a running count of its messages'; others are counted block by block)."""
    fixed = fixed_facts(request).breakpoints
    view = live_view(request.messages)
    if view is None:
        return fixed + sum(message_breakpoints(message) for message in request.sent_messages())
    return fixed + view.source.breakpoints + marked_breakpoints(request)


def marked_breakpoints(request: Request) -> int:
    """Breakpoints the marks of ``request`` add to its messages."""
    return sum(
        message_breakpoints(marked) - message_breakpoints(request.messages[index])
        for index, marked in request.marks.items()
    )


@dataclass(frozen=True)
class FixedFacts:
    """What the rules need to know about the tools and the system blocks."""

    breakpoints: int  # their ``cache_control`` markers
    empty_system: tuple[int, ...]  # the system blocks with no visible text


def fixed_facts(request: Request) -> FixedFacts:
    # A few tens of blocks: cheaper to look at again than to remember by identity.
    system = request.system_blocks()
    fixed = [*request.tool_definitions(), *system]
    return FixedFacts(
        breakpoints=sum(getattr(block, "cache_control", None) is not None for block in fixed),
        empty_system=tuple(n for n, block in enumerate(system) if not block.text.strip()),
    )


def validate_messages(messages: Sequence[Message]) -> list[Violation]:
    """Every structural violation in ``messages``, in message order (empty list: valid)."""
    if not messages:
        return [Violation("first_not_user", 0, "messages: at least one message is required")]
    violations: list[Violation] = []
    if messages[0].role != "user":
        violations.append(
            Violation("first_not_user", 0, 'messages: first message must use the "user" role')
        )
    seen_ids: set[str] = set()
    for index in range(len(messages)):
        violations.extend(position_violations(messages, index, seen_ids))
    return violations


def position_violations(
    messages: Sequence[Message], index: int, seen_ids: set[str] | None
) -> list[Violation]:
    """The rules at one position: the message and its two neighbours (the unique ids over
    the ids ``seen_ids`` holds, and adds to, when given)."""
    message = messages[index]
    previous = messages[index - 1] if index > 0 else None
    if isinstance(message.content, str) and message.content.strip():
        # Text that is not blank holds no block any other rule looks at (a restarted
        # session checks every message, most of them plain text or tool rounds).
        return _alternation(index, message, previous)
    following = messages[index + 1] if index + 1 < len(messages) else None
    violations = _alternation(index, message, previous)
    violations.extend(_empty_content(index, message, is_last=following is None))
    if seen_ids is not None:
        violations.extend(_duplicate_ids(index, message, seen_ids))
    violations.extend(_orphan_results(index, message, previous))
    violations.extend(_missing_results(index, message, following))
    return violations


def format_violations(violations: Sequence[Violation]) -> str:
    """One line per violation, for logs and error messages."""
    return "; ".join(f"[{v.kind} at messages.{v.message_index}] {v.detail}" for v in violations)


def _alternation(index: int, message: Message, previous: Message | None) -> list[Violation]:
    if previous is None or previous.role != message.role:
        return []
    detail = (
        'messages: roles must alternate between "user" and "assistant", '
        f'but found multiple "{message.role}" roles in a row'
    )
    return [Violation("alternation", index, detail)]


def _empty_content(index: int, message: Message, *, is_last: bool) -> list[Violation]:
    if not message.content:
        if is_last and message.role == "assistant":
            return []  # a final assistant message may be empty (the API allows it)
        detail = (
            f"messages.{index}: all messages must have non-empty content "
            "except for the optional final assistant message"
        )
        return [Violation("empty_content", index, detail)]
    return [
        Violation("empty_content", index, problem)
        for text in _texts(message)
        if (problem := _text_problem(text)) is not None
    ]


def _texts(message: Message) -> list[str]:
    """Every text the API checks for emptiness: text blocks, and text inside tool results."""
    texts: list[str] = []
    for block in message.blocks():
        if isinstance(block, TextBlock):
            texts.append(block.text)
        elif isinstance(block, ToolResultBlock) and isinstance(block.content, tuple):
            texts.extend(part.text for part in block.content if isinstance(part, TextBlock))
    return texts


def _text_problem(text: str) -> str | None:
    if not text:
        return "messages: text content blocks must be non-empty"
    if not text.strip():
        return "messages: text content blocks must contain non-whitespace text"
    return None


def _duplicate_ids(index: int, message: Message, seen_ids: set[str]) -> list[Violation]:
    violations: list[Violation] = []
    for position, block in enumerate(message.blocks()):
        if not isinstance(block, ToolUseBlock):
            continue
        if block.id in seen_ids:
            detail = f"messages.{index}.content.{position}: `tool_use` ids must be unique"
            violations.append(Violation("duplicate_tool_use_id", index, detail))
        seen_ids.add(block.id)
    return violations


def _orphan_results(index: int, message: Message, previous: Message | None) -> list[Violation]:
    if not any(message.tool_results()):
        return []
    offered = {use.id for use in previous.tool_uses()} if previous is not None else set()
    violations: list[Violation] = []
    answered: set[str] = set()
    for position, block in enumerate(message.blocks()):
        if not isinstance(block, ToolResultBlock):
            continue
        if block.tool_use_id in answered:
            detail = (
                f"messages.{index}.content.{position}: each `tool_use` block must have a "
                f"single `tool_result` block; found another for {block.tool_use_id}"
            )
            violations.append(Violation("duplicate_tool_result", index, detail))
        answered.add(block.tool_use_id)
        if block.tool_use_id not in offered:
            detail = (
                f"messages.{index}.content.{position}: unexpected `tool_use_id` found in "
                f"`tool_result` blocks: {block.tool_use_id}. Each `tool_result` block must "
                "have a corresponding `tool_use` block in the previous message."
            )
            violations.append(Violation("orphan_tool_result", index, detail))
    return violations


def _missing_results(index: int, message: Message, following: Message | None) -> list[Violation]:
    uses = [use.id for use in message.tool_uses()]
    if not uses:
        return []
    answered = _leading_result_ids(following) if following is not None else set()
    missing = [use_id for use_id in uses if use_id not in answered]
    if not missing:
        return []
    detail = (
        f"messages.{index}: `tool_use` ids were found without `tool_result` blocks "
        f"immediately after: {', '.join(missing)}. Each `tool_use` block must have a "
        "corresponding `tool_result` block in the next message."
    )
    return [Violation("missing_tool_result", index, detail)]


def _leading_result_ids(message: Message) -> set[str]:
    """Ids answered by the tool_result blocks that open ``message``: the API wants results
    first in the answering message (one after a text block is not "immediately after")."""
    answered: set[str] = set()
    for block in message.blocks():
        if not isinstance(block, ToolResultBlock):
            break
        answered.add(block.tool_use_id)
    return answered


def message_breakpoints(message: Message) -> int:
    if isinstance(message.content, str):
        return 0  # a plain string carries no cache_control
    count = 0
    for block in message.blocks():
        count += getattr(block, "cache_control", None) is not None
        if isinstance(block, ToolResultBlock) and isinstance(block.content, tuple):
            count += sum(part.cache_control is not None for part in block.content)
    return count
