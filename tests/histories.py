"""Reusable message histories for tests: builders, a deterministic estimator, a strategy.

- Small constructors (``user``, ``assistant``, ``call``, ``result``, ``calls``,
  ``results``) for hand-written fixtures.
- :class:`HistoryBuilder`, a fluent builder that numbers tool_use ids itself.
- :class:`CharEstimator`, a trivial deterministic :class:`~hango.tokens.base.Estimator`
  (JSON characters / 4) so tests never depend on the real estimators.
- :func:`histories`, a hypothesis strategy for random *valid* histories: text turns,
  parallel tool batches, errored results, multi-block content, thinking blocks.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import json
from collections.abc import Iterable, Sequence
from typing import Any

from hypothesis import strategies as st

from hango.compaction.groups import group_starts
from hango.core.messages import (
    ContentBlock,
    ImageBlock,
    Message,
    Request,
    StoredMessage,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    message_json,
)

TOOL_NAMES = ("read_file", "write_file", "edit_file", "ls", "bash")
TINY_PNG = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}


# --- constructors ---------------------------------------------------------------------


def user(text: str) -> Message:
    return Message(role="user", content=text)


def assistant(text: str) -> Message:
    return Message(role="assistant", content=(TextBlock(text=text),))


def call(tool_id: str, name: str = "read_file", **arguments: Any) -> ToolUseBlock:
    return ToolUseBlock(id=tool_id, name=name, input=arguments or {"path": f"/src/{tool_id}.py"})


def result(
    tool_id: str, content: str | Sequence[TextBlock | ImageBlock] = "ok", *, is_error: bool = False
) -> ToolResultBlock:
    body = content if isinstance(content, str) else tuple(content)
    if is_error:
        return ToolResultBlock(tool_use_id=tool_id, content=body, is_error=True)
    return ToolResultBlock(tool_use_id=tool_id, content=body)


def calls(*uses: ToolUseBlock, text: str | None = None, thinking: str | None = None) -> Message:
    """An assistant message: optional thinking, optional text, then the tool calls."""
    blocks: list[ContentBlock] = []
    if thinking is not None:
        blocks.append(ThinkingBlock(thinking=thinking, signature="sig-" + str(len(thinking))))
    if text is not None:
        blocks.append(TextBlock(text=text))
    blocks.extend(uses)
    return Message(role="assistant", content=tuple(blocks))


def results(*answers: ToolResultBlock, text: str | None = None) -> Message:
    """A user message answering a batch (results first, as the API wants), then text."""
    blocks: list[ContentBlock] = list(answers)
    if text is not None:
        blocks.append(TextBlock(text=text))
    return Message(role="user", content=tuple(blocks))


def payload(size: int, salt: str = "x") -> str:
    """Deterministic filler text of exactly ``size`` characters."""
    if size <= 0:
        return ""
    unit = f"{salt} lorem ipsum dolor sit amet, line of file content\n"
    return (unit * (size // len(unit) + 1))[:size]


def stored_messages(messages: Sequence[Message]) -> list[StoredMessage]:
    """``messages`` as the store hands back a turn's appends: seqs from 1, each with the JSON
    the store keeps for it (the outgoing copy sends that JSON as it is)."""
    return [StoredMessage.as_stored(n + 1, 1, m, message_json(m)) for n, m in enumerate(messages)]


def head_message(text: str = "Summary of the conversation so far.") -> Message:
    """A summary-style head message (user role) to put before a kept part."""
    return user(text)


# --- the fluent builder ----------------------------------------------------------------


class HistoryBuilder:
    """Appends messages in order and numbers tool ids ``toolu_<prefix><n>``."""

    def __init__(self, prefix: str = "") -> None:
        self._messages: list[Message] = []
        self._prefix = prefix
        self._next_id = 1

    def new_id(self) -> str:
        tool_id = f"toolu_{self._prefix}{self._next_id:04d}"
        self._next_id += 1
        return tool_id

    def add(self, message: Message) -> HistoryBuilder:
        self._messages.append(message)
        return self

    def user(self, text: str) -> HistoryBuilder:
        return self.add(user(text))

    def say(self, text: str) -> HistoryBuilder:
        return self.add(assistant(text))

    def batch(
        self,
        width: int = 1,
        *,
        name: str = "read_file",
        arg_chars: int = 40,
        result_chars: int = 40,
        errors: Iterable[int] = (),
        text: str | None = None,
    ) -> HistoryBuilder:
        """One assistant message with ``width`` parallel calls, then the message of results."""
        failing = set(errors)
        ids = [self.new_id() for _ in range(width)]
        uses = [
            ToolUseBlock(
                id=i, name=name, input={"path": f"/src/{i}.py", "content": payload(arg_chars, i)}
            )
            for i in ids
        ]
        answers = [
            result(i, payload(result_chars, i) or "ok", is_error=n in failing)
            for n, i in enumerate(ids)
        ]
        self.add(calls(*uses, text=text))
        return self.add(results(*answers))

    def build(self) -> tuple[Message, ...]:
        return tuple(self._messages)


# --- a deterministic estimator ---------------------------------------------------------


class CharEstimator:
    """Tokens = ceil(JSON characters / 4), plus fixed framing; deterministic and exact-free."""

    name = "chars/4"
    message_overhead = 4
    request_overhead = 8

    def estimate(self, text: str) -> int:
        return (len(text) + 3) // 4

    def estimate_message(self, message: Message) -> int:
        return self.estimate(_json(message.to_api())) + self.message_overhead

    def estimate_messages(self, messages: Iterable[Message]) -> int:
        return sum(self.estimate_message(m) for m in messages)

    def estimate_request(self, request: Request) -> int:
        fixed = self.estimate(_json([b.to_api() for b in request.system_blocks()]))
        fixed += self.estimate(_json([t.to_api() for t in request.tool_definitions()]))
        return fixed + self.estimate_messages(request.messages) + self.request_overhead


class MessagesMeasure:
    """``measure`` for mechanical truncation: CharEstimator tokens of a message tuple.

    Memoized per message object (holding a reference, so an id is never reused while
    cached): a binary search re-measures the same messages many times.
    """

    def __init__(self, estimator: CharEstimator | None = None) -> None:
        self.estimator = estimator or CharEstimator()
        self.calls = 0
        self._sizes: dict[int, tuple[Message, int]] = {}

    def __call__(self, messages: tuple[Message, ...]) -> int:
        self.calls += 1
        return sum(self._size(m) for m in messages)

    def _size(self, message: Message) -> int:
        cached = self._sizes.get(id(message))
        if cached is None:
            cached = (message, self.estimator.estimate_message(message))
            self._sizes[id(message)] = cached
        return cached[1]


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def request_of(messages: Sequence[Message], *, system: str = "You are a careful agent.") -> Request:
    return Request(model="claude-test", max_tokens=1024, messages=tuple(messages), system=system)


# --- inspection helpers ----------------------------------------------------------------


def shape(messages: Sequence[Message]) -> list[tuple[str, tuple[tuple[str, str], ...]]]:
    """Roles, block types and ids/names: everything truncation must never change."""
    return [(m.role, tuple(_block_key(b) for b in m.blocks())) for m in messages]


def _block_key(block: ContentBlock) -> tuple[str, str]:
    if isinstance(block, ToolUseBlock):
        return ("tool_use", f"{block.id}:{block.name}:{sorted(block.input)}")
    if isinstance(block, ToolResultBlock):
        return ("tool_result", f"{block.tool_use_id}:{block.is_error}")
    return (block.type, "")


def tool_ids(messages: Sequence[Message]) -> list[str]:
    return [u.id for m in messages for u in m.tool_uses()]


# --- hypothesis strategy ---------------------------------------------------------------

SIZES = (1, 12, 60, 300, 1500, 6000)
"""Payload sizes the strategy picks from: tiny to well over any truncation threshold."""

_STEP_KIND = st.integers(0, 3)
# Each block is decoded from ONE drawn integer (mixed radix): drawing every flag
# separately made generation dominate the property tests' runtime. Shrinking still works:
# the integer shrinks towards 0, which decodes to the simplest block.
_USE_CODE = st.integers(0, len(TOOL_NAMES) * len(SIZES) - 1)
_RESULT_CODE = st.integers(0, 6 * 4 * 3 * len(SIZES) ** 3 - 1)
_DECOR_CODE = st.integers(0, 7)


@functools.cache
def _widths(max_batch: int) -> st.SearchStrategy[int]:
    return st.integers(1, max_batch)


def _digits(code: int, *radixes: int) -> list[int]:
    """``code`` split into mixed-radix digits, least significant first."""
    digits = []
    for radix in radixes:
        code, digit = divmod(code, radix)
        digits.append(digit)
    return digits


def _tool_step(draw: st.DrawFn, builder: HistoryBuilder, max_batch: int) -> None:
    ids = [builder.new_id() for _ in range(draw(_widths(max_batch)))]
    uses = []
    for n, tool_id in enumerate(ids):
        size, name = _digits(draw(_USE_CODE), len(SIZES), len(TOOL_NAMES))
        arguments = {"path": f"/w/{tool_id}", "content": payload(SIZES[size], tool_id), "line": n}
        uses.append(ToolUseBlock(id=tool_id, name=TOOL_NAMES[name], input=arguments))
    lead, thinking, trailing = _digits(draw(_DECOR_CODE), 2, 2, 2)
    builder.add(
        calls(
            *uses,
            text="Let me look." if lead else None,
            thinking="Thinking about which file to open next." if thinking else None,
        )
    )
    answers = [_result(draw(_RESULT_CODE), tool_id) for tool_id in ids]
    builder.add(results(*answers, text="Continue." if trailing else None))


def _result(code: int, tool_id: str) -> ToolResultBlock:
    error, parts, image, *sizes = _digits(code, 6, 4, 3, len(SIZES), len(SIZES), len(SIZES))
    is_error = error == 5  # one in six
    if parts == 0:  # plain string content
        return result(tool_id, payload(SIZES[sizes[0]], tool_id), is_error=is_error)
    blocks: list[TextBlock | ImageBlock] = [
        TextBlock(text=payload(SIZES[sizes[n]], f"{tool_id}.{n}")) for n in range(parts)
    ]
    if image == 2:
        blocks.append(ImageBlock(source=TINY_PNG))
    return result(tool_id, blocks, is_error=is_error)


@st.composite
def histories(
    draw: st.DrawFn, *, min_steps: int = 0, max_steps: int = 10, max_batch: int = 4
) -> tuple[Message, ...]:
    """A valid history: starts with the user's task, strictly alternates, ends with a user
    message, and every tool_use is answered in the next message."""
    builder = HistoryBuilder()
    builder.user("Please fix the failing test in the parser.")
    for step in range(draw(st.integers(min_steps, max_steps))):
        if draw(_STEP_KIND) == 0:
            size = SIZES[draw(_widths(len(SIZES))) - 1]
            builder.say(f"Progress note {step}: " + payload(size, str(step)))
            builder.user(f"Follow-up {step}: keep going.")
        else:
            _tool_step(draw, builder, max_batch)
    return builder.build()


# --- test oracles over the group starts ------------------------------------------------


def boundaries_from(messages: Sequence[Message], start: int) -> list[int]:
    """Every group start at or after ``start``, ascending (candidate boundaries)."""
    starts = group_starts(messages)
    return starts[bisect.bisect_left(starts, start) :]


def tool_groups(messages: Sequence[Message]) -> list[range]:
    """The messages partitioned into atomic units, in order.

    Each unit starts at a group start (or at 0 for the leading user message) and runs to
    the next one; together the ranges cover ``range(len(messages))`` exactly once.
    """
    cuts = [0, *(start for start in group_starts(messages) if start > 0), len(messages)]
    return [range(begin, end) for begin, end in itertools.pairwise(cuts) if end > begin]


def is_group_start(messages: Sequence[Message], index: int) -> bool:
    """Whether a keep boundary may fall at ``index``."""
    return index in group_starts(messages)
