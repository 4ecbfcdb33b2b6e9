"""Property: the session's outgoing copy and its checks equal the full recomputation.

A session is driven through random steps: messages appended (valid histories mixed
with broken messages the store may hold: empty text, two user messages in a row, orphan
and duplicate results, reused tool ids, client cache markers), the keep boundary moved
(a compaction), the process restarted (a fresh copy), truncation steps with the cut moving
both ways, and the outgoing request edited the way middleware does (a block marked for
the cache through the copy's view, or a message replaced in a plain tuple). At every step
the copy's answers (the messages, the checks, the breakpoint count, the estimate and the
API body) must be those of the plain functions over a plain copy of the request.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hango.compaction import outgoing
from hango.compaction.outgoing import OutgoingCopy
from hango.compaction.tool_args import Truncation, TruncationResult, truncate_tool_args
from hango.compaction.validate import count_breakpoints, validate_request
from hango.core.messages import (
    CacheControl,
    Message,
    Request,
    StoredMessage,
    TextBlock,
    ToolResultBlock,
    message_json,
)
from hango.cost.meter import copy_difference, first_difference
from hango.middleware.prompt_cache import place_breakpoints
from hango.tokens.measure import RequestEstimate
from tests.histories import (
    CharEstimator,
    call,
    calls,
    histories,
    payload,
    result,
    results,
    stored_messages,
    user,
)
from tests.outgoing_reference import merge_consecutive, sendable
from tests.properties import examples

BROKEN = (
    Message(role="user", content=(TextBlock(text=" "),)),
    Message(role="assistant", content=()),
    user("again"),
    results(result("toolu_orphan")),
    Message(
        role="user",
        content=(
            TextBlock(text="marked", cache_control=CacheControl()),
            ToolResultBlock(tool_use_id="toolu_x", content="twice"),
        ),
    ),
    calls(call("toolu_reused")),
    results(result("toolu_reused"), result("toolu_reused")),
)

BASE = Request(model="m", max_tokens=10, messages=())
ESTIMATOR = CharEstimator()
MAX_TOKENS = 40
TRUNCATION = Truncation(max_tokens=MAX_TOKENS, estimator=ESTIMATOR)
LARGE = (
    user("go"),
    calls(call("toolu_big", "write_file", content=payload(400, "toolu_big"))),
    results(result("toolu_big", payload(400, "toolu_big"))),
)

Step = tuple[str, int]
steps = st.lists(
    st.tuples(
        st.sampled_from(
            ["append", "append", "append", "broken", "compact", "restart", "edit", "truncate"]
        ),
        st.integers(min_value=0, max_value=10_000),
    ),
    min_size=1,
    max_size=25,
)


def marked(message: Message) -> Message:
    """The message with its last block marked, as the prompt-cache middleware does."""
    blocks = message.blocks()
    last = blocks[-1].model_copy(update={"cache_control": CacheControl()})
    return message.model_copy(update={"content": (*blocks[:-1], last)})


class Session:
    def __init__(self, history: tuple[Message, ...]) -> None:
        self.pending = list(history)
        self.stored: list[StoredMessage] = []
        self.kept_from = 1
        self.restart()

    def restart(self) -> None:
        self.copy = OutgoingCopy(ESTIMATOR)
        self.cut = 0

    def append(self, message: Message) -> None:
        turn = len(self.stored)
        # With the JSON the store holds for it, which the copy sends where it sends the
        # stored message unchanged.
        part = message_json(message)
        self.stored.append(StoredMessage.as_stored(len(self.stored) + 1, turn, message, part))

    def step(self, action: str, pick: int) -> Request | None:
        if action == "append" and self.pending:
            for _ in range(1 + pick % 3):
                if self.pending:
                    self.append(self.pending.pop(0))
        elif action == "broken":
            self.append(BROKEN[pick % len(BROKEN)])
        elif action == "compact" and self.stored:
            self.kept_from = 1 + pick % len(self.stored)
        elif action == "restart":
            self.restart()
        elif action == "truncate":
            self.cut = pick % (len(self.stored) + 2)
        return self.request(edit=pick if action == "edit" else None)

    def request(self, edit: int | None) -> Request | None:
        kept = [m for m in self.stored if m.seq >= self.kept_from]
        if not kept:
            return None
        grown, seqs = self.copy.update(kept)
        joined, plain_seqs = merge_consecutive(kept)
        # Grown, the copy keeps the cut of its last truncation step.
        assert (grown, seqs) == (truncated(sendable(joined), self.copy._cut).messages, plain_seqs)
        assert tuple(self.copy.stored) == tuple(kept)
        messages: tuple[Message, ...] = self.copy.truncate_below(self.cut, TRUNCATION)
        expected = truncated(sendable(joined), self.cut)
        assert messages == expected.messages
        assert self.copy.truncation_gain(0, self.cut, TRUNCATION)[0] == expected.truncated
        if edit is not None:
            index = edit % len(messages)
            request = BASE.model_copy(update={"messages": messages})
            if edit % 4 == 1:
                # A mark over the copy's view that the copy did not make.
                return request.with_marks({index: marked(messages[index])})
            if edit % 4 == 3:
                # The prompt-cache middleware's marks, made through the copy with their JSON
                # (the newest message, the anchor before ``index``, the head).
                return place_breakpoints(
                    request,
                    stable_system_index=None,
                    summary_message=bool(edit % 8 == 3),
                    changed_from=index,
                )
            replacement = (
                BROKEN[edit % len(BROKEN)],
                # Fine on its own, but it drops the calls or answers its neighbours need.
                Message(role=messages[index].role, content="plain"),
            )[edit % 4 // 2]
            messages = tuple(replacement if n == index else m for n, m in enumerate(messages))
        return BASE.model_copy(update={"messages": messages})


def truncated(messages: tuple[Message, ...], cut: int) -> TruncationResult:
    return truncate_tool_args(
        messages, protect_from=cut, max_tokens=MAX_TOKENS, estimator=ESTIMATOR
    )


@settings(deadline=None, max_examples=examples(150))
@given(histories(min_steps=2, max_steps=20, max_batch=3), steps)
def test_incremental_copy_and_checks_equal_the_full_recomputation(
    history: tuple[Message, ...], plan: list[Step]
) -> None:
    session = Session((*LARGE, *history))
    previous = BASE
    handed: list[tuple[Sequence[Message], tuple[Message, ...]]] = []
    for action, pick in plan:
        request = session.step(action, pick)
        if request is None:
            continue
        handed.append((request.messages, tuple(request.messages)))
        # Where the copy says two of its requests may first differ: never past where they do.
        known = copy_difference(previous, request)
        real = first_difference(previous.sent_messages(), request.sent_messages())
        assert known is None or known <= real
        previous = request
        # The plain functions over a plain copy: every position looked at.
        plain = Request.model_validate(request.to_api())
        assert type(plain.messages) is tuple
        assert session.copy.violations(request) == validate_request(plain)
        assert count_breakpoints(request) == count_breakpoints(plain)
        assert request.api_bytes() == plain.api_bytes()
        estimate = RequestEstimate(ESTIMATOR)
        assert estimate.split(request, 3) == estimate.split(plain, 3)
    # The copy changes a position a view holds on a new list: every view is as handed out.
    assert all(tuple(view) == messages for view, messages in handed)


def test_a_grown_copy_reuses_the_repaired_messages() -> None:
    """Appending does not rebuild what was there: the earlier messages are the same objects."""
    session = Session((user("one"),))
    session.append(user("one"))
    session.append(calls(call("toolu_1")))
    first, _ = session.copy.update(session.stored)
    session.append(results(result("toolu_1")))
    second, _ = session.copy.update(session.stored)
    assert first.live() is False and second.live()
    assert all(a is b for a, b in zip(first, second, strict=False))
    assert len(second) == 3


def test_a_marked_request_shares_the_copys_view_and_leaves_the_copy_as_it_was() -> None:
    history = (*LARGE, user("again"), calls(call("toolu_z")), results(result("toolu_z")))
    stored = [StoredMessage(seq=n + 1, turn=n, message=m) for n, m in enumerate(history)]
    copy = OutgoingCopy(ESTIMATOR)
    view, _ = copy.update(stored)
    plain = tuple(view)
    last, first = len(view) - 1, 0
    marks = {last: marked(view[last]), first: marked(view[first])}
    unmarked = BASE.model_copy(update={"messages": view})
    twice = unmarked.with_marks({last: marks[last]}).with_marks({first: marks[first]})
    assert twice.messages is view and twice.marks == marks
    assert tuple(twice.sent_messages()) == tuple(marks.get(n, m) for n, m in enumerate(plain))
    assert twice.sent_messages()[-2:] == (plain[-2], marks[last])
    assert twice != unmarked and unmarked.marks == {}
    # Messages replaced: the marks no longer name their positions.
    assert twice.model_copy(update={"messages": plain}).marks == {}
    # The copy's own messages are unmarked: its next view is the plain one.
    assert copy.update(stored)[0] == plain
    assert Request.model_validate(twice.to_api()).to_api() == json.loads(twice.api_bytes())
    assert json.loads(twice.api_bytes())["messages"][last] == marks[last].to_api()


def test_a_copy_over_the_stored_json_serializes_only_the_forms_it_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    history = (
        user("hi"),
        calls(call("toolu_1")),
        results(result("toolu_1")),
        user("and more"),  # joined with the results before it: a form the copy made
        Message(role="assistant", content="ok"),
        results(result("toolu_9")),  # answers no call: repaired, another form
    )
    stored = stored_messages(history)
    serialized: list[Message] = []
    monkeypatch.setattr(outgoing, "message_json", lambda m: serialized.append(m) or message_json(m))
    copy = OutgoingCopy(ESTIMATOR)

    view, _ = copy.update(stored)

    assert serialized == [view[2], view[4]]
    assert copy.json_parts(copy.version, {}) == [message_json(m) for m in view]
