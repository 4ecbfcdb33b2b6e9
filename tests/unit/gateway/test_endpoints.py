"""The gateway's other answers: overflow, count_tokens, health, readiness, other paths."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2

from tests.fakeapi import FakeAnthropicAPI, count_input_tokens
from tests.gateway_support import RunningGateway, running_gateway, tool_output

HEADERS = {"x-api-key": "sk-ant-endpoints", "x-hango-session": "e"}


def long_history(rounds: int, chars: int) -> list[Any]:
    history: list[Any] = [{"role": "user", "content": "begin"}]
    for n in range(rounds):
        call = {"type": "tool_use", "id": f"toolu_{n}", "name": "Bash", "input": {"n": n}}
        history.append({"role": "assistant", "content": [call]})
        result = {
            "type": "tool_result",
            "tool_use_id": f"toolu_{n}",
            "content": tool_output(n, chars),
        }
        history.append({"role": "user", "content": [result]})
    return history


def messages_body(history: list[Any]) -> dict[str, Any]:
    return {"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": history}


def test_prompt_too_long_enters_the_overflow_ladder_before_the_client_sees_it(
    tmp_path: Path,
) -> None:
    # The gateway believes in a large window; upstream's is far smaller.
    with (
        FakeAnthropicAPI(window=5000) as upstream,
        running_gateway(upstream.base_url, tmp_path, max_input_tokens=100_000) as gateway,
    ):
        history = long_history(12, 2000)
        assert count_input_tokens(messages_body(history)) > 5000
        answer = httpx2.post(
            f"{gateway.url}/v1/messages", json=messages_body(history), headers=HEADERS, timeout=30
        )
        assert answer.status_code == 200, answer.text
        sent = upstream.message_requests()
        assert len(sent) >= 2  # refused as too long, then compacted and sent again
        assert count_input_tokens(sent[-1].body) <= 5000


def test_count_tokens_counts_the_request_as_hango_sends_it(tmp_path: Path) -> None:
    with (
        FakeAnthropicAPI(window=6000) as upstream,
        running_gateway(upstream.base_url, tmp_path, max_input_tokens=6000) as gateway,
    ):
        history = long_history(10, 2000)
        body = messages_body(history)
        answer = httpx2.post(f"{gateway.url}/v1/messages", json=body, headers=HEADERS, timeout=30)
        assert answer.status_code == 200, answer.text
        count_body = {"model": body["model"], "messages": history}
        counted = httpx2.post(
            f"{gateway.url}/v1/messages/count_tokens", json=count_body, headers=HEADERS
        )
        assert counted.status_code == 200
        as_sent = upstream.count_requests()[-1].body
        assert counted.json()["input_tokens"] == count_input_tokens(as_sent)
        # The client's own auto-compaction sees the compacted size, not its full history.
        assert counted.json()["input_tokens"] < count_input_tokens(count_body) / 2


def test_count_tokens_before_a_compaction_forwards_the_clients_body(
    gateway: RunningGateway, upstream: FakeAnthropicAPI
) -> None:
    url = f"{gateway.url}/v1/messages/count_tokens"
    for size in (3, 5):  # the second is read after the first's messages
        body = {"model": "claude-sonnet-4-5", "messages": long_history(size, 200)}
        assert httpx2.post(url, json=body, headers=HEADERS).status_code == 200
        assert upstream.count_requests()[-1].body == body
    refused = httpx2.post(url, content=b"{not json", headers=HEADERS)
    assert refused.status_code == 400
    assert refused.json()["error"] == {
        "type": "invalid_request_error",
        "message": "hango gateway: the body is not JSON",
    }
    assert len(upstream.count_requests()) == 2


def test_health_readiness_and_paths_the_gateway_does_not_serve(
    gateway: RunningGateway, upstream: FakeAnthropicAPI
) -> None:
    assert httpx2.get(f"{gateway.url}/healthz").json() == {"status": "ok"}
    assert httpx2.get(f"{gateway.url}/readyz").json() == {"status": "ready"}
    refused = httpx2.get(f"{gateway.url}/admin")
    assert refused.status_code == 404
    assert refused.json()["error"]["message"] == "hango gateway: GET /admin is not served"
    proxied = httpx2.post(f"{gateway.url}/v1/files", json={}, headers=HEADERS)
    assert proxied.status_code == 404  # upstream's own answer, passed through
    assert upstream.requests[-1].path == "/v1/files"
    assert upstream.requests[-1].headers["x-api-key"] == HEADERS["x-api-key"]
