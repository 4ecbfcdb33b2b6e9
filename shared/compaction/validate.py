"""The request validator: the Messages API's structural 400s, found before sending.

The pipeline never sends a request the API would refuse for its shape: a request with a
dangling ``tool_use`` or an orphan ``tool_result`` is refused on every retry, which
poisons the session for good (langchain#38352, deepagents#270). So every outgoing request,
summary requests included, is checked here first.

Violations are data, not exceptions: the caller decides (abandon the compaction, fall back
to mechanical truncation, log). Each ``detail`` is the text the API answers for the same
mistake, so a log line reads like the 400 it prevented.

Rules checked, in the API's terms:

- at least one message, the first one with role ``user``;
- roles strictly alternate;
- every ``tool_use`` in message N is answered by a ``tool_result`` in message N+1, among
  the leading blocks of that message (tool results come first; text may follow them);
- every ``tool_result`` in message N answers a ``tool_use`` of message N-1;
- ``tool_use`` ids are unique across the request;
- no message has empty content (except a final assistant message), and no text block is
  empty or whitespace only;
- one ``tool_result`` per ``tool_use``; (request level) no empty system block and at most
  four ``cache_control`` breakpoints.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

from hango.core.identity import changed_positions, position_total
from hango.core.messages import Message, Request, TextBlock, ToolResultBlock, ToolUseBlock

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
    """Every structural violation in the request (empty list: valid).

    Beyond the messages: no empty system text block, and at most four ``cache_control``
    breakpoints in tools, system and messages together.
    """
    violations = validate_messages(request.messages)
    for index in _fixed_facts(request).empty_system:
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
    """Every ``cache_control`` in the request, tool-result parts included.

    The messages' part is a running total along the outgoing copies' lineage, so a
    session's successive requests pay only for the messages that changed.
    """
    return _fixed_facts(request).breakpoints + position_total(
        request.messages, "breakpoints", _message_breakpoints
    )


@dataclass(frozen=True)
class _FixedFacts:
    """What the rules need to know about the tools and the system blocks."""

    breakpoints: int  # their ``cache_control`` markers
    empty_system: tuple[int, ...]  # the system blocks with no visible text


def _fixed_facts(request: Request) -> _FixedFacts:
    # A few tens of blocks: cheaper to look at again than to remember by identity.
    system = request.system_blocks()
    fixed = [*request.tool_definitions(), *system]
    return _FixedFacts(
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
        violations.extend(_position_violations(messages, index, seen_ids))
    return violations


def _position_violations(
    messages: Sequence[Message], index: int, seen_ids: set[str] | None
) -> list[Violation]:
    """The rules at one position: the message and its two neighbours (the unique ids over
    the ids ``seen_ids`` holds, and adds to, when given)."""
    message = messages[index]
    previous = messages[index - 1] if index > 0 else None
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
    offered = {use.id for use in previous.tool_uses()} if previous is not None else set()
    violations: list[Violation] = []
    answered: set[str] = set()
    for position, block in enumerate(message.blocks()):
        if isinstance(block, ToolResultBlock) and block.tool_use_id in answered:
            detail = (
                f"messages.{index}.content.{position}: each `tool_use` block must have a "
                f"single `tool_result` block; found another for {block.tool_use_id}"
            )
            violations.append(Violation("duplicate_tool_result", index, detail))
        if isinstance(block, ToolResultBlock):
            answered.add(block.tool_use_id)
        if isinstance(block, ToolResultBlock) and block.tool_use_id not in offered:
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
    """Ids answered by the tool_result blocks that open ``message``.

    The API wants tool results first in the answering message; a result placed after
    a text block does not count as "immediately after".
    """
    answered: set[str] = set()
    for block in message.blocks():
        if not isinstance(block, ToolResultBlock):
            break
        answered.add(block.tool_use_id)
    return answered


def _message_breakpoints(message: Message) -> int:
    count = 0
    for block in message.blocks():
        count += getattr(block, "cache_control", None) is not None
        if isinstance(block, ToolResultBlock) and isinstance(block.content, tuple):
            count += sum(part.cache_control is not None for part in block.content)
    return count


class _Facts(NamedTuple):
    """What the running counts need of one message, whatever its neighbours."""

    uses: tuple[str, ...]
    breakpoints: int


def _facts(message: Message) -> _Facts:
    return _Facts(tuple(use.id for use in message.tool_uses()), _message_breakpoints(message))


class _RunningCounts:
    """The tool-use ids and breakpoints of the last message sequence seen, kept up to date
    by diffing: the two rules that are about the whole request, not one position."""

    def __init__(self) -> None:
        self.messages: Sequence[Message] = ()
        self.facts: list[_Facts] = []
        self.breakpoints = 0
        self.use_counts: Counter[str] = Counter()
        self.duplicated: set[str] = set()

    def update(self, messages: Sequence[Message]) -> list[int]:
        """Bring the counts to ``messages``; the positions that changed (new positions too)."""
        changed = changed_positions(self.messages, messages)
        removed = self.facts[len(messages) :]
        del self.facts[len(messages) :]
        for facts in removed:
            self._forget(facts)
        for index in changed:
            facts = _facts(messages[index])
            if index < len(self.facts):
                self._forget(self.facts[index])
                self.facts[index] = facts
            else:
                self.facts.append(facts)
            self._learn(facts)
        self.messages = messages
        return changed

    def _learn(self, facts: _Facts) -> None:
        self.breakpoints += facts.breakpoints
        for use_id in facts.uses:
            self.use_counts[use_id] += 1
            if self.use_counts[use_id] > 1:
                self.duplicated.add(use_id)

    def _forget(self, facts: _Facts) -> None:
        self.breakpoints -= facts.breakpoints
        for use_id in facts.uses:
            self.use_counts[use_id] -= 1
            if self.use_counts[use_id] <= 1:
                self.duplicated.discard(use_id)
            if self.use_counts[use_id] <= 0:
                del self.use_counts[use_id]


class RequestChecker:
    """:func:`validate_request` for one session's successive requests, paying for the change.

    The same rule functions, run where the request may have changed: every rule is about
    one message and its two neighbours (:func:`_position_violations`), except unique
    ``tool_use`` ids and the breakpoint limit, kept as running counts. So once a request
    was found valid, the next one is checked around the positions that differ from it
    only. Whenever anything looks wrong the whole request is validated by
    :func:`validate_request`, so the answer is always exactly that function's answer.
    """

    def __init__(self) -> None:
        self._counts = _RunningCounts()
        # The length of the last request found valid (None: none yet, or it was invalid).
        self._valid_length: int | None = None

    def validate(self, request: Request) -> list[Violation]:
        messages = request.messages
        changed = self._counts.update(messages)
        valid_length = self._valid_length
        if valid_length is None or not self._fine(request, changed, valid_length):
            violations = validate_request(request)
            self._valid_length = None if violations else len(messages)
            return violations
        self._valid_length = len(messages)
        return []

    def _fine(self, request: Request, changed: list[int], valid_length: int) -> bool:
        counts, messages = self._counts, request.messages
        fixed = _fixed_facts(request)
        if not messages or messages[0].role != "user" or counts.duplicated or fixed.empty_system:
            return False
        if counts.breakpoints + fixed.breakpoints > MAX_BREAKPOINTS:
            return False
        last = len(messages) - 1
        around = {valid_length - 1, last}  # the old last message may have gained a follower
        for index in changed:
            around.update((index - 1, index, index + 1))
        return not any(_position_violations(messages, i, None) for i in around if 0 <= i <= last)
