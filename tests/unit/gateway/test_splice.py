"""The splice over random upstream answers with interleaved calls of the gateway's tool.

Each example is a list of upstream answers (text, thinking, the client's tool calls and
history-tool calls in any order); the rounds are driven as the gateway drives them
(:func:`internal_round_follows`) and the client's side is checked: one valid event
sequence (or JSON message), no history-tool block, every other block in order, the
stop reason and usage the module promises, and the very bytes upstream sent when the
tool was not called.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from hango.core.messages import Response
from hango.gateway.history_offer import ending_of, internal_round_follows
from hango.gateway.splice import Splice
from hango.gateway.sse import MessageBuilder, parse_event
from hango.gateway.upstream import Head, Item
from hango.tools.history_calls import split_history_calls
from tests.fakeapi import sse_bytes, stream_events
from tests.sse_check import leaked_blocks, parse_sse, sequence_problems

NAME = "session_history"
LIMIT = 3

_text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=30)
_kind = st.sampled_from(["text", "thinking", "client", "history"])


@st.composite
def answers(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Upstream's answers, one per round; an answer ``None`` is a round refused for
    overflow (nothing relayed: the answer ends with what the client has)."""
    rounds: list[Any] = []
    for number in range(draw(st.integers(1, LIMIT + 2))):
        kinds = draw(st.lists(_kind, max_size=5))
        blocks = [_block(kind, f"{number}_{i}", draw(_text)) for i, kind in enumerate(kinds)]
        calls = any(b["type"] == "tool_use" for b in blocks)
        stop = "tool_use" if calls else draw(st.sampled_from(["end_turn", "max_tokens"]))
        usage = {"input_tokens": 100 + number, "output_tokens": 7 + number}
        usage["cache_read_input_tokens"] = 50 * number
        if number and draw(st.integers(0, 9)) == 0:
            rounds.append(None)
            continue
        rounds.append(
            {
                "id": f"msg_{number}",
                "type": "message",
                "role": "assistant",
                "model": "claude-x",
                "content": blocks,
                "stop_reason": stop,
                "stop_sequence": None,
                "usage": usage,
            }
        )
    return rounds


def _block(kind: str, ident: str, text: str) -> dict[str, Any]:
    if kind == "text":
        return {"type": "text", "text": text}
    if kind == "thinking":
        return {"type": "thinking", "thinking": text, "signature": f"sig{ident}"}
    name = NAME if kind == "history" else "Bash"
    return {"type": "tool_use", "id": f"toolu_{ident}", "name": name, "input": {"q": text}}


class Client:
    """The client's side of the exchange: what it received, and whether it has the head."""

    def __init__(self) -> None:
        self.items: list[Item] = []

    def put(self, item: Item) -> None:
        self.items.append(item)

    def head_sent(self) -> bool:
        return any(isinstance(i, Head) for i in self.items)

    def body(self) -> bytes:
        return b"".join(i for i in self.items if isinstance(i, bytes))


def drive(rounds: list[dict[str, Any]], streaming: bool) -> tuple[Client, list[Response]]:
    client = Client()
    splice = Splice(NAME, streaming, client.put, client.head_sent)
    used: list[Response] = []
    for message in rounds:
        if used:
            splice.next_round()
        if message is None:
            break  # refused for overflow: nothing reached the splice
        splice.relay(Head(200, []), None)
        if streaming:
            for raw in sse_bytes(stream_events(message)):
                splice.relay(raw, parse_event(raw))
        else:
            splice.relay(json.dumps(message).encode(), None)
        used.append(Response.model_validate(message))
        if not internal_round_follows(used[-1], NAME, len(used) - 1, LIMIT):
            break
    splice.finish(ending_of(used, NAME))
    return client, used


def visible(rounds: list[dict[str, Any]], count: int) -> list[Any]:
    return [
        block
        for answer in rounds[:count]
        for block in split_history_calls(answer["content"], NAME).client_blocks
    ]


def expected_stop(used: list[Response]) -> str | None:
    last = used[-1]
    if last.stop_reason == "tool_use" and not split_history_calls(last.content, NAME).client:
        return "end_turn"
    return last.stop_reason


@settings(max_examples=300, deadline=None)
@given(answers())
def test_the_client_gets_one_valid_stream_without_the_tool(rounds: list[dict[str, Any]]) -> None:
    client, used = drive(rounds, streaming=True)
    assert sum(isinstance(i, Head) for i in client.items) == 1
    events = parse_sse(client.body())
    assert sequence_problems(events) == []
    assert leaked_blocks(events, (NAME,)) == 0
    builder = MessageBuilder()
    for raw in sse_bytes(events):
        builder.add(parse_event(raw))
    folded = builder.response()
    assert folded is not None
    assert [b.to_api() for b in folded.content] == visible(rounds, len(used))
    assert folded.stop_reason == expected_stop(used)
    if len(used) > 1:
        assert folded.usage.output_tokens == sum(r.usage.output_tokens for r in used)
        assert folded.usage.input_tokens == used[-1].usage.input_tokens
        assert folded.usage.cache_read_input_tokens == used[-1].usage.cache_read_input_tokens
    if len(used) == 1 and not split_history_calls(used[0].content, NAME).history:
        assert client.body() == b"".join(sse_bytes(stream_events(rounds[0])))


@settings(max_examples=200, deadline=None)
@given(answers())
def test_the_client_gets_one_message_without_the_tool(rounds: list[dict[str, Any]]) -> None:
    client, used = drive(rounds, streaming=False)
    assert isinstance(client.items[0], Head) and len(client.items) == 2
    message = json.loads(client.body())
    assert message["content"] == visible(rounds, len(used))
    assert message["stop_reason"] == expected_stop(used)
    assert message["id"] == rounds[0]["id"]
    if len(used) > 1:
        assert message["usage"]["output_tokens"] == sum(r.usage.output_tokens for r in used)
    elif not split_history_calls(used[0].content, NAME).history:
        assert client.body() == json.dumps(rounds[0]).encode()


def test_a_later_round_refused_reaches_a_non_streaming_client_as_the_api_sent_it() -> None:
    client = Client()
    splice = Splice(NAME, False, client.put, client.head_sent)
    splice.relay(Head(200, []), None)
    splice.relay(json.dumps({"content": []}).encode(), None)
    splice.next_round()
    splice.relay(Head(529, [(b"retry-after", b"1")]), None)
    splice.relay(b'{"type":"error"}', None)
    assert client.items == [Head(529, [(b"retry-after", b"1")]), b'{"type":"error"}']


def test_a_later_round_refused_is_not_relayed_into_a_stream_under_way() -> None:
    client = Client()
    splice = Splice(NAME, True, client.put, client.head_sent)
    splice.relay(Head(200, []), None)
    start = sse_bytes([("message_start", {"type": "message_start", "message": {}})])[0]
    splice.relay(start, parse_event(start))
    splice.next_round()
    splice.relay(Head(529, []), None)
    splice.relay(b'{"type":"error"}', None)
    assert client.items == [Head(200, []), start]


def test_the_checker_rejects_what_a_careless_splice_would_send() -> None:
    message = {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
        "content": [
            {"type": "text", "text": "a"},
            {"type": "tool_use", "id": "toolu_h", "name": NAME, "input": {}},
            {"type": "text", "text": "b"},
        ],
        "stop_reason": "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }  # fmt: skip
    events = stream_events(message)
    assert sequence_problems(events) == [] and leaked_blocks(events, (NAME,)) == 1
    dropped = [e for e in events if e[1].get("index") != 1]  # the tool taken out, no renumbering
    assert any("expected 1" in p for p in sequence_problems(dropped))
    assert sequence_problems(events[:-1]) == ["the stream ends without message_stop"]
    second_start = [events[0], *events]
    assert any("second message_start" in p for p in sequence_problems(second_start))
