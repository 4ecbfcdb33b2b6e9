"""What a client may send through the gateway survives parsing and dumping unchanged.

The blocks and fields below are those the Messages API documents and real clients send
(Claude Code's mid-conversation ``system`` messages, signed thinking, server tools,
documents, tool references inside tool results, fields this version does not model).
Parsing then dumping must give back the same JSON, key for key and in the same order, and
the compaction core must carry the blocks it does not understand as they are.
"""

from __future__ import annotations

import json
from typing import Any

from hango.compaction.tool_args import truncate_tool_args
from hango.compaction.validate import validate_messages
from hango.core.messages import Message, OtherBlock, Request, ToolDefinition
from hango.tokens import make_estimator
from tests.outgoing_reference import sendable

TRANSCRIPT: list[dict[str, Any]] = [
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "read the spec", "cache_control": {"type": "ephemeral"}},
            {
                "type": "document",
                "source": {"type": "text", "media_type": "text/plain", "data": "SPEC"},
                "title": "spec",
            },
            {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/png", "data": "iV"},
            },
        ],
    },
    {"role": "system", "content": [{"type": "text", "text": "# Environment\ncwd: /tmp"}]},
    {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "plan", "signature": "EqQBCkYIBxgCKkDs"},
            {"type": "redacted_thinking", "data": "EmwKAhgBEgy3"},
            {
                "type": "server_tool_use",
                "id": "srvtoolu_1",
                "name": "web_search",
                "input": {"query": "spec"},
            },
            {
                "type": "web_search_tool_result",
                "tool_use_id": "srvtoolu_1",
                "content": [{"type": "web_search_result", "url": "https://x", "title": "x"}],
            },
            {"type": "text", "text": "found", "citations": [{"type": "char_location"}]},
            {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "ToolSearch",
                "input": {"q": "Read " * 2000},
            },
        ],
        "future_field": {"kept": True},
    },
    {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_1",
                "content": [
                    {"type": "tool_reference", "tool_name": "Read"},
                    {"type": "text", "text": "loaded " * 2000},
                ],
            }
        ],
    },
    {"role": "system", "content": "mid-conversation note"},
]


def test_every_message_dumps_back_byte_for_byte() -> None:
    for raw in TRANSCRIPT:
        message = Message.model_validate(raw)
        assert json.dumps(message.to_api()) == json.dumps(raw)


def test_unknown_blocks_are_kept_as_other_blocks() -> None:
    assistant = Message.model_validate(TRANSCRIPT[2])
    kinds = [type(b).__name__ for b in assistant.blocks()]
    assert kinds == [
        "ThinkingBlock",
        "RedactedThinkingBlock",
        "OtherBlock",
        "OtherBlock",
        "TextBlock",
        "ToolUseBlock",
    ]
    result = next(Message.model_validate(TRANSCRIPT[3]).tool_results())
    assert isinstance(result.content, tuple)
    assert isinstance(result.content[0], OtherBlock)
    assert result.text() == "loaded " * 2000


def test_server_tool_definitions_get_no_schema_and_client_tools_keep_theirs() -> None:
    server = {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}
    custom = {"name": "Read", "description": "read", "input_schema": {"type": "object"}}
    assert ToolDefinition.model_validate(server).to_api() == server
    assert json.dumps(ToolDefinition.model_validate(custom).to_api()) == json.dumps(custom)


def test_a_request_with_unmanaged_fields_dumps_them_unchanged() -> None:
    body = {
        "model": "claude-opus-5-5",
        "max_tokens": 128000,
        "messages": TRANSCRIPT,
        "system": [{"type": "text", "text": "x-anthropic-billing-header: cch=1;"}],
        "metadata": {"user_id": '{"session_id":"abc"}'},
        "thinking": {"type": "adaptive", "display": "omitted"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "output_config": {"effort": "medium"},
        "stream": True,
    }
    request = Request.model_validate(body)
    assert request.to_api() == body
    assert json.loads(request.api_bytes()) == body


def test_the_compaction_core_carries_what_it_does_not_model() -> None:
    messages = tuple(Message.model_validate(raw) for raw in TRANSCRIPT)
    assert validate_messages(messages) == []
    repaired = sendable(messages)
    # Only the client's own message breakpoint is removed (breakpoints are hango's to place).
    assert repaired[1:] == messages[1:]
    assert all(a is b for a, b in zip(repaired[1:], messages[1:], strict=True))
    first = repaired[0].to_api()["content"]
    assert "cache_control" not in first[0]
    assert first[1:] == TRANSCRIPT[0]["content"][1:]
    truncated = truncate_tool_args(
        messages, protect_from=len(messages), max_tokens=1, estimator=make_estimator("heuristic")
    )
    assert truncated.truncated > 0  # the tool call and its result were cut
    kept = [b for m in truncated.messages for b in m.blocks() if isinstance(b, OtherBlock)]
    assert [b.to_api() for b in kept] == [
        b.to_api() for m in messages for b in m.blocks() if isinstance(b, OtherBlock)
    ]
