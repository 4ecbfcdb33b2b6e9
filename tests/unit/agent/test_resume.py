"""Resumable turns: a turn whose process died is finished by the next run_turn (or resume)."""

from __future__ import annotations

from pathlib import Path

from hango.agent.loop import INTERRUPTED_TOOL
from hango.core.messages import Message, ToolResultBlock
from hango.providers.scripted import text_reply, tool_reply
from tests.agent_support import build


def crashed_after(agent: object, *messages: Message) -> int:
    """Leave a turn as a killed process would: run started, messages stored, never ended."""
    loop = agent.loop  # type: ignore[attr-defined]
    ctx = loop.begin_turn("s1")
    for message in messages:
        loop.append(ctx, message)
    return int(ctx.turn)


def test_the_next_turn_first_finishes_the_one_a_dead_process_left(tmp_path: Path) -> None:
    agent, provider = build(tmp_path, [text_reply("answer to the first"), text_reply("second")])
    turn = crashed_after(agent, Message(role="user", content="first question"))

    result = agent.loop.run_turn("s1", "second question")

    assert result.turn == turn + 1
    runs = agent.store.runs("s1")
    assert [(run.turn, run.status) for run in runs] == [(1, "completed"), (2, "completed")]
    stored = agent.store.messages("s1")
    assert [(m.turn, m.message.role, m.message.text()) for m in stored] == [
        (1, "user", "first question"),
        (1, "assistant", "answer to the first"),
        (2, "user", "second question"),
        (2, "assistant", "second"),
    ]
    # The resumed call was the first turn's own request: its question, not the new one.
    assert provider.requests[0].messages[-1].text() == "first question"


def test_tool_calls_left_without_results_are_not_run_again(tmp_path: Path) -> None:
    agent, _ = build(tmp_path, [text_reply("done after the interruption")])
    call = tool_reply(("write_file", {"path": "/work/a.txt", "content": "x"})).as_message()
    crashed_after(agent, Message(role="user", content="write it"), call)

    result = agent.loop.resume("s1")

    assert result is not None and result.turn == 1 and result.tool_calls == 0
    stored = [m.message for m in agent.store.messages("s1")]
    assert [m.role for m in stored] == ["user", "assistant", "user", "assistant"]
    (block,) = stored[2].blocks()
    assert isinstance(block, ToolResultBlock) and block.is_error
    assert block.tool_use_id == next(iter(call.tool_uses())).id
    assert block.content == INTERRUPTED_TOOL
    assert not agent.history.exists("/work/a.txt")
    assert agent.store.runs("s1")[0].status == "completed"


def test_an_answered_turn_is_only_closed_and_nothing_is_left_to_resume(tmp_path: Path) -> None:
    agent, provider = build(tmp_path)
    crashed_after(agent, Message(role="user", content="hi"), text_reply("hello").as_message())

    result = agent.loop.resume("s1")

    assert result is not None and result.model_calls == 0
    assert provider.requests == []
    assert agent.store.runs("s1")[0].status == "completed"
    assert agent.loop.resume("s1") is None
