"""The turn's store work beside the rest: the branch's lease tried while the body arrives,
the new messages stored beside the upstream call (the answer waits for them)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx2
import pytest
from sqlalchemy import text

from tests.fakeapi import FakeAnthropicAPI
from tests.gateway_support import RunningGateway, running_gateway

KEY = "sk-ant-beside-3c9a"
HEADERS = {"x-api-key": KEY, "x-hango-session": "beside"}


def body(messages: list[Any], stream: bool) -> dict[str, Any]:
    return {"model": "claude-sonnet-4-5", "max_tokens": 50, "messages": messages, "stream": stream}


def history(rounds: int) -> list[Any]:
    messages: list[Any] = [{"role": "user", "content": "start"}]
    for n in range(rounds):
        messages += [
            {"role": "assistant", "content": f"answer {n}"},
            {"role": "user", "content": f"go on {n}"},
        ]
    return messages


def stored(gateway: RunningGateway) -> list[Any]:
    store = gateway.gateway.store
    (session_id,) = [s.id for s in store.sessions()]
    return [item.message.to_api() for item in store.messages(session_id)]


def send(gateway: RunningGateway, messages: list[Any], stream: bool) -> httpx2.Response:
    return httpx2.post(
        f"{gateway.url}/v1/messages", json=body(messages, stream), headers=HEADERS, timeout=30
    )


@pytest.mark.parametrize(
    ("stream", "failing"),
    [(True, "append_messages"), (False, "append_messages"), (True, "start_run")],
)
def test_store_work_that_fails_beside_the_call_withholds_the_answer_and_loses_nothing(
    gateway: RunningGateway,
    upstream: FakeAnthropicAPI,
    monkeypatch: pytest.MonkeyPatch,
    stream: bool,
    failing: str,
) -> None:
    assert send(gateway, history(1), stream).status_code == 200
    store = gateway.gateway.store
    real = getattr(store, failing)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("disk I/O error (scripted)")

    monkeypatch.setattr(store, failing, broken)
    answer = send(gateway, history(2), stream)
    # The upstream call went out beside the append; its answer did not reach the client.
    assert len(upstream.requests) == 2
    assert answer.status_code == 500
    error = answer.json()
    assert error["type"] == "error"
    assert error["error"]["type"] == "api_error"
    assert "disk I/O error (scripted)" in error["error"]["message"]
    assert "event:" not in answer.text
    assert stored(gateway) == history(1)  # nothing half-stored
    (session,) = store.sessions()
    run = store.latest_run(session.id)
    # The turn is recorded failed (a run that could not start records nothing).
    assert run is not None and run.status == (
        "failed" if failing == "append_messages" else "completed"
    )
    # The client sends its request again: the turn is stored whole, once.
    monkeypatch.setattr(store, failing, real)
    assert send(gateway, history(2), stream).status_code == 200
    assert stored(gateway) == history(2)
    assert send(gateway, history(3), stream).status_code == 200
    assert stored(gateway) == history(3)
    run = store.latest_run(session.id)
    assert run is not None and run.status == "completed"


def test_the_first_byte_waits_for_the_append(
    gateway: RunningGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert send(gateway, history(1), True).status_code == 200
    store = gateway.gateway.store
    real_append = store.append_messages
    appending = threading.Event()

    def slow(*args: Any, **kwargs: Any) -> Any:
        appending.set()
        time.sleep(0.3)  # longer than the loopback upstream takes to answer
        return real_append(*args, **kwargs)

    monkeypatch.setattr(store, "append_messages", slow)
    request = body(history(2), True)
    with httpx2.stream(
        "POST", f"{gateway.url}/v1/messages", json=request, headers=HEADERS, timeout=30
    ) as answer:
        assert answer.status_code == 200
        # The status line is the answer's first byte: by then the turn's messages are stored.
        assert appending.is_set()
        assert stored(gateway) == history(2)
        events = [line for line in answer.iter_lines() if line.startswith("data:")]
    assert json.loads(events[-1][5:])["type"] == "message_stop"


def fences(gateway: RunningGateway) -> list[tuple[int, float]]:
    with gateway.gateway.store.engine.connect() as conn:
        query = text("SELECT fence, expires_at FROM session_leases")
        return [(row.fence, row.expires_at) for row in conn.execute(query)]


def test_the_lease_taken_while_the_body_arrives_is_the_turns_and_never_left_behind(
    upstream: FakeAnthropicAPI, tmp_path: Path
) -> None:
    # A lease left held would make the next request wait this long, then refuse it.
    with running_gateway(upstream.base_url, tmp_path, session_busy_timeout=0.5) as gateway:
        for rounds in (1, 2, 3):
            assert send(gateway, history(rounds), True).status_code == 200
        # One holding per turn: the early one was the turn's, not taken a second time.
        ((fence, expires),) = fences(gateway)
        assert (fence, expires) == (3, 0.0)
        refused = httpx2.post(
            f"{gateway.url}/v1/messages", content=b"{not json", headers=HEADERS, timeout=30
        )
        assert refused.status_code == 400
        assert fences(gateway)[0][1] == 0.0  # taken early for a request that never ran: freed
        # A request that continues another branch (a rewind) frees the early one too.
        rewound = [{"role": "user", "content": "start over"}]
        assert send(gateway, rewound, True).status_code == 200
        assert send(gateway, history(4), True).status_code == 200
        assert all(expires == 0.0 for _, expires in fences(gateway))
