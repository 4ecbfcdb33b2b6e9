"""Random upstream rounds with interleaved history-tool calls, through a real ``hango serve``.

One session is compacted once (the module's fixture); each example then scripts the
upstream answers of one streamed client request (text, thinking, the client's Bash calls
and history calls in any order, one to six rounds) and reads the raw events the client
gets: one valid sequence, no history block, every other block of the rounds the gateway
used, in order, and the stop reason the gateway promises.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fakeapi import FakeAnthropicAPI
from tests.gateway_support import RunningGateway, running_gateway
from tests.history_gateway_support import (
    BASH,
    HISTORY,
    MODEL,
    WINDOW,
    LookupUpstream,
    run_until_compacted,
    sender,
)
from tests.sse_check import leaked_blocks, parse_sse, sequence_problems

KEY = "sk-ant-history-property"
FINAL = {"content": [{"type": "text", "text": "that is all"}], "stop_reason": "end_turn"}
SESSION = "property"
_text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=20)


class Compacted:
    """The gateway, its upstream and the client's history of the compacted session."""

    def __init__(self, upstream: FakeAnthropicAPI, gateway: RunningGateway, history: list[Any]):
        self.upstream = upstream
        self.gateway = gateway
        self.history = history

    def __repr__(self) -> str:  # a failing example would print the whole history
        return f"Compacted(history of {len(self.history)} messages)"


@pytest.fixture(scope="module")
def compacted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Compacted]:
    home: Path = tmp_path_factory.mktemp("history-property")
    script = LookupUpstream()
    with (
        FakeAnthropicAPI(window=WINDOW, responder=script) as upstream,
        running_gateway(upstream.base_url, home, max_input_tokens=WINDOW) as gateway,
        anthropic.Anthropic(api_key=KEY, base_url=gateway.url, max_retries=0) as client,
    ):
        history = run_until_compacted(sender(client, SESSION, False), script)
        yield Compacted(upstream, gateway, history)


@st.composite
def rounds(draw: st.DrawFn) -> list[dict[str, Any]]:
    answers = []
    for _ in range(draw(st.integers(1, 6))):
        kinds = draw(st.lists(st.sampled_from(["text", "thinking", "bash", "history"]), max_size=4))
        blocks = [_block(kind, draw(_text)) for kind in kinds]
        calls = any(b["type"] == "tool_use" for b in blocks)
        answers.append({"content": blocks, "stop_reason": "tool_use" if calls else "end_turn"})
    return answers


_ids = iter(range(10**9))


def _block(kind: str, text: str) -> dict[str, Any]:
    if kind == "text":
        return {"type": "text", "text": text}
    if kind == "thinking":
        return {"type": "thinking", "thinking": text, "signature": "c2ln"}
    ident = f"toolu_p{next(_ids)}"
    if kind == "bash":
        return {"type": "tool_use", "id": ident, "name": "Bash", "input": {"cmd": text}}
    search = {"command": "search", "query": text}
    return {"type": "tool_use", "id": ident, "name": HISTORY, "input": search}


def _visible(answers: list[dict[str, Any]]) -> list[Any]:
    return [b for a in answers for b in a["content"] if b.get("name") != HISTORY]


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(answers=rounds())
def test_random_rounds_reach_the_client_as_one_valid_message_without_the_tool(
    compacted: Compacted, answers: list[dict[str, Any]]
) -> None:
    upstream, history = compacted.upstream, compacted.history
    queue = iter(answers)
    # Past the script, the model answers in text (the gateway calls again after a round
    # that called only the history tool, until its limit).
    upstream.responder = lambda body: next(queue, FINAL)
    before = len(upstream.message_requests())
    history.append({"role": "user", "content": "go on"})
    events = parse_sse(_stream(compacted.gateway, history))
    calls = len(upstream.message_requests()) - before
    used = [*answers, *[FINAL] * calls][:calls]
    assert sequence_problems(events) == []
    assert leaked_blocks(events, (HISTORY,)) == 0
    content = _content(events)
    assert [_without_empty(b) for b in content] == [_without_empty(b) for b in _visible(used)]
    stop = next(d for n, d in events if n == "message_delta")["delta"]["stop_reason"]
    last = used[-1]
    client_calls = [b for b in last["content"] if b.get("name") == "Bash"]
    assert stop == ("tool_use" if client_calls else "end_turn")
    _continue(history, content)


def _stream(gateway: RunningGateway, history: list[Any]) -> bytes:
    body = {"model": MODEL, "max_tokens": 1000, "tools": [BASH], "messages": history}
    headers = {"x-api-key": KEY, "x-hango-session": SESSION}
    with httpx2.stream(
        "POST", f"{gateway.url}/v1/messages", json={**body, "stream": True}, headers=headers
    ) as reply:
        return b"".join(reply.iter_raw())


def _content(events: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """The blocks the events build (text and thinking joined, tool input parsed)."""
    blocks: list[dict[str, Any]] = []
    partial: dict[int, str] = {}
    for name, data in events:
        if name == "content_block_start":
            blocks.append(dict(data["content_block"]))
        elif name == "content_block_delta":
            delta, block = data["delta"], blocks[data["index"]]
            if delta["type"] == "input_json_delta":
                partial[data["index"]] = partial.get(data["index"], "") + delta["partial_json"]
            for key in ("text", "thinking", "signature"):
                if delta["type"] == f"{key}_delta":
                    block[key] = block.get(key, "") + delta[key]
    for index, text in partial.items():
        blocks[index]["input"] = json.loads(text)
    return blocks


def _without_empty(block: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in block.items() if v not in ("", None)}


def _continue(history: list[Any], content: list[dict[str, Any]]) -> None:
    """The client's next turn: the answer, and a result for each of its Bash calls."""
    history.append({"role": "assistant", "content": content or [{"type": "text", "text": "-"}]})
    calls = [b["id"] for b in content if b.get("type") == "tool_use"]
    if calls:
        results = [{"type": "tool_result", "tool_use_id": i, "content": "ok"} for i in calls]
        history.append({"role": "user", "content": results})
