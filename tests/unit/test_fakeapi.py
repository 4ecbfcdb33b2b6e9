"""The loopback fake itself: token rules, cache simulation, the API's 400 texts, scripting.

Other tests trust this fake to refuse what the real API refuses, so its refusals are
pinned here over plain HTTP (no SDK in between).
"""

from __future__ import annotations

import http.client
import json
import math
import threading
import time
from typing import Any

import pytest

from tests.fakeapi import (
    COUNT_TOKENS_PATH,
    MESSAGES_PATH,
    FakeAnthropicAPI,
    ScriptedError,
    count_input_tokens,
    fake_api,
    pairing_error,
    text_reply,
    tokens_of,
)

__all__ = ["fake_api"]  # the fixture, imported so pytest finds it here

EPHEMERAL = {"type": "ephemeral"}


def post(api: FakeAnthropicAPI, path: str, body: Any) -> tuple[int, dict[str, Any], str]:
    """Status, JSON body and request-id header of one POST to the fake."""
    host, port = api.base_url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=5)
    try:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        connection.request("POST", path, raw, {"content-type": "application/json"})
        answer = connection.getresponse()
        return answer.status, json.loads(answer.read()), answer.getheader("request-id") or ""
    finally:
        connection.close()


def body(*messages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 10, "messages": list(messages), **extra}


def user(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content}


def assistant(content: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": content}


def use(tool_id: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": "ls", "input": {}}


def result(tool_id: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_id, "content": "ok"}


# -- token rules ---------------------------------------------------------------------------


def test_token_count_is_the_documented_formula() -> None:
    tool = {"name": "ls", "input_schema": {"type": "object"}}
    request = body(user("hello there"), system="be brief", tools=[tool])
    units = [
        tool,
        {"type": "text", "text": "be brief"},
        {"role": "user", "block": {"type": "text", "text": "hello there"}},
    ]
    expected = sum(
        math.ceil(len(json.dumps(u, sort_keys=True, separators=(",", ":"))) / 4) for u in units
    )
    assert count_input_tokens(request) == expected


def test_cache_control_and_max_tokens_cost_nothing() -> None:
    plain = body(user([{"type": "text", "text": "x" * 40}]))
    marked = body(user([{"type": "text", "text": "x" * 40, "cache_control": EPHEMERAL}]))
    assert count_input_tokens(plain) == count_input_tokens(marked)
    assert count_input_tokens({**plain, "max_tokens": 99999}) == count_input_tokens(plain)
    assert tokens_of("abcd") == 2  # '"abcd"' is 6 characters


def test_count_endpoint_answers_the_same_figure(fake_api: FakeAnthropicAPI) -> None:
    request = body(user("count me"))
    del request["max_tokens"]
    status, answer, _ = post(fake_api, COUNT_TOKENS_PATH, request)
    assert (status, answer) == (200, {"input_tokens": count_input_tokens(request)})


def test_count_endpoint_refuses_max_tokens(fake_api: FakeAnthropicAPI) -> None:
    status, answer, _ = post(fake_api, COUNT_TOKENS_PATH, body(user("x")))
    assert status == 400
    assert answer["error"]["message"] == "max_tokens: Extra inputs are not permitted"


# -- prompt caching ------------------------------------------------------------------------


def test_cache_creates_then_reads_the_marked_prefix(fake_api: FakeAnthropicAPI) -> None:
    system = [{"type": "text", "text": "rules " * 50, "cache_control": EPHEMERAL}]
    first = body(user("one"), system=system)
    second = body(user("two, longer"), system=system)
    marked = tokens_of(system[0])
    _, one, _ = post(fake_api, MESSAGES_PATH, first)
    _, two, _ = post(fake_api, MESSAGES_PATH, second)
    assert one["usage"]["cache_creation_input_tokens"] == marked
    assert one["usage"]["cache_read_input_tokens"] == 0
    assert two["usage"]["cache_read_input_tokens"] == marked
    assert two["usage"]["cache_creation_input_tokens"] == 0
    assert two["usage"]["input_tokens"] == count_input_tokens(second) - marked


def test_cache_reads_an_earlier_breakpoint_and_creates_up_to_the_new_one(
    fake_api: FakeAnthropicAPI,
) -> None:
    system = [{"type": "text", "text": "s" * 80, "cache_control": EPHEMERAL}]
    post(fake_api, MESSAGES_PATH, body(user("q"), system=system))
    tail = user([{"type": "text", "text": "t" * 80, "cache_control": EPHEMERAL}])
    request = body(tail, system=system)
    _, answer, _ = post(fake_api, MESSAGES_PATH, request)
    usage = answer["usage"]
    assert usage["cache_read_input_tokens"] == tokens_of(system[0])
    assert usage["cache_creation_input_tokens"] == count_input_tokens(request) - tokens_of(
        system[0]
    )
    assert usage["input_tokens"] == 0


def test_cache_misses_on_changed_prefix_or_model(fake_api: FakeAnthropicAPI) -> None:
    system = [{"type": "text", "text": "s" * 80, "cache_control": EPHEMERAL}]
    post(fake_api, MESSAGES_PATH, body(user("q"), system=system))
    changed = [{"type": "text", "text": "S" * 80, "cache_control": EPHEMERAL}]
    _, other_prefix, _ = post(fake_api, MESSAGES_PATH, body(user("q"), system=changed))
    _, other_model, _ = post(
        fake_api, MESSAGES_PATH, {**body(user("q"), system=system), "model": "n"}
    )
    assert other_prefix["usage"]["cache_read_input_tokens"] == 0
    assert other_model["usage"]["cache_read_input_tokens"] == 0


def test_no_breakpoint_means_no_cache_traffic(fake_api: FakeAnthropicAPI) -> None:
    request = body(user("plain"))
    post(fake_api, MESSAGES_PATH, request)
    _, answer, _ = post(fake_api, MESSAGES_PATH, request)
    assert answer["usage"]["input_tokens"] == count_input_tokens(request)
    assert answer["usage"]["cache_read_input_tokens"] == 0
    assert answer["usage"]["cache_creation_input_tokens"] == 0


# -- the API's refusals --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("messages", "text"),
    [
        (
            [user("go"), assistant([use("toolu_A"), use("toolu_B")]), user([result("toolu_A")])],
            "messages.1: `tool_use` ids were found without `tool_result` blocks immediately "
            "after: toolu_B. Each `tool_use` block must have a corresponding `tool_result` "
            "block in the next message.",
        ),
        (
            [user("go"), assistant([use("toolu_A")])],
            "messages.1: `tool_use` ids were found without `tool_result` blocks immediately "
            "after: toolu_A. Each `tool_use` block must have a corresponding `tool_result` "
            "block in the next message.",
        ),
        (
            [user("go"), assistant("text only"), user([result("toolu_Z")])],
            "messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks: "
            "toolu_Z. Each `tool_result` block must have a corresponding `tool_use` block in "
            "the previous message.",
        ),
        (
            [
                user("go"),
                assistant([use("toolu_A")]),
                user([result("toolu_A")]),
                assistant([{"type": "text", "text": "again"}, use("toolu_A")]),
                user([result("toolu_A")]),
            ],
            "messages.3.content.1: `tool_use` ids must be unique",
        ),
        ([assistant("hi")], 'messages: first message must use the "user" role'),
        (
            [user("a"), user("b")],
            'messages: roles must alternate between "user" and "assistant", but found '
            'multiple "user" roles in a row',
        ),
        (
            [user(""), assistant("x")],
            "messages.0: all messages must have non-empty content except for the optional "
            "final assistant message",
        ),
    ],
    ids=["unanswered", "trailing-use", "orphan-result", "duplicate", "first", "alternate", "empty"],
)
def test_invalid_requests_get_the_api_text(
    fake_api: FakeAnthropicAPI, messages: list[dict[str, Any]], text: str
) -> None:
    status, answer, request_id = post(fake_api, MESSAGES_PATH, body(*messages))
    assert status == 400
    assert answer == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": text},
        "request_id": request_id,
    }
    assert request_id.startswith("req_")
    assert pairing_error(messages) == text


def test_valid_parallel_batch_is_accepted(fake_api: FakeAnthropicAPI) -> None:
    messages = [
        user("go"),
        assistant([{"type": "text", "text": "two"}, use("toolu_A"), use("toolu_B")]),
        user([result("toolu_B"), result("toolu_A"), {"type": "text", "text": "and?"}]),
    ]
    assert pairing_error(messages) is None
    status, answer, _ = post(fake_api, MESSAGES_PATH, body(*messages))
    assert status == 200
    assert answer["content"] == [{"type": "text", "text": "ok"}]


def test_over_the_window_is_prompt_too_long() -> None:
    request = body(user("y" * 400))
    with FakeAnthropicAPI(window=50) as api:
        status, answer, _ = post(api, MESSAGES_PATH, request)
    assert status == 400
    assert answer["error"]["message"] == (
        f"prompt is too long: {count_input_tokens(request)} tokens > 50 maximum"
    )


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        (b"{not json", "There was an issue with your request JSON"),
        ({"model": "m", "messages": []}, "max_tokens: Field required"),
        ({"max_tokens": 1, "messages": []}, "model: Field required"),
    ],
)
def test_malformed_bodies(fake_api: FakeAnthropicAPI, raw: Any, text: str) -> None:
    status, answer, _ = post(fake_api, MESSAGES_PATH, raw)
    assert (status, answer["error"]["message"]) == (400, text)


def test_unknown_path_is_404(fake_api: FakeAnthropicAPI) -> None:
    status, answer, _ = post(fake_api, "/v1/complete", {})
    assert (status, answer["error"]["type"]) == (404, "not_found_error")


# -- scripting and recording ---------------------------------------------------------------


def test_scripted_replies_in_order_then_the_responder(fake_api: FakeAnthropicAPI) -> None:
    fake_api.push(
        text_reply("first", stop_reason="max_tokens"),
        lambda request: text_reply(f"saw {len(request['messages'])} message(s)"),
        ScriptedError(529),
    )
    fake_api.responder = lambda request: text_reply("fallback")
    answers = [post(fake_api, MESSAGES_PATH, body(user("q"))) for _ in range(4)]
    assert answers[0][1]["stop_reason"] == "max_tokens"
    assert answers[0][1]["content"][0]["text"] == "first"
    assert answers[1][1]["content"][0]["text"] == "saw 1 message(s)"
    assert (answers[2][0], answers[2][1]["error"]["type"]) == (529, "overloaded_error")
    assert answers[3][1]["content"][0]["text"] == "fallback"
    assert answers[0][1]["model"] == "m"
    assert answers[0][1]["id"] != answers[3][1]["id"]


def test_fail_next_counts_down_and_can_target_one_endpoint(fake_api: FakeAnthropicAPI) -> None:
    fake_api.fail_next(1, 500, endpoint=COUNT_TOKENS_PATH)
    fake_api.fail_next(2, 429)
    count_body = {"model": "m", "messages": [user("q")]}
    assert post(fake_api, COUNT_TOKENS_PATH, count_body)[0] == 500
    statuses = [post(fake_api, MESSAGES_PATH, body(user("q")))[0] for _ in range(3)]
    assert statuses == [429, 429, 200]


def test_every_request_is_recorded_with_headers(fake_api: FakeAnthropicAPI) -> None:
    fake_api.fail_next(1, 529)
    post(fake_api, MESSAGES_PATH, body(user("a")))
    post(fake_api, MESSAGES_PATH, body(user("b")))
    assert [r.body["messages"][0]["content"] for r in fake_api.message_requests()] == ["a", "b"]
    assert fake_api.requests[0].headers["content-type"] == "application/json"


def test_stop_cuts_a_delayed_answer_short() -> None:
    api = FakeAnthropicAPI(message_delay=30.0).start()
    outcome: list[BaseException | tuple[int, dict[str, Any], str]] = []

    def call() -> None:
        try:
            outcome.append(post(api, MESSAGES_PATH, body(user("slow"))))
        except OSError as error:
            outcome.append(error)

    caller = threading.Thread(target=call)
    caller.start()
    time.sleep(0.2)
    started = time.monotonic()
    api.stop()
    caller.join(timeout=5)
    assert not caller.is_alive()
    assert time.monotonic() - started < 3
    assert outcome
