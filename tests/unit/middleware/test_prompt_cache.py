"""Prompt-cache breakpoints: where they land, the bridge, the minimum, the limit, and "off"."""

from __future__ import annotations

from hango.compaction.outgoing import OutgoingCopy
from hango.core.messages import (
    CacheControl,
    ContentBlock,
    Message,
    RedactedThinkingBlock,
    Request,
    Response,
    TextBlock,
    ToolDefinition,
    ToolResultBlock,
    ToolUseBlock,
)
from hango.middleware.base import Assembly, Middleware, ModelCall, PassThrough, StateHolder
from hango.middleware.chain import assemble, run_chain
from hango.middleware.prompt_cache import (
    EPHEMERAL,
    MAX_BREAKPOINTS,
    CachePolicy,
    PromptCacheMiddleware,
    count_breakpoints,
    place_breakpoints,
)
from hango.providers.scripted import text_reply
from hango.tokens.heuristic import HeuristicEstimator
from tests.histories import assistant, stored_messages, user

ONE_HOUR = CacheControl(type="ephemeral", ttl="1h")


class Contributes(PassThrough):
    """A middleware that adds fixed system blocks (the stable prompt, or memory)."""

    def __init__(self, *texts: str) -> None:
        self.blocks = tuple(TextBlock(text=t) for t in texts)

    def contribute(self, assembly: Assembly) -> Assembly:
        return assembly.add(system=self.blocks)


def chain(caching: bool = True) -> tuple[Middleware, ...]:
    return (
        Contributes("You are an agent.", "## Files\nTools."),
        PromptCacheMiddleware(caching),
        Contributes("## Memory\nchanges every turn"),
    )


def send(
    middleware: tuple[Middleware, ...],
    messages: tuple[Message, ...],
    *,
    summary: bool,
    tools: tuple[ToolDefinition, ...] = (),
    with_assembly: bool = True,
) -> tuple[Request, Request]:
    """Runs one call through the chain; returns (request built, request that reached the end)."""
    assembly = assemble(middleware)
    request = Request(
        model="m",
        max_tokens=10,
        messages=messages,
        system=assembly.system or None,
        tools=tools or None,
    )
    seqs: tuple[int | None, ...] = tuple(
        None if summary and n == 0 else n + 1 for n in range(len(messages))
    )
    call = ModelCall(
        session_id="s",
        turn=1,
        request=request,
        seqs=seqs,
        state=StateHolder(),
        assembly=assembly if with_assembly else None,
    )
    reached: list[Request] = []

    def terminal(c: ModelCall) -> Response:
        reached.append(c.request)
        return text_reply("ok")

    run_chain(middleware, call, terminal)
    return request, reached[0]


def compacted() -> tuple[Message, ...]:
    return (user("<summary>earlier work</summary>"), assistant("Continuing."), user("next"))


def marked(blocks: tuple[ContentBlock, ...] | tuple[TextBlock, ...]) -> list[int]:
    return [n for n, b in enumerate(blocks) if getattr(b, "cache_control", None) is not None]


# --- contribute -------------------------------------------------------------------------


def test_index_is_recorded_at_its_position_so_memory_lands_after_it() -> None:
    assembly = assemble(chain())
    assert [b.text for b in assembly.system][-1] == "## Memory\nchanges every turn"
    assert assembly.stable_system_index == 1


def test_no_index_without_caching_or_without_system_blocks() -> None:
    assert assemble(chain(caching=False)).stable_system_index is None
    assert PromptCacheMiddleware(True).contribute(Assembly()).stable_system_index is None


# --- wrap -------------------------------------------------------------------------------


def test_breakpoints_on_newest_message_system_block_and_summary_message() -> None:
    built, sent = send(chain(), compacted(), summary=True)

    assert marked(sent.system_blocks()) == [1]
    assert sent.system_blocks()[1].cache_control == EPHEMERAL
    assert marked(sent.sent_messages()[0].blocks()) == [0]
    assert [marked(m.blocks()) for m in sent.sent_messages()[1:]] == [[], [0]]
    assert count_breakpoints(sent) == 3
    dumped = sent.to_api()
    assert dumped["system"][1]["cache_control"] == {"type": "ephemeral"}
    assert dumped["messages"][0]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert dumped["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    # The request that was built is untouched: the middleware works on a copy.
    assert count_breakpoints(built) == 0
    assert sent.sent_messages()[0].text() == built.messages[0].text()


def test_without_a_summary_the_system_block_and_the_newest_message() -> None:
    _, sent = send(chain(), (user("hello"),), summary=False)
    assert marked(sent.system_blocks()) == [1]
    assert marked(sent.sent_messages()[0].blocks()) == [0]
    assert count_breakpoints(sent) == 2


def test_the_summary_breakpoint_goes_on_its_last_block() -> None:
    summary = Message(role="user", content=(TextBlock(text="a"), TextBlock(text="b")))
    _, sent = send(chain(), (summary, assistant("ok"), user("go")), summary=True)
    assert marked(sent.sent_messages()[0].blocks()) == [1]


def test_caching_off_changes_nothing_at_all() -> None:
    built, sent = send(chain(caching=False), compacted(), summary=True)
    assert sent is built
    assert count_breakpoints(sent) == 0


def test_without_the_assembly_note_no_system_breakpoint() -> None:
    _, sent = send(chain(), compacted(), summary=True, with_assembly=False)
    assert marked(sent.system_blocks()) == []
    assert marked(sent.sent_messages()[0].blocks()) == [0]
    assert marked(sent.sent_messages()[-1].blocks()) == [0]


def batch(size: int, start: int = 0) -> tuple[Message, Message]:
    """A parallel tool batch: one reply with ``size`` tool_use blocks, and their results."""
    ids = [f"toolu_{start + n:04d}" for n in range(size)]
    reply = Message(
        role="assistant",
        content=tuple(ToolUseBlock(id=i, name="read", input={"n": i}) for i in ids),
    )
    results = Message(
        role="user", content=tuple(ToolResultBlock(tool_use_id=i, content="ok") for i in ids)
    )
    return reply, results


def test_a_large_parallel_batch_gets_a_bridge_to_the_previous_call() -> None:
    reply, results = batch(12)
    messages = (user("start"), reply, results)
    _, sent = send(chain(), messages, summary=False)
    # 24 blocks after the previous call's last block: the newest breakpoint alone could
    # not see it, so that block is marked too (it is read, not written again).
    assert marked(sent.sent_messages()[0].blocks()) == [0]
    assert marked(sent.sent_messages()[2].blocks()) == [11]
    assert count_breakpoints(sent) == 3


def test_a_small_batch_needs_no_bridge() -> None:
    reply, results = batch(9)  # 18 blocks: within the look-back
    _, sent = send(chain(), (user("start"), reply, results), summary=False)
    assert marked(sent.sent_messages()[0].blocks()) == []
    assert count_breakpoints(sent) == 2


def test_bridge_newest_system_and_summary_fill_exactly_four() -> None:
    reply, results = batch(12)
    messages = (user("<summary>s</summary>"), assistant("ok"), user("go"), reply, results)
    _, sent = send(chain(), messages, summary=True)
    assert count_breakpoints(sent) == MAX_BREAKPOINTS
    assert [marked(m.blocks()) for m in sent.sent_messages()] == [[0], [], [0], [], [11]]


def test_breakpoints_under_the_minimum_cacheable_length_are_not_placed() -> None:
    def send_with(minimum: int) -> Request:
        middleware = (
            Contributes("You are an agent.", "## Files\nTools."),
            PromptCacheMiddleware(True, CachePolicy(minimum, HeuristicEstimator())),
        )
        long_tail = user("x " * 4000)
        return send(middleware, (user("hi"), assistant("ok"), long_tail), summary=False)[1]

    sent = send_with(1024)
    assert marked(sent.system_blocks()) == []  # a few tokens of system: under the minimum
    assert marked(sent.sent_messages()[-1].blocks()) == [0]  # the whole request is well over it
    assert count_breakpoints(send_with(100_000)) == 0
    assert count_breakpoints(send_with(0)) == 2


def test_never_more_than_four_breakpoints_the_newest_first() -> None:
    tools = tuple(
        ToolDefinition(name=f"t{n}", cache_control=EPHEMERAL if n < 2 else None) for n in range(3)
    )
    messages = compacted()

    _, sent = send(chain(), messages, summary=True, tools=tools)  # 2 exist: room for two
    assert count_breakpoints(sent) == MAX_BREAKPOINTS
    assert marked(sent.sent_messages()[-1].blocks()) == [0]
    assert marked(sent.system_blocks()) == [1]
    assert marked(sent.sent_messages()[0].blocks()) == []

    full = (*tools[:2], ToolDefinition(name="t8", cache_control=EPHEMERAL))
    _, sent = send(chain(), messages, summary=True, tools=full)  # 3 exist: room for one
    assert count_breakpoints(sent) == MAX_BREAKPOINTS
    assert marked(sent.sent_messages()[-1].blocks()) == [0]
    assert marked(sent.system_blocks()) == []

    four = (*full, ToolDefinition(name="t9", cache_control=EPHEMERAL))
    _, sent = send(chain(), messages, summary=True, tools=four)  # 4 exist: room for none
    assert count_breakpoints(sent) == MAX_BREAKPOINTS


def test_automatic_caching_takes_a_slot() -> None:
    tools = tuple(ToolDefinition(name=f"t{n}", cache_control=EPHEMERAL) for n in range(3))
    request = Request.model_validate(
        {
            "model": "m",
            "max_tokens": 10,
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [t.to_api() for t in tools],
            "cache_control": {"type": "ephemeral"},
        }
    )
    placed = place_breakpoints(request, stable_system_index=None, summary_message=False)
    assert placed is request


def test_an_existing_breakpoint_on_the_target_is_kept_as_is() -> None:
    summary = Message(role="user", content=(TextBlock(text="s", cache_control=ONE_HOUR),))
    _, sent = send(chain(), (summary, assistant("a"), user("b")), summary=True)
    assert sent.sent_messages()[0].blocks()[0].cache_control == ONE_HOUR  # type: ignore[union-attr]
    assert count_breakpoints(sent) == 3


def test_marks_made_through_the_copy_carry_the_json_pydantic_writes() -> None:
    """Marked through the session's copy, a message's JSON is its stored JSON with the marker
    written in where that is exactly what serializing the marked form gives (the last block
    marked, no unknown keys after it), and the form serialized everywhere else: the body is
    the plain serialization's, byte for byte, whatever the newest message looks like."""
    use = ToolUseBlock(id="toolu_1", name="bash", input={"cmd": "ls", "n": 1.5})
    newest_forms = [
        Message(role="user", content=(ToolResultBlock(tool_use_id="toolu_1", content="ok"),)),
        # Unknown keys on the message, on the block: they follow the marker when serialized.
        Message.model_validate(
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}], "x": 1}
        ),
        Message.model_validate(
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "y": 2}]}
        ),
        # The last block a kind no marker goes on: the one before it carries the marker.
        Message(
            role="user",
            content=(
                ToolResultBlock(tool_use_id="toolu_1", content="ok"),
                RedactedThinkingBlock(data="x"),
            ),
        ),
        Message(role="user", content=(ToolResultBlock(tool_use_id="toolu_1"),)),
        # A client's explicit "cache_control": null is a key of the stored JSON already.
        Message.model_validate(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "cache_control": None}
                ],
            }
        ),
        # Plain text (the copy answers the call before it): marked, it becomes blocks.
        Message(role="user", content="plain text"),
    ]
    for newest in newest_forms:
        history = (user("go"), Message(role="assistant", content=(use,)), newest)
        stored = stored_messages(history)
        view, _ = OutgoingCopy().update(stored)
        request = Request(model="m", max_tokens=10, messages=view)
        marked = place_breakpoints(
            request, stable_system_index=None, summary_message=True, changed_from=2
        )
        assert marked.marks, newest
        plain = Request.model_validate(marked.to_api())
        assert marked.api_bytes() == plain.api_bytes(), newest


def test_a_copy_marks_only_the_messages_of_its_current_version() -> None:
    """Marks asked for a view the copy has moved on from are not made from its newer
    messages: the middleware then marks the request's own (``None`` tells it to)."""
    history = [user("go"), assistant("ok"), user("next")]
    stored = stored_messages(history)
    copy = OutgoingCopy()
    view, _ = copy.update(stored[:1])
    copy.update(stored)
    mark = lambda message, at, part: (message, part)  # noqa: E731
    assert copy.marked({0: {0}}, mark, view.version) is None
    assert copy.marked({0: {0}}, mark, copy.version) == {0: view[0]}
