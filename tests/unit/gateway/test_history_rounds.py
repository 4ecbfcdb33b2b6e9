"""The history tool answered inside the gateway, through the real Python SDK.

A scripted upstream (``tests/history_gateway_support.py``) runs Bash rounds until the
session is compacted, then uses the history tool to recover a value only the evicted
messages hold: several internal rounds, parallel calls, one answer mixing a history call
with the client's own Bash call. The client must get valid messages without the tool, its
transcript (and the store's) must never hold it, and the value must come back.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import pytest
from sqlalchemy import text

from hango.core.errors import ToolInputError
from hango.core.messages import Response
from hango.gateway.history_offer import RESULT_MARGIN, fitted, offered_name, offers, room, with_tool
from hango.gateway.history_rounds import EVENT_HISTORY_ROUND, TenantTranscripts
from hango.tools.builtin import ToolOutcome
from hango.tools.history import HistoryScope
from tests.fakeapi import FakeAnthropicAPI, ScriptedError, count_input_tokens, text_reply
from tests.gateway_support import RunningGateway, running_gateway
from tests.history_gateway_support import (
    BASH,
    HISTORY,
    MODEL,
    QUESTION,
    SECRET,
    WINDOW,
    LookupUpstream,
    answer,
    bash_round,
    history_call,
    internal_depth,
    run_until_compacted,
    sender,
)
from tests.otel_support import capture
from tests.sse_check import leaked_blocks, parse_sse, sequence_problems

KEY = "sk-ant-history-rounds"


def stored_blocks(gateway: RunningGateway) -> list[Any]:
    with gateway.gateway.store.engine.connect() as conn:
        rows = conn.execute(text("SELECT content FROM messages")).all()
    blocks: list[Any] = []
    for (content,) in rows:
        value = json.loads(content) if isinstance(content, str) else content
        blocks.extend(value if isinstance(value, list) else [value])
    return blocks


@contextmanager
def through_gateway(
    tmp_path: Path, responder: Any, **options: Any
) -> Iterator[tuple[FakeAnthropicAPI, RunningGateway, anthropic.Anthropic]]:
    """A scripted upstream, a gateway over it at the test window, and an SDK client of it."""
    with (
        FakeAnthropicAPI(window=WINDOW, responder=responder) as upstream,
        running_gateway(upstream.base_url, tmp_path, max_input_tokens=WINDOW, **options) as gateway,
        anthropic.Anthropic(api_key=KEY, base_url=gateway.url, max_retries=0) as client,
    ):
        yield upstream, gateway, client


def session_usage(gateway: RunningGateway) -> tuple[int, int]:
    query = text("SELECT uncached_input_tokens, output_tokens FROM sessions")
    with gateway.gateway.store.engine.connect() as conn:
        ((uncached, output),) = conn.execute(query).all()
    return uncached, output


@pytest.mark.parametrize("streaming", [False, True], ids=["create", "stream"])
def test_the_upstream_recovers_an_evicted_value_and_the_client_never_sees_the_tool(
    tmp_path: Path, streaming: bool
) -> None:
    script = LookupUpstream()
    with through_gateway(tmp_path, script) as (upstream, gateway, client):
        send = sender(client, "lookup", streaming)
        history = run_until_compacted(send, script)
        history.append({"role": "user", "content": QUESTION})
        asked = len(upstream.message_requests())
        lookup = send(history)
        assert [b.type for b in lookup.content] == ["text", "text", "tool_use"]
        assert lookup.content[2].name == "Bash" and lookup.stop_reason == "tool_use"  # type: ignore[union-attr]
        answer(history, lookup)
        final = send(history)
        sent = [r.body for r in upstream.message_requests()]
        usages = list(upstream.usages)
        blocks = stored_blocks(gateway)
        uncached, _ = session_usage(gateway)
    assert final.content[0].text == f"The value was {SECRET}."  # type: ignore[union-attr]
    # Four upstream calls: the question's, two internal rounds (the second answered with
    # the mixed call), and the client's next request.
    assert len(sent) == asked + 4
    first_round, second_round = script.history_requests[:2]
    assert SECRET in json.dumps(first_round["messages"][-1])  # the search found the evicted value
    assert all(count_input_tokens(body) <= WINDOW for body in sent)
    assert sent[asked]["tools"] == [BASH, with_tool({}, HISTORY)["tools"][0]]
    # The client's transcript and the store hold no trace of the tool.
    dumped = json.dumps(history)
    assert HISTORY not in dumped and "toolu_h" not in dumped
    assert not [b for b in blocks if HISTORY in json.dumps(b) or "toolu_h" in json.dumps(b)]
    # The session record counts every upstream call, internal rounds included.
    assert uncached == sum(u["input_tokens"] for u in usages)
    assert second_round["messages"][-2]["content"][0]["name"] == HISTORY


def _stream(gateway: RunningGateway, history: list[Any], session: str) -> bytes:
    body = {"model": MODEL, "max_tokens": 2000, "tools": [BASH], "messages": history}
    headers = {"x-api-key": KEY, "x-hango-session": session, "anthropic-version": "2023-06-01"}
    with httpx2.stream(
        "POST", f"{gateway.url}/v1/messages", json={**body, "stream": True}, headers=headers
    ) as reply:
        return b"".join(reply.iter_raw())


def test_the_spliced_stream_is_a_valid_event_sequence(tmp_path: Path) -> None:
    script = LookupUpstream()
    with through_gateway(tmp_path, script) as (upstream, gateway, client):
        history = run_until_compacted(sender(client, "raw", True), script)
        history.append({"role": "user", "content": QUESTION})
        events = parse_sse(_stream(gateway, history, "raw"))
    assert sequence_problems(events) == []
    assert leaked_blocks(events, (HISTORY,)) == 0
    starts = [d["content_block"] for n, d in events if n == "content_block_start"]
    assert [b["type"] for b in starts] == ["text", "text", "tool_use"]
    delta = next(d for n, d in events if n == "message_delta")
    # Every round's output: the question's call and its two internal rounds.
    assert delta["delta"]["stop_reason"] == "tool_use"
    assert delta["usage"]["output_tokens"] == sum(_outputs(upstream)[-3:])


def _outputs(upstream: FakeAnthropicAPI) -> list[int]:
    """The output tokens of every streamed answer, from its message_delta."""
    found = []
    for stream in upstream.streamed:
        events = parse_sse(b"".join(stream))
        found.append(next(d for n, d in events if n == "message_delta")["usage"]["output_tokens"])
    return found


def test_internal_rounds_stop_at_the_setting_with_the_text_so_far(tmp_path: Path) -> None:
    script = LookupUpstream()
    searches = 0

    def always_search(body: dict[str, Any]) -> dict[str, Any]:
        nonlocal searches
        name = body["tools"][-1]["name"]
        if name != HISTORY:
            return script(body)
        searches += 1
        call = history_call(f"toolu_s{searches}", name, command="search", query="round")
        return {
            "content": [{"type": "text", "text": f"s{searches}"}, call],
            "stop_reason": "tool_use",
        }

    with through_gateway(tmp_path, always_search, gateway_history_rounds=2) as (
        _upstream,
        _gateway,
        client,
    ):
        send = sender(client, "bounded", True)
        history = run_until_compacted(send, script)
        before = searches
        history.append({"role": "user", "content": QUESTION})
        reply = send(history)
    assert searches - before == 3  # the client's call and two internal rounds
    assert [b.text for b in reply.content] == [f"s{n}" for n in range(before + 1, searches + 1)]  # type: ignore[union-attr]
    assert reply.stop_reason == "end_turn"  # nothing for the client to run


def test_a_client_tool_of_the_same_name_wins_and_the_gateways_is_renamed(tmp_path: Path) -> None:
    own = {"name": HISTORY, "description": "the client's own", "input_schema": {"type": "object"}}
    script = LookupUpstream()

    def both(body: dict[str, Any]) -> dict[str, Any]:
        if len(body["tools"]) == 2:  # not compacted yet: the client's tools only
            script.bash += 1
            return bash_round(script.bash)
        name = body["tools"][-1]["name"]
        last = json.dumps(body["messages"][-1])
        if QUESTION in last and internal_depth(body["messages"], name) == 0:
            ours = history_call("toolu_g1", name, command="search", query=SECRET)
            return {"content": [ours], "stop_reason": "tool_use"}
        theirs = history_call("toolu_c1", HISTORY, anything=1)
        return {"content": [{"type": "text", "text": "done"}, theirs], "stop_reason": "tool_use"}

    with through_gateway(tmp_path, both) as (upstream, _gateway, client):
        tools = [BASH, own]

        def with_own_tool(history: list[Any]) -> anthropic.types.Message:
            return client.messages.create(
                model=MODEL, max_tokens=2000, tools=tools, messages=history,  # type: ignore[arg-type]
                extra_headers={"x-hango-session": "named"},
            )  # fmt: skip

        history = run_until_compacted(with_own_tool, script)
        history.append({"role": "user", "content": QUESTION})
        reply = with_own_tool(history)
        sent = [r.body for r in upstream.message_requests()]
    assert offered_name(tools) == "hango_session_history"
    assert (
        sent[-1]["tools"][:2] == tools and sent[-1]["tools"][2]["name"] == "hango_session_history"
    )
    assert [(b.type, getattr(b, "name", None)) for b in reply.content] == [
        ("text", None),
        ("tool_use", HISTORY),  # the client's own tool, passed on
    ]
    assert SECRET in json.dumps(sent[-1]["messages"][-1])  # the gateway's tool was answered


def test_the_tool_reads_only_sessions_served_for_their_tenant(tmp_path: Path) -> None:
    with running_gateway("http://127.0.0.1:9", tmp_path) as gateway:
        source = TenantTranscripts(gateway.gateway.store)
        mine = HistoryScope("gw-one", tenant="tenant-a")
        with source.serving(mine):
            assert source.messages(mine) == []
            for other in (HistoryScope("gw-one", "tenant-b"), HistoryScope("gw-one")):
                with pytest.raises(ToolInputError, match="not this tenant's session"):
                    source.messages(other)
        with pytest.raises(ToolInputError):
            source.messages(mine)  # served no longer


def test_without_a_compaction_the_tool_is_not_offered(
    gateway: RunningGateway, upstream: FakeAnthropicAPI
) -> None:
    upstream.push(text_reply("plain"))
    with anthropic.Anthropic(api_key=KEY, base_url=gateway.url, max_retries=0) as client:
        reply = client.messages.create(
            model=MODEL,
            max_tokens=100,
            tools=[BASH],
            messages=[{"role": "user", "content": "hi"}],  # type: ignore[list-item]
        )
    assert reply.content[0].text == "plain"  # type: ignore[union-attr]
    assert upstream.message_requests()[-1].body["tools"] == [BASH]


def test_results_that_would_overflow_the_window_become_an_error_the_model_can_act_on() -> None:
    round_answer = Response.model_validate(
        {
            "id": "msg_1", "model": MODEL, "content": [], "stop_reason": "tool_use",
            "usage": {"input_tokens": 900, "cache_read_input_tokens": 8000, "output_tokens": 100},
        }
    )  # fmt: skip
    left = room(round_answer, 10_000)
    assert left == 10_000 - 9_000 - RESULT_MARGIN
    small, large = ToolOutcome("x" * 100), ToolOutcome("y" * 2 * left)
    assert fitted([small], left) == [small]
    kept, refused = fitted([small, large], left)
    assert kept == small and refused.is_error and "does not fit" in refused.content
    assert fitted([large], None) == [large]  # no window known: nothing replaced


def test_a_client_that_disconnects_during_an_internal_round_cancels_it(tmp_path: Path) -> None:
    script = LookupUpstream()
    with through_gateway(tmp_path, script) as (upstream, gateway, client):
        history = run_until_compacted(sender(client, "gone", False), script)
        history.append({"role": "user", "content": QUESTION})
        asked = len(upstream.message_requests())
        upstream.event_delay = 0.2  # about 2.4 s per round's stream
        body = {"model": MODEL, "max_tokens": 2000, "tools": [BASH], "messages": history}
        headers = {"x-api-key": KEY, "x-hango-session": "gone"}
        started = time.monotonic()
        with httpx2.stream(
            "POST", f"{gateway.url}/v1/messages", json={**body, "stream": True}, headers=headers
        ) as reply:
            for _ in reply.iter_raw():
                if len(upstream.message_requests()) == asked + 2:
                    break  # the internal round is under way: the client goes
        while upstream.streams_cut == 0 and time.monotonic() - started < 10:
            time.sleep(0.05)
        elapsed = time.monotonic() - started
        statuses = _settled_runs(gateway)
        requests = len(upstream.message_requests())
    assert upstream.streams_cut == 1
    assert elapsed < 4.5  # the internal round was cut, not read to its end
    assert requests == asked + 2  # and no round followed it
    assert statuses[-1] == "failed" and set(statuses[:-1]) == {"completed"}


def _settled_runs(gateway: RunningGateway) -> list[str]:
    """The runs' statuses once none is running (the cancelled turn closes in its thread)."""
    query = text("SELECT status FROM runs ORDER BY id")
    deadline = time.monotonic() + 5
    while True:
        with gateway.gateway.store.engine.connect() as conn:
            statuses = [row[0] for row in conn.execute(query)]
        if "running" not in statuses or time.monotonic() > deadline:
            return statuses
        time.sleep(0.05)


def test_internal_rounds_are_in_telemetry_and_the_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    captured = capture()
    caplog.set_level(logging.INFO, logger="hango.gateway.history_rounds")
    script = LookupUpstream()
    with through_gateway(tmp_path, script, telemetry=captured.telemetry) as (
        _upstream,
        _gateway,
        client,
    ):
        send = sender(client, "observed", True)
        history = run_until_compacted(send, script)
        history.append({"role": "user", "content": QUESTION})
        send(history)
    events = [
        (event.attributes["hango.round"], event.attributes["hango.history.command"])
        for span in captured.spans()
        for event in span.events
        if event.name == EVENT_HISTORY_ROUND
    ]
    # Round 1 answered the search, round 2 the parallel read and search; the call beside
    # the client's Bash call was never answered.
    assert events == [(1, "search"), (2, "read"), (2, "search")]
    lines = [r.getMessage() for r in caplog.records if "internal round" in r.getMessage()]
    assert len(lines) == 3 and all(HISTORY in line for line in lines)
    captured.shutdown()


def test_count_tokens_counts_the_tool_a_compacted_request_carries(tmp_path: Path) -> None:
    script = LookupUpstream()
    with through_gateway(tmp_path, script) as (upstream, _gateway, client):
        send = sender(client, "counted", False)
        history = run_until_compacted(send, script)
        history.append({"role": "user", "content": "and now?"})
        counted = client.messages.count_tokens(
            model=MODEL, tools=[BASH], messages=history,  # type: ignore[list-item]
            extra_headers={"x-hango-session": "counted"},
        )  # fmt: skip
        send(history)
        count_body = upstream.count_requests()[-1].body
        sent_body = upstream.message_requests()[-1].body
    assert count_body["tools"] == sent_body["tools"] == [BASH, with_tool({}, HISTORY)["tools"][0]]
    assert counted.input_tokens == count_input_tokens(count_body)


@pytest.mark.parametrize("streaming", [False, True], ids=["create", "stream"])
def test_an_internal_round_refused_by_upstream_ends_the_answer_in_the_apis_format(
    tmp_path: Path, streaming: bool
) -> None:
    script = LookupUpstream()
    with through_gateway(tmp_path, script) as (upstream, gateway, client):
        history = run_until_compacted(sender(client, "refused", False), script)
        history.append({"role": "user", "content": QUESTION})
        call = history_call("toolu_h1", HISTORY, command="search", query="round")
        upstream.push(
            {"content": [{"type": "text", "text": "Looking."}, call], "stop_reason": "tool_use"},
            ScriptedError(529),
        )
        body = {"model": MODEL, "max_tokens": 2000, "tools": [BASH], "messages": history}
        headers = {"x-api-key": KEY, "x-hango-session": "refused"}
        reply = httpx2.post(
            f"{gateway.url}/v1/messages", json={**body, "stream": streaming}, headers=headers
        )
    if not streaming:  # nothing was sent before: the API's own error, as upstream sent it
        assert reply.status_code == 529
        assert reply.json()["error"]["type"] == "overloaded_error"
        return
    events = parse_sse(reply.content)
    assert reply.status_code == 200 and sequence_problems(events) == []
    assert leaked_blocks(events, (HISTORY,)) == 0
    name, error = events[-1]
    assert name == "error" and "internal round 1" in error["error"]["message"]
    starts = [d["content_block"]["type"] for n, d in events if n == "content_block_start"]
    assert starts == ["text"]


def test_the_tool_is_offered_unless_rounds_are_off_or_the_client_forbids_tool_calls() -> None:
    assert offers(4, {"tools": [BASH]})
    assert offers(1, {"tool_choice": {"type": "auto"}})
    assert not offers(0, {"tools": [BASH]})
    assert not offers(4, {"tool_choice": {"type": "none"}})
