"""The SSE cutter: whole events whatever the chunking, and the message folded from them."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator

from hypothesis import given
from hypothesis import strategies as st

from hango.gateway.sse import Event, MessageBuilder, events
from tests.fakeapi import sse_bytes, stream_events

MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "m",
    "content": [
        {"type": "thinking", "thinking": "hmm", "signature": "sig"},
        {"type": "text", "text": "héllo"},
        {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"cmd": "ls"}},
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {"input_tokens": 7, "output_tokens": 9},
}


def cut(stream: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(stream), *(c % (len(stream) + 1) for c in cuts)})
    return [stream[a:b] for a, b in itertools.pairwise(points)]


def collected(chunks: list[bytes]) -> list[Event]:
    async def source() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield chunk

    async def gather() -> list[Event]:
        return [event async for event in events(source())]

    return asyncio.run(gather())


@given(cuts=st.lists(st.integers(min_value=0), max_size=40), crlf=st.booleans())
def test_events_are_whole_whatever_the_chunks(cuts: list[int], crlf: bool) -> None:
    sent = sse_bytes(stream_events(MESSAGE))
    stream = b"".join(sent)
    if crlf:
        stream = stream.replace(b"\n", b"\r\n")
    got = collected(cut(stream, cuts))
    assert [e.raw for e in got] == sent
    builder = MessageBuilder()
    for event in got:
        builder.add(event)
    folded = builder.response()
    assert folded is not None
    assert folded.to_api() == MESSAGE


def test_a_stream_cut_mid_event_still_ends_with_that_part() -> None:
    got = collected([b'event: ping\ndata: {"type": "ping"}\n\nevent: message_st'])
    assert [e.name for e in got] == ["ping", "message_st"]
    assert got[1].data is None
