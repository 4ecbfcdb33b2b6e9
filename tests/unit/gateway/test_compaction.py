"""A long tool session through the gateway at a small window: compacted, every request valid."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anthropic
from sqlalchemy import text

from tests.fakeapi import FakeAnthropicAPI, count_input_tokens
from tests.gateway_support import (
    breakpoints,
    running_gateway,
    tool_output,
    tool_round_responder,
    without_markers,
)

WINDOW = 8000
ROUNDS = 20
SYSTEM = [
    {"type": "text", "text": "x-anthropic-billing-header: cc_version=9; cch=0001;"},
    {"type": "text", "text": "You run tools.", "cache_control": {"type": "ephemeral"}},
]
TOOLS = [{"name": "Bash", "description": "run", "input_schema": {"type": "object"}}]


def test_a_long_tool_session_is_compacted_and_every_request_fits(tmp_path: Path) -> None:
    with (
        FakeAnthropicAPI(window=WINDOW, responder=tool_round_responder(ROUNDS)) as upstream,
        running_gateway(upstream.base_url, tmp_path, max_input_tokens=WINDOW) as gateway,
        anthropic.Anthropic(api_key="sk-ant-long", base_url=gateway.url, max_retries=0) as client,
    ):
        history: list[Any] = [{"role": "user", "content": "run every step"}]
        for n in range(1, ROUNDS + 2):
            reply = client.messages.create(
                model="claude-sonnet-4-5",
                max_tokens=2000,
                system=SYSTEM,  # type: ignore[arg-type]
                tools=TOOLS,  # type: ignore[arg-type]
                messages=history,
                extra_headers={"x-hango-session": "long-1"},
                extra_body={"metadata": {"user_id": "u1"}},
            )
            if reply.stop_reason != "tool_use":
                break
            history.append(
                {
                    "role": "assistant",
                    "content": [b.model_dump(exclude_none=True) for b in reply.content],
                }
            )
            result = {
                "type": "tool_result",
                "tool_use_id": f"toolu_{n:03d}",
                "content": tool_output(n, 3600),
            }
            # The client marks its newest message, as Claude Code does.
            history.append(
                {"role": "user", "content": [{**result, "cache_control": {"type": "ephemeral"}}]}
            )
        assert reply.content[0].text == "all rounds done"  # type: ignore[union-attr]
        sent = upstream.message_requests()
        assert len(sent) == ROUNDS + 1
        for request in sent:
            body = request.body
            assert count_input_tokens(body) <= WINDOW
            assert body["system"] == SYSTEM and body["tools"] == TOOLS
            assert body["metadata"] == {"user_id": "u1"}
            assert breakpoints(body) <= 4
        last = sent[-1].body["messages"][-1]
        assert without_markers(last) == without_markers(history[-1])  # the newest result whole
        full = count_input_tokens({"system": SYSTEM, "tools": TOOLS, "messages": history})
        assert full > 2 * WINDOW  # the client's own history would never have fit
        with gateway.gateway.store.engine.connect() as conn:
            ((compactions, stored),) = conn.execute(
                text("SELECT compactions, (SELECT count(*) FROM messages) FROM sessions")
            )
        assert compactions >= 2
        assert stored == len(history)  # the whole history, each message once


def test_summaries_are_paid_with_the_operators_key_never_the_clients(tmp_path: Path) -> None:
    operator, customer = "sk-ant-operator-0042", "sk-ant-customer-0099"
    with (
        FakeAnthropicAPI(window=WINDOW, responder=tool_round_responder(12)) as upstream,
        running_gateway(
            upstream.base_url, tmp_path, max_input_tokens=WINDOW, operator_key=operator
        ) as gateway,
        anthropic.Anthropic(api_key=customer, base_url=gateway.url, max_retries=0) as client,
    ):
        history: list[Any] = [{"role": "user", "content": "run every step"}]
        for n in range(1, 13):
            reply = client.messages.create(
                model="claude-sonnet-4-5", max_tokens=2000, tools=TOOLS,  # type: ignore[arg-type]
                messages=history, extra_headers={"x-hango-session": "paid"},
            )  # fmt: skip
            history.append(
                {
                    "role": "assistant",
                    "content": [b.model_dump(exclude_none=True) for b in reply.content],
                }
            )
            result = {
                "type": "tool_result",
                "tool_use_id": f"toolu_{n:03d}",
                "content": tool_output(n, 3600),
            }
            history.append({"role": "user", "content": [result]})
        calls = upstream.message_requests()

    def credential(r: Any) -> str:
        return str(r.headers.get("x-api-key") or r.headers.get("authorization"))

    paid_by_client = [r for r in calls if customer in credential(r)]
    paid_by_operator = [r for r in calls if operator in credential(r)]
    assert len(paid_by_client) == 12  # exactly the client's own calls
    assert paid_by_operator  # the summaries
    assert all(r.body.get("tools") is None for r in paid_by_operator)
    assert len(paid_by_client) + len(paid_by_operator) == len(calls)
