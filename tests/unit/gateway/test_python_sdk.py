"""The Anthropic Python SDK through ``hango serve``: sync, async and ``messages.stream``."""

from __future__ import annotations

import asyncio
from typing import Any

import anthropic

from tests.fakeapi import FakeAnthropicAPI, text_reply, tool_use_reply
from tests.gateway_support import RunningGateway

CLIENT_KEY = "sk-ant-client-key-0001"
SYSTEM = [
    {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1; cch=91ab;"},
    {"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral"}},
]
UNMANAGED: dict[str, Any] = {
    "metadata": {"user_id": '{"device_id":"d1","session_id":"meta-session"}'},
    "temperature": 0.3,
    "top_k": 5,
    "stop_sequences": ["STOP"],
}
BETA = "context-management-2025-06-27,prompt-caching-scope-2026-01-05"


def client(gateway: RunningGateway) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key=CLIENT_KEY, base_url=gateway.url, max_retries=0)


def create(gateway: RunningGateway, messages: list[Any], **fields: Any) -> Any:
    with client(gateway) as sdk:
        return sdk.messages.create(
            model="claude-sonnet-4-5",
            max_tokens=1000,
            system=SYSTEM,  # type: ignore[arg-type]
            messages=messages,
            extra_headers={"anthropic-beta": BETA, "X-Hango-Session": "py-1"},
            extra_body=UNMANAGED,
            **fields,
        )


def test_sync_create_is_answered_as_upstream_answered(
    gateway: RunningGateway, upstream: FakeAnthropicAPI
) -> None:
    upstream.push(text_reply("hello from upstream"))
    reply = create(gateway, [{"role": "user", "content": "hi"}])
    assert reply.content[0].text == "hello from upstream"  # type: ignore[union-attr]
    (sent,) = upstream.message_requests()
    assert sent.headers["authorization"] == f"Bearer {CLIENT_KEY}"
    assert sent.headers["anthropic-beta"] == BETA
    assert "anthropic-version" in sent.headers
    assert sent.body["system"] == SYSTEM  # the first block and the client's marker untouched
    for field, value in UNMANAGED.items():
        assert sent.body[field] == value
    assert sent.body["messages"] == [{"role": "user", "content": "hi"}]


def test_async_create_and_tool_rounds_append_only_the_new_suffix(
    gateway: RunningGateway, upstream: FakeAnthropicAPI
) -> None:
    upstream.push(
        tool_use_reply(("toolu_1", "Read", {"path": "a.py"})),
        text_reply("done"),
    )
    aclient = anthropic.AsyncAnthropic(api_key=CLIENT_KEY, base_url=gateway.url, max_retries=0)
    history: list[Any] = [{"role": "user", "content": "read a.py"}]

    async def conversation() -> None:
        first = await aclient.messages.create(
            model="claude-sonnet-4-5", max_tokens=100, messages=history
        )
        blocks = [b.model_dump(exclude_none=True) for b in first.content]
        history.append({"role": "assistant", "content": blocks})
        result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "print(1)"}
        history.append({"role": "user", "content": [result]})
        second = await aclient.messages.create(
            model="claude-sonnet-4-5", max_tokens=100, messages=history
        )
        assert second.content[0].text == "done"  # type: ignore[union-attr]
        await aclient.close()

    asyncio.run(conversation())
    assert upstream.message_requests()[-1].body["messages"] == history
    store = gateway.gateway.store
    (session_id,) = _sessions(gateway)
    stored = [m.message.to_api() for m in store.messages(session_id)]
    assert stored == history  # each message once, in order


def test_messages_stream_gives_the_text_and_final_message(
    gateway: RunningGateway, upstream: FakeAnthropicAPI
) -> None:
    upstream.push(text_reply("streamed answer, in two deltas"))
    with (
        client(gateway) as sdk,
        sdk.messages.stream(
            model="claude-sonnet-4-5",
            max_tokens=100,
            messages=[{"role": "user", "content": "stream please"}],
        ) as stream,
    ):
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "streamed answer, in two deltas"
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens > 0
    assert upstream.message_requests()[0].body["stream"] is True


def test_upstream_errors_reach_the_client_in_the_api_format(
    gateway: RunningGateway, upstream: FakeAnthropicAPI
) -> None:
    for status, error in ((429, anthropic.RateLimitError), (529, anthropic.APIStatusError)):
        upstream.fail_next(1, status)
        try:
            create(gateway, [{"role": "user", "content": "hi"}])
        except error as raised:
            assert raised.status_code == status
            assert raised.body["type"] == "error"  # type: ignore[index]
        else:
            raise AssertionError(f"no error for upstream {status}")


def test_a_request_without_a_key_is_refused_without_going_upstream(
    gateway: RunningGateway, upstream: FakeAnthropicAPI
) -> None:
    import httpx2

    answer = httpx2.post(f"{gateway.url}/v1/messages", json={"model": "m", "messages": []})
    assert answer.status_code == 401
    assert answer.json()["error"]["type"] == "authentication_error"
    assert upstream.requests == []


def _sessions(gateway: RunningGateway) -> list[str]:
    from sqlalchemy import text

    with gateway.gateway.store.engine.connect() as conn:
        return [row[0] for row in conn.execute(text("SELECT id FROM sessions"))]


def test_a_malformed_body_is_a_400_naming_the_field_and_stores_nothing(
    gateway: RunningGateway, upstream: FakeAnthropicAPI
) -> None:
    import httpx2

    headers = {"x-api-key": CLIENT_KEY}
    no_tokens = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    bad_message = {"model": "m", "max_tokens": 5, "messages": [{"role": "user"}]}
    for body, named in ((no_tokens, "max_tokens"), (bad_message, "messages.0")):
        answer = httpx2.post(f"{gateway.url}/v1/messages", json=body, headers=headers)
        assert answer.status_code == 400
        assert answer.json()["error"]["type"] == "invalid_request_error"
        assert named in answer.json()["error"]["message"]
    assert upstream.requests == []
    with gateway.gateway.store.engine.connect() as conn:
        from sqlalchemy import text

        assert conn.execute(text("SELECT count(*) FROM messages")).scalar() == 0


def test_a_message_no_json_body_can_carry_is_a_400_naming_it_and_stores_nothing(
    gateway: RunningGateway, upstream: FakeAnthropicAPI
) -> None:
    """A lone surrogate (JavaScript's ``JSON.stringify`` of a string cut inside an emoji
    writes it as a ``"\\ud83d"`` escape, which ``json.loads`` lets through) is in no body
    the API accepts: UTF-8 cannot encode it. Refused where the gateway parses the new
    messages, on a session's first request and on a stored session's next one, before
    anything is stored or sent."""
    import httpx2
    from sqlalchemy import text

    def post(messages: str) -> httpx2.Response:
        body = f'{{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{messages}]}}'
        headers = {"x-api-key": CLIENT_KEY, "X-Hango-Session": "broken-emoji"}
        return httpx2.post(f"{gateway.url}/v1/messages", content=body, headers=headers)

    def stored() -> int:
        with gateway.gateway.store.engine.connect() as conn:
            return int(conn.execute(text("SELECT count(*) FROM messages")).scalar() or 0)

    broken = '{"role":"user","content":"half an emoji: \\ud83d"}'
    first = '{"role":"user","content":"Start."}'
    for messages, index in ((broken, 0), (first, None), (f"{first},{REPLY},{broken}", 2)):
        before, sent = stored(), len(upstream.requests)
        answer = post(messages)
        if index is None:  # the session's first turn, stored: the next request continues it
            assert answer.status_code == 200, answer.text
            continue
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        assert error["type"] == "invalid_request_error"
        assert error["message"].startswith(f"hango gateway: messages.{index}: cannot be sent")
        assert "surrogates not allowed" in error["message"]
        assert (stored(), len(upstream.requests)) == (before, sent)


REPLY = '{"role":"assistant","content":[{"type":"text","text":"ok"}]}'
