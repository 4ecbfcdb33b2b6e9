"""Streaming through the gateway: event for event what upstream sent; a client that goes
away cancels the upstream call."""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hango.gateway.sse import MessageBuilder, parse_event
from tests.fakeapi import FakeAnthropicAPI, text_reply
from tests.gateway_support import RunningGateway

HEADERS = {"x-api-key": "sk-ant-stream-key", "anthropic-version": "2023-06-01"}

texts = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=60)
blocks = st.one_of(
    texts.map(lambda t: {"type": "text", "text": t}),
    st.builds(
        lambda n, args: {"type": "tool_use", "id": f"toolu_{n}", "name": "Bash", "input": args},
        st.integers(0, 10**6),
        st.dictionaries(st.sampled_from(["cmd", "cwd", "n"]), texts, max_size=3),
    ),
    st.builds(
        lambda t, s: {"type": "thinking", "thinking": t, "signature": s},
        texts,
        st.text("abcdef0123456789", min_size=1, max_size=20),
    ),
)


def received_events(gateway: RunningGateway, body: dict[str, Any], session: str) -> list[bytes]:
    """The SSE events of the gateway's answer, cut at blank lines as they arrive."""
    headers = {**HEADERS, "x-hango-session": session}
    buffer = b""
    with httpx2.stream(
        "POST", f"{gateway.url}/v1/messages", json=body, headers=headers, timeout=30
    ) as answer:
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("text/event-stream")
        for chunk in answer.iter_raw():
            buffer += chunk
    return [part + b"\n\n" for part in buffer.split(b"\n\n") if part]


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(content=st.lists(blocks, min_size=1, max_size=5), question=texts.filter(str.strip))
def test_without_compaction_the_stream_is_event_for_event_what_upstream_sent(
    gateway: RunningGateway,
    upstream: FakeAnthropicAPI,
    content: list[dict[str, Any]],
    question: str,
) -> None:
    upstream.push({"content": content, "stop_reason": "end_turn"})
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 100,
        "stream": True,
        "messages": [{"role": "user", "content": question}],
    }
    got = received_events(gateway, body, session=str(uuid.uuid4()))
    assert got == upstream.streamed[-1]
    builder = MessageBuilder()
    for raw in got:
        builder.add(parse_event(raw))
    folded = builder.response()
    assert folded is not None
    assert [b.to_api() for b in folded.content] == content


def test_a_client_that_disconnects_cancels_the_upstream_stream(
    gateway: RunningGateway, upstream: FakeAnthropicAPI
) -> None:
    upstream.event_delay = 0.2  # ten events: two seconds of stream
    upstream.push(text_reply("a long answer"))
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 100,
        "stream": True,
        "messages": [{"role": "user", "content": "go"}],
    }
    started = time.monotonic()
    with httpx2.stream(
        "POST", f"{gateway.url}/v1/messages", json=body, headers=HEADERS, timeout=30
    ) as answer:
        first = next(answer.iter_raw())
        assert first.startswith(b"event: message_start")
    deadline = time.monotonic() + 5
    while upstream.streams_cut == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert upstream.streams_cut == 1
    assert time.monotonic() - started < 2.0  # cut, not read to its end
    runs = _run_statuses(gateway)
    assert runs == ["failed"]


def _run_statuses(gateway: RunningGateway) -> list[str]:
    from sqlalchemy import text

    deadline = time.monotonic() + 5
    while True:
        with gateway.gateway.store.engine.connect() as conn:
            statuses = [r[0] for r in conn.execute(text("SELECT status FROM runs"))]
        if "running" not in statuses or time.monotonic() > deadline:
            return statuses
        time.sleep(0.05)
