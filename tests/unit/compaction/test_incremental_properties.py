"""Property: the incremental outgoing copy and checks equal the full recomputation.

A session is driven through random steps: messages appended (valid histories mixed
with broken messages the store may hold: empty text, two user messages in a row, orphan
and duplicate results, reused tool ids, client cache markers), the keep boundary moved
(a compaction), the process restarted (fresh memos), and the outgoing request edited
the way middleware does (a message replaced, a block marked for the cache). At every
step the incremental answer (the checks, the breakpoint count and the API body, which
follow the copies' lineage) must be the answer of the plain functions over a plain copy
of the request, request for request.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hango.compaction.repair import SendableCopy, merge_consecutive, sendable
from hango.compaction.validate import RequestChecker, count_breakpoints, validate_request
from hango.core.identity import replaced
from hango.core.messages import (
    CacheControl,
    Message,
    Request,
    StoredMessage,
    TextBlock,
    ToolResultBlock,
)
from tests.histories import call, calls, histories, result, results, user
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

Step = tuple[str, int]
steps = st.lists(
    st.tuples(
        st.sampled_from(["append", "append", "append", "broken", "compact", "restart", "edit"]),
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
        self.copy = SendableCopy()
        self.checker = RequestChecker()

    def append(self, message: Message) -> None:
        turn = len(self.stored)
        self.stored.append(StoredMessage(seq=len(self.stored) + 1, turn=turn, message=message))

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
        return self.request(edit=pick if action == "edit" else None)

    def request(self, edit: int | None) -> Request | None:
        kept = [m for m in self.stored if m.seq >= self.kept_from]
        if not kept:
            return None
        incremental = self.copy.update(kept)
        joined, seqs = merge_consecutive(kept)
        assert incremental == (sendable(joined), seqs)
        assert tuple(self.copy.stored) == tuple(kept)
        messages = incremental[0]
        if edit is not None:
            index = edit % len(messages)
            replacement = (
                marked(messages[index]),
                BROKEN[edit % len(BROKEN)],
                # Fine on its own, but it drops the calls or answers its neighbours need.
                Message(role=messages[index].role, content="plain"),
            )[edit % 3]
            # As middleware does: a Derived of the copy, so the lineage path is exercised.
            messages = replaced(messages, {index: replacement})
        return BASE.model_copy(update={"messages": messages})


@settings(deadline=None, max_examples=examples(150))
@given(histories(min_steps=2, max_steps=20, max_batch=3), steps)
def test_incremental_copy_and_checks_equal_the_full_recomputation(
    history: tuple[Message, ...], plan: list[Step]
) -> None:
    session = Session(history)
    for action, pick in plan:
        request = session.step(action, pick)
        if request is None:
            continue
        # The plain functions over a plain copy: no lineage, every position looked at.
        plain = Request.model_validate(request.to_api())
        assert type(plain.messages) is tuple
        assert session.checker.validate(request) == validate_request(plain)
        assert count_breakpoints(request) == count_breakpoints(plain)
        assert request.api_body() == plain.to_api()


def test_a_grown_copy_reuses_the_repaired_messages() -> None:
    """Appending does not rebuild what was there: the earlier messages are the same objects."""
    session = Session((user("one"),))
    session.append(user("one"))
    session.append(calls(call("toolu_1")))
    first, _ = session.copy.update(session.stored)
    session.append(results(result("toolu_1")))
    second, _ = session.copy.update(session.stored)
    assert all(a is b for a, b in zip(first, second, strict=False))
    assert len(second) == 3
