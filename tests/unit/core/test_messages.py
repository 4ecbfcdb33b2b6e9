"""Wire round trips of hango.core.messages: parse the API's JSON, dump it, get the same JSON.

The fixtures are hand-written in the API's shape and cover what real agent sessions
carry: parallel tool batches, tool results with block content and ``is_error``, images,
thinking and redacted thinking, cache breakpoints on system and tools, usage with cache
fields, ``citations: null`` and block types this version does not model.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from hango.core.messages import (
    CacheControl,
    ImageBlock,
    Message,
    OtherBlock,
    RedactedThinkingBlock,
    Request,
    Response,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    message_json,
)

PNG = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgoAAAANSUhEUgAAAAE="}

TOOLS: list[dict[str, Any]] = [
    {
        "name": "read_file",
        "description": "Read a file from the workspace.",
        "input_schema": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "offset": {"type": "integer"}},
            "required": ["path"],
        },
    },
    {
        "name": "ls",
        "description": "List a directory.",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
        "cache_control": {"type": "ephemeral", "ttl": "1h"},
    },
]

PARALLEL_CALLS: dict[str, Any] = {
    "role": "assistant",
    "content": [
        {"type": "thinking", "thinking": "Two reads and a listing.", "signature": "EqQBCkYIAx"},
        {"type": "text", "text": "Let me look around.", "citations": None},
        {"type": "tool_use", "id": "toolu_01A", "name": "read_file", "input": {"path": "a.py"}},
        {
            "type": "tool_use",
            "id": "toolu_01B",
            "name": "read_file",
            "input": {"path": "b.py", "offset": 120},
        },
        {"type": "tool_use", "id": "toolu_01C", "name": "ls", "input": {"path": "src/"}},
    ],
}

RESULTS: dict[str, Any] = {
    "role": "user",
    "content": [
        {"type": "tool_result", "tool_use_id": "toolu_01A", "content": "print('a')\n"},
        {
            "type": "tool_result",
            "tool_use_id": "toolu_01B",
            "content": [
                {"type": "text", "text": "b.py: no such file"},
                {"type": "image", "source": PNG},
            ],
            "is_error": True,
        },
        {
            "type": "tool_result",
            "tool_use_id": "toolu_01C",
            "is_error": False,
            "cache_control": {"type": "ephemeral"},
        },
        {"type": "text", "text": "Also check the README."},
    ],
}

REQUEST: dict[str, Any] = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 8192,
    "system": [
        {"type": "text", "text": "You are a coding agent."},
        {"type": "text", "text": "Project rules...", "cache_control": {"type": "ephemeral"}},
    ],
    "tools": TOOLS,
    "messages": [
        {"role": "user", "content": "Why does the build fail?"},
        PARALLEL_CALLS,
        RESULTS,
        {
            "role": "assistant",
            "content": [
                {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"},
                {
                    "type": "server_tool_use",
                    "id": "srvtoolu_01",
                    "name": "web_search",
                    "input": {"query": "ponyc build error"},
                },
                {
                    "type": "web_search_tool_result",
                    "tool_use_id": "srvtoolu_01",
                    "content": [{"type": "web_search_result", "url": "https://x", "title": "t"}],
                },
                {"type": "text", "text": "Found it."},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "image", "source": PNG, "cache_control": {"type": "ephemeral"}},
                {"type": "document", "source": {"type": "text", "data": "log"}, "title": "ci"},
            ],
        },
    ],
    "temperature": 0.2,
    "tool_choice": {"type": "auto"},
    "thinking": {"type": "enabled", "budget_tokens": 2048},
    "metadata": {"user_id": "u-1"},
}

RESPONSE: dict[str, Any] = {
    "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5-20250929",
    "content": [
        {"type": "text", "text": "Reading both.", "citations": None},
        {"type": "tool_use", "id": "toolu_02A", "name": "read_file", "input": {"path": "x"}},
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 12,
        "cache_creation_input_tokens": 310,
        "cache_read_input_tokens": 48211,
        "cache_creation": {"ephemeral_5m_input_tokens": 310, "ephemeral_1h_input_tokens": 0},
        "output_tokens": 95,
        "service_tier": "standard",
    },
    "container": None,
}


def wire(value: Request | Response | Message) -> Any:
    """What actually goes over the wire: the dump, through a JSON encoder and back."""
    return json.loads(json.dumps(value.to_api()))


@pytest.mark.parametrize(
    ("model", "data"),
    [
        (Request, REQUEST),
        (Response, RESPONSE),
        (Message, PARALLEL_CALLS),
        (Message, RESULTS),
        (Message, {"role": "user", "content": "plain string content"}),
        (Request, {"model": "m", "max_tokens": 1, "messages": [], "system": "one string"}),
    ],
    ids=["request", "response", "parallel-calls", "tool-results", "string", "minimal"],
)
def test_parse_then_dump_gives_back_the_same_json(model: Any, data: dict[str, Any]) -> None:
    assert wire(model.model_validate(data)) == data


def test_blocks_are_parsed_into_their_types() -> None:
    request = Request.model_validate(REQUEST)
    kinds = [type(b) for m in request.messages for b in m.blocks()]
    assert kinds == [
        TextBlock,
        ThinkingBlock,
        TextBlock,
        ToolUseBlock,
        ToolUseBlock,
        ToolUseBlock,
        ToolResultBlock,
        ToolResultBlock,
        ToolResultBlock,
        TextBlock,
        RedactedThinkingBlock,
        OtherBlock,
        OtherBlock,
        TextBlock,
        ImageBlock,
        OtherBlock,
    ]
    results = list(request.messages[2].tool_results())
    assert [r.is_error for r in results] == [None, True, False]
    assert results[1].text() == "b.py: no such file"
    assert results[2].cache_control == CacheControl()
    assert request.tool_definitions()[1].cache_control == CacheControl(ttl="1h")
    assert request.system_blocks()[1].cache_control == CacheControl()


def test_response_usage_keeps_cache_fields_and_totals_all_input() -> None:
    response = Response.model_validate(RESPONSE)
    assert response.usage.cache_read_input_tokens == 48211
    assert response.usage.total_input_tokens() == 12 + 310 + 48211
    assert [u.id for u in response.tool_uses()] == ["toolu_02A"]
    assert wire(response.as_message()) == {"role": "assistant", "content": RESPONSE["content"]}


def test_blocks_built_in_code_dump_their_type() -> None:
    built = Message(
        role="assistant",
        content=(
            TextBlock(text="hi"),
            ToolUseBlock(id="toolu_1", name="ls", input={}),
        ),
    )
    assert wire(built) == {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "hi"},
            {"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {}},
        ],
    }


def test_editing_a_dump_does_not_change_the_model() -> None:
    request = Request.model_validate(copy.deepcopy(REQUEST))
    dumped = request.to_api()
    dumped["messages"][1]["content"][2]["input"]["path"] = "evil.py"
    dumped["system"][0]["text"] = "changed"
    assert request.to_api() == REQUEST


@pytest.mark.parametrize(
    ("target", "attribute", "value"),
    [
        (lambda r: r, "model", "other"),
        (lambda r: r, "messages", ()),
        (lambda r: r.messages[0], "content", "rewritten"),
        (lambda r: r.messages[1].content[2], "input", {}),
        (lambda r: r.messages[2].content[1], "is_error", False),
        (lambda r: r.system[1].cache_control, "ttl", "1h"),
        (lambda r: r.tools[0], "name", "write_file"),
    ],
    ids=["request", "messages", "message", "tool-use", "tool-result", "cache", "tool"],
)
def test_wire_objects_are_frozen(target: Any, attribute: str, value: Any) -> None:
    request = Request.model_validate(REQUEST)
    with pytest.raises(ValidationError, match="frozen"):
        setattr(target(request), attribute, value)
    assert request.to_api() == REQUEST


def test_message_sequences_are_tuples() -> None:
    request = Request.model_validate(REQUEST)
    assert isinstance(request.messages, tuple)
    assert isinstance(request.messages[1].content, tuple)
    assert isinstance(request.tools, tuple)


def test_a_request_takes_its_messages_from_any_iterable_as_a_tuple() -> None:
    said = [Message(role="user", content="a"), Message(role="assistant", content="b")]
    marked = Message(role="user", content="A")
    plain = Request(model="m", max_tokens=1, messages=said)
    sent = Request(model="m", max_tokens=1, messages=plain.with_marks({0: marked}).sent_messages())
    assert sent.messages == (marked, said[1]) and type(sent.messages) is tuple
    assert type(plain.messages) is tuple
    generated = Request(model="m", max_tokens=1, messages=(m for m in said))
    assert generated.messages == tuple(said)
    assert Request(model="m", max_tokens=1, messages={1: said[0]}.values()).messages == (said[0],)


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(
    text=st.text(min_size=1),
    tool_input=st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=4),
    result=st.text(),
    extra=JSON_VALUES,
)
def test_serializing_a_parsed_message_json_gives_back_the_same_bytes(
    text: str, tool_input: dict[str, Any], result: str, extra: Any
) -> None:
    # The store keeps a message's compact JSON and a restarted session sends it as it is:
    # it must be what serializing the message it parses into gives, byte for byte.
    for message in (
        Message(
            role="assistant",
            content=(TextBlock(text=text), ToolUseBlock(id="toolu_1", name="t", input=tool_input)),
            note=extra,
        ),
        Message.model_validate(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": result}],
                "kept": extra,
            }
        ),
    ):
        part = message_json(message)
        assert message_json(Message.model_validate_json(part[1:])) == part
