"""Ids, names and numbers the API refuses are refused on input (issue 26, item 7)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from hango.cli import main
from hango.cli.errors import EXIT_TRANSCRIPT
from hango.core.api_rules import message_problem, tool_use_problem
from hango.core.errors import InvalidInputError
from hango.core.messages import Message, Response, ToolResultBlock, ToolUseBlock, Usage
from tests.agent_support import build


def _use(id: str = "toolu_01", name: str = "read_file", **input: object) -> ToolUseBlock:
    return ToolUseBlock(id=id, name=name, input=input or {"path": "/a"})


@pytest.mark.parametrize(
    ("use", "says"),
    [
        (_use(id="../../x\0y"), "tool call id '../../x\\x00y' is not allowed"),
        (_use(id=""), "tool call id '' is not allowed"),
        (_use(id="toolu 01"), "is not allowed"),
        (_use(name=""), "has the name ''"),
        (_use(name="../../x\0y"), "has the name"),
        (_use(name="a" * 129), "1 to 128"),
        (_use(limit=math.nan), "NaN or infinity"),
        (_use(nested={"deep": [1.0, math.inf]}), "NaN or infinity"),
    ],
)
def test_what_the_api_refuses_is_named(use: ToolUseBlock, says: str) -> None:
    problem = tool_use_problem(use)
    assert problem is not None and says in problem


def test_what_the_api_accepts_passes() -> None:
    assert tool_use_problem(_use(id="toolu_01A-b_9", name="mcp__server__tool-1", n=1.5)) is None
    assert message_problem(Message(role="user", content="plain text")) is None
    bad_result = Message(role="user", content=(ToolResultBlock(tool_use_id="a/b", content="x"),))
    assert "tool_result's tool_use_id 'a/b'" in (message_problem(bad_result) or "")


@pytest.mark.parametrize(
    ("tool_id", "name", "input"),
    [
        ("../../x", "ls", "{}"),
        ("t1", "", "{}"),
        ("t1", "ls", '{"n": NaN}'),
        ("t1", "ls", '{"n": -Infinity}'),
    ],
)
def test_replay_refuses_them_naming_the_message(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tool_id: str, name: str, input: str
) -> None:
    use = f'{{"type": "tool_use", "id": "{tool_id}", "name": "{name}", "input": {input}}}'
    result = f'{{"type": "tool_result", "tool_use_id": "{tool_id}", "content": "ok"}}'
    body = (
        '{"messages": [{"role": "user", "content": "go"}, {"role": "assistant", "content": ['
        + use
        + ']}, {"role": "user", "content": ['
        + result
        + ']}, {"role": "assistant", "content": "done"}]}'
    )
    transcript = tmp_path / "bad.json"
    transcript.write_text(body, encoding="utf-8")
    database = tmp_path / "h.db"
    code = main(["replay", str(transcript), "--database-url", f"sqlite:///{database}"])
    err = capsys.readouterr().err
    assert code == EXIT_TRANSCRIPT, err
    assert "messages[1]" in err and "this is a bug" not in err
    json.loads(body.replace("NaN", "0").replace("-Infinity", "0"))  # only the rule is wrong


def _reply(*uses: ToolUseBlock) -> Response:
    return Response(
        id="msg_bad", model="m", content=uses, stop_reason="tool_use", usage=Usage(output_tokens=1)
    )


@pytest.mark.parametrize(
    "use", [_use(id="../../x\0y"), _use(name="no spaces allowed"), _use(limit=math.nan)]
)
def test_the_live_loop_stores_nothing_of_such_a_reply(tmp_path: Path, use: ToolUseBlock) -> None:
    agent, provider = build(tmp_path)
    provider.push(_reply(use))
    with pytest.raises(InvalidInputError, match="nothing of this reply was stored"):
        agent.loop.run_turn("s", "go")
    stored = agent.store.messages("s")
    assert [m.message.role for m in stored] == ["user"]


def test_a_user_message_answering_with_a_bad_id_is_refused_before_it_is_stored(
    tmp_path: Path,
) -> None:
    agent, _ = build(tmp_path)
    bad = Message(role="user", content=(ToolResultBlock(tool_use_id="x/../y", content="ok"),))
    with pytest.raises(InvalidInputError, match="nothing was stored"):
        agent.loop.run_turn("s", bad)
    assert agent.store.messages("s") == []
