"""Splitting an upstream response's calls between the history tool and the client."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from hango.core.messages import TextBlock, ThinkingBlock, ToolUseBlock
from hango.tools.history_calls import called_tool, split_history_calls

NAME = "session_history"


def use(tool_id: str, name: str) -> ToolUseBlock:
    return ToolUseBlock(id=tool_id, name=name, input={"command": "search", "query": "x"})


def test_mixed_calls_keep_their_order_and_the_client_sees_everything_else() -> None:
    thinking = ThinkingBlock(thinking="look it up", signature="s")
    text = TextBlock(text="Let me check.")
    blocks = [thinking, text, use("a", NAME), use("b", "Bash"), use("c", NAME), use("d", "Read")]
    split = split_history_calls(blocks, NAME)
    assert split.history == (blocks[2], blocks[4])
    assert split.client == (blocks[3], blocks[5])
    visible = [thinking, text, blocks[3], blocks[5]]
    assert all(a is b for a, b in zip(split.client_blocks, visible, strict=True))
    assert not split.only_history


def test_only_history_calls_are_the_gateways_to_answer() -> None:
    split = split_history_calls([TextBlock(text="hm"), use("a", NAME)], NAME)
    assert split.only_history and split.client == ()
    assert not split_history_calls([TextBlock(text="done")], NAME).only_history


def test_api_json_objects_split_the_same_way_untouched() -> None:
    blocks: list[dict[str, Any]] = [
        {"type": "text", "text": "ok"},
        {"type": "tool_use", "id": "a", "name": NAME, "input": {}, "extra": 1},
        {"type": "tool_use", "id": "b", "name": "Session_History", "input": {}},
        {"type": "server_tool_use", "id": "c", "name": NAME, "input": {}},
    ]
    split = split_history_calls(blocks, NAME)
    assert split.history == (blocks[1],)
    assert split.client == (blocks[2],)  # names are matched exactly
    assert split.client_blocks == (blocks[0], blocks[2], blocks[3])
    assert called_tool({"type": "tool_use", "name": 3}) is None


def test_a_renamed_tool_is_split_by_the_name_it_was_offered_under() -> None:
    blocks = [use("a", NAME), use("b", "hango_history")]
    split = split_history_calls(blocks, "hango_history")
    assert split.history == (blocks[1],) and split.client == (blocks[0],)


@given(st.lists(st.tuples(st.sampled_from([NAME, "Bash", None]), st.booleans()), max_size=12))
def test_every_block_lands_in_exactly_one_place(spec: list[tuple[str | None, bool]]) -> None:
    blocks: list[Any] = []
    for number, (name, as_json) in enumerate(spec):
        block: Any = TextBlock(text=str(number)) if name is None else use(str(number), name)
        blocks.append(block.to_api() if as_json else block)
    split = split_history_calls(blocks, NAME)
    assert len(split.history) + len(split.client_blocks) == len(blocks)
    merged = sorted([*split.history, *split.client_blocks], key=lambda b: blocks.index(b))
    assert merged == blocks
    assert all(called_tool(b) == NAME for b in split.history)
    assert all(called_tool(b) != NAME for b in split.client_blocks)
    assert list(split.client) == [b for b in split.client_blocks if called_tool(b) is not None]
