"""Sessions behind the gateway: identity, append-only branches, tenants, no key kept."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import httpx2
import pytest
from sqlalchemy import inspect, text

from hango.core.messages import Message
from hango.gateway.identity import client_session
from hango.gateway.sessions import Branches, common_prefix
from tests.fakeapi import FakeAnthropicAPI, text_reply
from tests.gateway_support import RunningGateway, running_gateway, tool_output
from tests.otel_support import capture

KEY_A = "sk-ant-tenant-a-5f1e2d"
KEY_B = "sk-ant-tenant-b-77c0aa"


def post(
    gateway: RunningGateway, key: str, messages: list[Any], session: str = "s", **body: Any
) -> httpx2.Response:
    return httpx2.post(
        f"{gateway.url}/v1/messages",
        json={"model": "claude-sonnet-4-5", "max_tokens": 50, "messages": messages, **body},
        headers={"x-api-key": key, "x-hango-session": session},
        timeout=30,
    )


def stored(gateway: RunningGateway) -> dict[str, list[Any]]:
    store = gateway.gateway.store
    with store.engine.connect() as conn:
        ids = [row[0] for row in conn.execute(text("SELECT id FROM sessions ORDER BY id"))]
    return {i: [m.message.to_api() for m in store.messages(i)] for i in ids}


def conversation(*texts: str) -> list[Any]:
    roles = ("user", "assistant")
    return [{"role": roles[i % 2], "content": t} for i, t in enumerate(texts)]


def test_session_identity_order() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    meta = {**body, "metadata": {"user_id": '{"device_id":"d","session_id":"from-meta"}'}}
    assert client_session({"x-claude-code-session-id": "cc"}, meta) == "x-claude-code-session-id:cc"
    assert client_session({"x-hango-session": "h"}, meta) == "x-hango-session:h"
    assert client_session({}, meta) == "metadata:from-meta"
    start = client_session({}, body)
    assert start.startswith("start:")
    marked = {"model": "m", "messages": [{"role": "user", "content": "hi", "cache_control": {}}]}
    assert client_session({}, marked) == start  # a moved marker is the same conversation
    assert client_session({}, {**body, "model": "other"}) != start


def test_a_rewound_history_continues_as_a_new_branch_and_nothing_is_rewritten(
    gateway: RunningGateway, upstream: FakeAnthropicAPI
) -> None:
    first = conversation("plan the work", "ok", "do step 1")
    assert post(gateway, KEY_A, first).status_code == 200
    assert post(gateway, KEY_A, first).status_code == 200  # a retry: nothing new to append
    # The client rewinds: it edits its last message.
    edited = conversation("plan the work", "ok", "do step 1 differently")
    assert post(gateway, KEY_A, edited).status_code == 200
    sessions = stored(gateway)
    assert len(sessions) == 2
    original, branch = sorted(sessions, key=len)
    assert sessions[original] == first  # untouched
    assert sessions[branch] == edited
    assert branch == f"{original}-b2"
    # The branch says where it comes from: the session and the first message that differs.
    assert gateway.gateway.store.branch_of(branch) == (original, 2)
    assert gateway.gateway.store.branch_of(original) is None
    # Going on from the original history continues the original branch.
    longer = [*first, *conversation("x", "answer", "step 2")[1:]]
    assert post(gateway, KEY_A, longer).status_code == 200
    assert stored(gateway)[original] == longer
    assert upstream.message_requests()[-1].body["messages"] == longer


def test_a_second_tenant_cannot_read_or_continue_the_first_tenants_session(
    gateway: RunningGateway, upstream: FakeAnthropicAPI
) -> None:
    secret_history = conversation("the launch code is 0000", "noted", "remember it")
    assert post(gateway, KEY_A, secret_history, session="shared-name").status_code == 200
    # Tenant B names the same session and asks; nothing of A's reaches its request.
    question = conversation("what is the launch code?")
    assert post(gateway, KEY_B, question, session="shared-name").status_code == 200
    assert upstream.message_requests()[-1].body["messages"] == question
    # B re-sends A's history as its own: it lands in B's session, A's stays as it was.
    assert post(gateway, KEY_B, [*secret_history, *conversation("x", "more")[1:]],
                session="shared-name").status_code == 200  # fmt: skip
    sessions = stored(gateway)
    a_sessions = [s for s, messages in sessions.items() if messages == secret_history]
    assert len(a_sessions) == 1
    assert len(sessions) == 3  # A's, B's first, B's branch with the re-sent history


def test_no_api_key_in_any_log_line_span_or_stored_row(
    upstream: FakeAnthropicAPI, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    captured = capture()
    caplog.set_level(logging.DEBUG)
    with running_gateway(
        upstream.base_url, tmp_path, max_input_tokens=4000, telemetry=captured.telemetry
    ) as gateway:
        upstream.window = 4000
        history: list[Any] = [{"role": "user", "content": "start"}]
        for n in range(8):  # long enough to compact: summary, offload, history file
            upstream.push(text_reply(f"reply {n}"))
            assert post(gateway, KEY_A, history, stream=n % 2 == 0).status_code == 200
            history += conversation("x", f"reply {n}", tool_output(n, 2000))[1:]
        upstream.echo_credentials_next(1, 401)  # upstream quotes the key in its error
        assert post(gateway, KEY_A, history).status_code == 401
        rows = _every_row(gateway)
        with gateway.gateway.store.engine.connect() as conn:
            compactions = conn.execute(text("SELECT sum(compactions) FROM sessions")).scalar()
    files = "".join(p.read_text() for p in tmp_path.rglob("*") if p.is_file() and p.suffix != ".db")
    spans = [str(span.to_json()) for span in captured.spans()]
    logs = [record.getMessage() for record in caplog.records]
    assert compactions >= 1 and rows and spans and files
    for secret in (KEY_A, KEY_A[-10:]):
        assert not [r for r in rows if secret in r]
        assert not [s for s in spans if secret in s]
        assert not [line for line in logs if secret in line]
        assert secret not in files


def _every_row(gateway: RunningGateway) -> list[str]:
    engine = gateway.gateway.store.engine
    rows = []
    with engine.connect() as conn:
        for table in inspect(engine).get_table_names():
            for row in conn.execute(text(f'SELECT * FROM "{table}"')):
                rows.append("|".join([table, *map(str, row)]))
    return rows


def test_the_common_prefix_sets_moved_markers_aside_and_stops_at_the_first_difference() -> None:
    known = conversation(*(f"m{i}" for i in range(8)))
    known[-1] = {**known[-1], "content": [{"type": "text", "text": "m7", "cache_control": {}}]}
    resent = [*known[:-1], {"role": "assistant", "content": "m7"}, {"role": "user", "content": "n"}]
    assert common_prefix(known, resent) == 8  # the last one's marker moved: the same message
    assert common_prefix(known, known[:5]) == 5
    edited = [*known[:2], {"role": "user", "content": "other"}, *known[3:]]
    assert common_prefix(known, edited) == 2
    assert common_prefix(known, [dict(m) for m in edited]) == 2  # equal copies, not the objects
    assert common_prefix([], resent) == 0


class _StoredBranch:
    """A store holding one branch of ``messages`` (all ``Branches`` asks of it)."""

    def __init__(self, messages: list[Any]) -> None:
        self._messages = messages

    def session(self, session_id: str) -> object | None:
        return object() if session_id == "gw-base" else None

    def messages(self, session_id: str, from_seq: int | None = None) -> list[Any]:
        start = (from_seq or 1) - 1
        return [_Row(m) for m in self._messages[start:]] if session_id == "gw-base" else []


class _Row:
    def __init__(self, message: Any) -> None:
        self.message = Message.model_validate(message)


def test_a_branch_read_from_the_store_is_compared_by_identity_after_its_first_request() -> None:
    stored_messages = conversation(*(f"m{i}" for i in range(6)))
    stored_messages[-1] = {
        "role": "assistant",
        "content": [{"type": "text", "text": "m5", "cache_control": {"type": "ephemeral"}}],
    }
    branches = Branches(_StoredBranch(stored_messages))  # type: ignore[arg-type]
    sent = [dict(m) for m in stored_messages[:-1]]  # equal copies, as a fresh parse gives
    sent += [{"role": "assistant", "content": "m5"}, {"role": "user", "content": "new"}]
    placement = branches.place("gw-base", sent)
    assert (placement.session_id, placement.new, placement.held) == ("gw-base", sent[6:], 6)
    known = branches.known("gw-base")
    # The equal ones are now the request's own objects; the one whose marker moved keeps
    # its stored form (it goes upstream as stored).
    assert all(k is s for k, s in zip(known[:5], sent[:5], strict=True))
    assert known[5] is not sent[5] and known[5]["content"][0]["cache_control"]
    later = {"role": "assistant", "content": "x"}
    again = branches.place("gw-base", [*sent, later])
    assert (again.held, again.new) == (6, [sent[6], later])
