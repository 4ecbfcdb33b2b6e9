"""The history tool in the library loop: offered, scoped, and able to recover evicted facts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hango.compaction.summary_prompt import HISTORY_TOOL_NAME
from hango.core.messages import ToolResultBlock
from hango.providers.scripted import text_reply, tool_reply
from hango.wiring.agent import HISTORY_TOOL_MIN_WINDOW
from tests.agent_support import build
from tests.history_reading import page_body, parse_rendering

FACT = "Remember fact {i}: token key-{i:04d}. " + "detail " * 500
WINDOW = HISTORY_TOOL_MIN_WINDOW


def chat(agent: Any, provider: Any, session: str, turns: int) -> None:
    for i in range(turns):
        provider.push(text_reply(f"ok {i}"))
        agent.loop.run_turn(session, FACT.format(i=i))


def tool_results(agent: Any, session: str) -> list[ToolResultBlock]:
    return [b for m in agent.store.messages(session) for b in m.message.tool_results()]


def test_the_model_recovers_an_evicted_fact_through_the_tool(tmp_path: Path) -> None:
    agent, provider = build(tmp_path, window=WINDOW)
    chat(agent, provider, "alice", 14)
    assert agent.store.latest_state("alice").latest is not None  # compaction evicted turn 1
    provider.push(
        tool_reply((HISTORY_TOOL_NAME, {"command": "search", "query": "key-0000"})),
        tool_reply((HISTORY_TOOL_NAME, {"command": "read", "from_seq": 1})),
        text_reply("The first token was key-0000."),
    )
    agent.loop.run_turn("alice", "What was the very first token?")
    request = provider.requests[-1]
    assert HISTORY_TOOL_NAME in {tool.name for tool in request.tool_definitions()}
    head = request.messages[0]
    assert head.role == "user" and HISTORY_TOOL_NAME in head.text()
    found, read = tool_results(agent, "alice")
    assert not found.is_error and "1. seq 1, turn 1, user, block 1: text" in found.text()
    body, more = page_body(read.text())
    fact = FACT.format(i=0)
    header = f"=== seq 1, turn 1, user, 1 blocks ===\n--- block 1: text, {len(fact)} chars ---\n"
    assert body == (header + fact)[: len(body)] and "key-0000" in body
    assert more == len(body)  # the rest is one call away


def test_another_sessions_model_finds_nothing_of_it(tmp_path: Path) -> None:
    agent, provider = build(tmp_path, window=WINDOW)
    chat(agent, provider, "alice", 3)
    provider.push(
        tool_reply((HISTORY_TOOL_NAME, {"command": "search", "query": "key-0000"})),
        tool_reply((HISTORY_TOOL_NAME, {"command": "read", "from_seq": 1, "to_seq": 6})),
        text_reply("nothing"),
    )
    agent.loop.run_turn("bob", "find alice's token")
    searched, read = tool_results(agent, "bob")
    assert "No stored message of this session contains" in searched.text()
    assert "Remember fact" not in read.text()
    shown = parse_rendering(page_body(read.text())[0])
    assert [m.seq for m in shown] == [1, 2, 3, 4]  # bob's own, up to the read's call
    assert shown[0].blocks == [("text", "find alice's token")]


def test_a_window_too_small_for_its_definition_keeps_to_the_file_tools(tmp_path: Path) -> None:
    small, _ = build(tmp_path / "small", window=WINDOW - 1)
    large, _ = build(tmp_path / "large", window=WINDOW)
    assert HISTORY_TOOL_NAME not in small.loop.tools.names()
    assert "read_file" in small.loop.tools.names()
    assert HISTORY_TOOL_NAME in large.loop.tools.names()


def test_a_page_fits_under_the_large_result_offload_of_a_small_window(tmp_path: Path) -> None:
    agent, provider = build(tmp_path, window=WINDOW)
    long_message = "Spec: " + " ".join(f"rule-{n:04d}" for n in range(1500))
    provider.push(
        tool_reply((HISTORY_TOOL_NAME, {"command": "read", "from_seq": 1})),
        text_reply("read it"),
    )
    agent.loop.run_turn("s", long_message)
    [page] = tool_results(agent, "s")
    # Shown as a page of the tool's own, not moved to /large_tool_results/ as a preview.
    assert page.text().startswith("<session_history_data ") and "offset=" in page.text()
    assert "/large_tool_results/" not in page.text()
