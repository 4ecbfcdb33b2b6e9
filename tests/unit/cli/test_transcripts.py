"""Loading Messages API JSON and Claude Code JSONL transcripts (all input written here)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hango.cli.transcripts import (
    load_transcript,
    parse_claude_code_jsonl,
    parse_messages_json,
    split_turns,
)
from hango.core.errors import TranscriptError
from hango.core.messages import TextBlock, ToolResultBlock, ToolUseBlock


def _use(tool_id: str, name: str = "Read", **arguments: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": name, "input": arguments}


def _result(tool_id: str, text: str = "ok") -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_id, "content": text}


def _json_transcript(messages: list[Any], **extra: Any) -> str:
    return json.dumps({"system": "You are careful.", "tools": [], "messages": messages, **extra})


def _entry(kind: str, content: Any, **extra: Any) -> str:
    return json.dumps({"type": kind, "message": {"role": kind, "content": content}, **extra})


GOOD_MESSAGES: list[Any] = [
    {"role": "user", "content": "Read the config"},
    {
        "role": "assistant",
        "content": [{"type": "text", "text": "Reading."}, _use("t1", file_path="a.py")],
    },
    {"role": "user", "content": [_result("t1", "x = 1")]},
    {"role": "assistant", "content": "It sets x."},
]


def test_json_transcript_keeps_system_tools_and_messages_as_recorded() -> None:
    tools = [{"name": "Read", "input_schema": {"type": "object", "properties": {}}}]
    text = _json_transcript(GOOD_MESSAGES, tools=tools, source="somewhere")

    transcript = parse_messages_json(text, "t.json")

    assert transcript.system == (TextBlock(text="You are careful."),)
    assert [tool.name for tool in transcript.tools] == ["Read"]
    assert [m.to_api() for m in transcript.messages] == GOOD_MESSAGES
    assert transcript.assistant_messages == 2
    assert transcript.locations == ("messages[0]", "messages[1]", "messages[2]", "messages[3]")


def test_json_transcript_merges_consecutive_messages_of_one_role() -> None:
    messages = [*GOOD_MESSAGES[:3], {"role": "user", "content": "and also"}, GOOD_MESSAGES[3]]

    transcript = parse_messages_json(_json_transcript(messages), "t.json")

    merged = transcript.messages[2]
    assert [type(b) for b in merged.blocks()] == [ToolResultBlock, TextBlock]
    assert len(transcript.messages) == 4


def test_json_transcript_drops_keys_the_api_would_reject() -> None:
    messages = [
        {"role": "user", "content": "hi", "id": "m1"},
        {"role": "assistant", "content": "yo"},
    ]

    transcript = parse_messages_json(_json_transcript(messages), "t.json")

    assert transcript.messages[0].to_api() == {"role": "user", "content": "hi"}


@pytest.mark.parametrize(
    ("messages", "location", "words"),
    [
        ([{"role": "user"}, {"role": "assistant", "content": "x"}], "messages[0]", "role"),
        (
            [{"role": "user", "content": "hi"}, {"role": "robot", "content": "x"}],
            "messages[1]",
            "role",
        ),
        ([{"role": "assistant", "content": "hi"}], "messages[0]", "start with a user"),
        (
            [GOOD_MESSAGES[0], GOOD_MESSAGES[1], {"role": "user", "content": "no result"}],
            "messages[1]",
            "tool_use t1 has no tool_result",
        ),
        (
            [
                GOOD_MESSAGES[0],
                {"role": "assistant", "content": "x"},
                {"role": "user", "content": [_result("t9")]},
            ],
            "messages[2]",
            "tool_result for t9",
        ),
        ([{"role": "user", "content": "only me"}], "file", "no assistant message"),
        (
            [
                GOOD_MESSAGES[0],
                {"role": "assistant", "content": [_use("t1"), _use("t1")]},
                {"role": "user", "content": [_result("t1")]},
            ],
            "messages[1]",
            "duplicate tool_use id t1",
        ),
    ],
)
def test_malformed_json_transcript_names_the_message(
    messages: list[Any], location: str, words: str
) -> None:
    with pytest.raises(TranscriptError) as caught:
        parse_messages_json(_json_transcript(messages), "bad.json")

    assert caught.value.location == location
    assert words in str(caught.value)
    assert str(caught.value).startswith(f"bad.json: {location}: ")


def test_invalid_json_names_line_and_column() -> None:
    with pytest.raises(TranscriptError) as caught:
        parse_messages_json('{"messages": [\n  {"role": "user",, }]}', "bad.json")

    assert caught.value.location.startswith("line 2, column")


def test_json_without_messages_list_is_refused() -> None:
    with pytest.raises(TranscriptError, match='"messages" list'):
        parse_messages_json('{"system": "x"}', "bad.json")


def test_bad_tool_definition_names_its_index() -> None:
    text = _json_transcript(GOOD_MESSAGES, tools=[{"name": "A"}, {"description": "nameless"}])

    with pytest.raises(TranscriptError) as caught:
        parse_messages_json(text, "bad.json")

    assert caught.value.location == "tools[1]"


CLAUDE_CODE_LINES = [
    json.dumps({"type": "summary", "summary": "Earlier work", "leafUuid": "u0"}),
    _entry("user", "Fix the failing test in tests/test_app.py"),
    json.dumps({"type": "file-history-snapshot", "snapshot": {}}),
    # one streamed reply over three entries, with thinking and two parallel tool calls
    _entry(
        "assistant", [{"type": "thinking", "thinking": "hmm", "signature": "s"}], **{"uuid": "a1"}
    ),
    _entry("assistant", [{"type": "text", "text": "Looking."}]),
    _entry("assistant", [_use("t1", file_path="tests/test_app.py")]),
    _entry("assistant", [_use("t2", name="Bash", command="pytest -x")]),
    _entry("user", [_result("t1", "def test_app(): ...")]),
    _entry("user", [_result("t2", "1 failed")]),
    json.dumps({"type": "system", "content": "hook ran"}),
    _entry("assistant", "Found it.", isSidechain=True),
    _entry("assistant", [{"type": "text", "text": "The assertion is wrong; fixed."}]),
    _entry("user", "thanks"),
    _entry("assistant", [{"type": "text", "text": "You're welcome."}]),
]


def test_claude_code_jsonl_merges_entries_and_skips_non_messages() -> None:
    transcript = parse_claude_code_jsonl("\n".join(CLAUDE_CODE_LINES) + "\n", "s.jsonl")

    roles = [m.role for m in transcript.messages]
    assert roles == ["user", "assistant", "user", "assistant", "user", "assistant"]
    reply = transcript.messages[1]
    assert [type(b) for b in reply.blocks()] == [TextBlock, ToolUseBlock, ToolUseBlock]
    assert [r.tool_use_id for r in transcript.messages[2].tool_results()] == ["t1", "t2"]
    assert transcript.messages[3].text() == "The assertion is wrong; fixed."
    assert transcript.format == "claude-code-jsonl"
    assert transcript.system == () and transcript.tools == ()
    assert transcript.locations[1] == "line 5"


def test_claude_code_reply_split_around_its_tool_results_is_rejoined() -> None:
    lines = [
        _entry("user", "go"),
        json.dumps(
            {
                "type": "assistant",
                "message": {"id": "msg_1", "role": "assistant", "content": [_use("t1")]},
            }
        ),
        _entry("user", [_result("t1")]),
        json.dumps(
            {
                "type": "assistant",
                "message": {"id": "msg_1", "role": "assistant", "content": [_use("t2")]},
            }
        ),
        _entry("user", [_result("t2")]),
        json.dumps(
            {
                "type": "assistant",
                "message": {"id": "msg_2", "role": "assistant", "content": "done"},
            }
        ),
    ]

    transcript = parse_claude_code_jsonl("\n".join(lines), "s.jsonl")

    assert [m.role for m in transcript.messages] == ["user", "assistant", "user", "assistant"]
    assert [u.id for u in transcript.messages[1].tool_uses()] == ["t1", "t2"]
    assert [r.tool_use_id for r in transcript.messages[2].tool_results()] == ["t1", "t2"]
    assert "id" not in transcript.messages[1].to_api()


@pytest.mark.parametrize(
    ("bad_line", "words"),
    [
        ("{not json", "not valid JSON"),
        ('["a list"]', "expected a JSON object"),
        (json.dumps({"type": "user", "text": "no message"}), '"message"'),
        (_entry("user", [_result("t404")]), "tool_result for t404"),
        (_entry("user", [{"type": "tool_result"}]), "tool_use_id"),
    ],
)
@pytest.mark.parametrize("keep", [True, False])
def test_malformed_claude_code_line_is_named(bad_line: str, words: str, keep: bool) -> None:
    lines = [*CLAUDE_CODE_LINES[:9], bad_line, *CLAUDE_CODE_LINES[9:]]

    with pytest.raises(TranscriptError) as caught:
        parse_claude_code_jsonl("\n".join(lines), "s.jsonl", keep=keep)

    assert caught.value.location == "line 10"
    assert words in str(caught.value)


def test_split_turns_starts_a_turn_at_each_user_message_without_results() -> None:
    transcript = parse_claude_code_jsonl("\n".join(CLAUDE_CODE_LINES), "s.jsonl")

    turns = split_turns(transcript.messages)

    assert [len(turn) for turn in turns] == [4, 2]
    assert turns[1][0].text() == "thanks"


def test_load_transcript_detects_the_format(tmp_path: Path) -> None:
    as_json = tmp_path / "a.json"
    as_json.write_text(_json_transcript(GOOD_MESSAGES))
    as_log = tmp_path / "session.log"
    as_log.write_text("\n".join(CLAUDE_CODE_LINES))

    assert load_transcript(as_json, max_bytes=1 << 20).format == "messages-json"
    assert load_transcript(as_log, max_bytes=1 << 20).format == "claude-code-jsonl"


def test_missing_file_is_a_transcript_error(tmp_path: Path) -> None:
    with pytest.raises(TranscriptError, match="no such file"):
        load_transcript(tmp_path / "absent.json", max_bytes=1 << 20)


# --- recorded usage and timestamps (Claude Code JSONL) -------------------------------------


def _reply(content: Any, reply_id: str, at: str, **usage: int) -> str:
    message = {"role": "assistant", "content": content, "id": reply_id, "usage": usage}
    return json.dumps({"type": "assistant", "message": message, "timestamp": at})


def _said(content: Any, at: str) -> str:
    return json.dumps({"type": "user", "message": {"role": "user", "content": content},
                       "timestamp": at})  # fmt: skip


def test_claude_code_usage_is_kept_once_per_reply_and_the_last_entry_wins() -> None:
    lines = [
        _said("Read a.py", "2025-06-01T12:00:00.000Z"),
        _reply([{"type": "text", "text": "Reading."}], "m1", "2025-06-01T12:00:03.500Z",
               input_tokens=3, cache_read_input_tokens=100, output_tokens=1),
        _reply([_use("t1")], "m1", "2025-06-01T12:00:04Z",
               input_tokens=3, cache_read_input_tokens=100, output_tokens=25),
        _said([_result("t1")], "2025-06-01T12:00:05+00:00"),
        _reply([{"type": "text", "text": "Done."}], "m2", "2025-06-01T12:06:05Z",
               input_tokens=2, cache_creation_input_tokens=40, output_tokens=5),
        _said("still there?", "2025-06-01T12:07:00Z"),
        _reply([{"type": "text", "text": "API Error"}], "e1", "2025-06-01T12:07:01Z",
               input_tokens=0, output_tokens=0),
    ]  # fmt: skip

    transcript = parse_claude_code_jsonl("\n".join(lines), "cc.jsonl")

    assert [(u.input_tokens, u.cache_read_input_tokens, u.output_tokens)
            for u in transcript.recorded_usage] == [(3, 100, 25), (2, None, 5)]  # fmt: skip
    assert transcript.recorded_usage[1].cache_creation_input_tokens == 40
    start = 1_748_779_200.0  # 2025-06-01T12:00:00Z
    assert transcript.times == (start, start + 3.5, start + 5, start + 365, start + 420,
                                start + 421)  # fmt: skip
    assert transcript.time_of(99) is None


@pytest.mark.parametrize(
    ("usage", "at", "words"),
    [
        ('"usage": {"input_tokens": "many"}', "2025-06-01T12:00:00Z", "usage: input_tokens"),
        ('"usage": {"input_tokens": -3}', "2025-06-01T12:00:00Z", "cannot be negative"),
        ('"usage": {"input_tokens": 3}', "yesterday", "timestamp 'yesterday'"),
        ('"usage": {"input_tokens": 3}', "2025-06-01T12:00:00", "with a zone"),
    ],
)
def test_bad_recorded_usage_or_timestamp_names_the_line(usage: str, at: str, words: str) -> None:
    reply = (
        '{"type": "assistant", "timestamp": "' + at + '", "message": {"role": "assistant", '
        '"id": "m1", "content": [{"type": "text", "text": "ok"}], ' + usage + "}}"
    )
    text = _entry("user", "hi") + "\n" + reply + "\n"

    with pytest.raises(TranscriptError, match="line 2") as caught:
        parse_claude_code_jsonl(text, "cc.jsonl")
    assert words in str(caught.value)


def test_json_transcripts_carry_no_recorded_usage_or_times() -> None:
    transcript = parse_messages_json(_json_transcript(GOOD_MESSAGES), "t.json")

    assert transcript.recorded_usage == ()
    assert transcript.times == (None,) * len(GOOD_MESSAGES)
    assert transcript.time_of(0) is None


BLANK = {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": " "}]}
ASKS_T1 = [_entry("user", "go"), _entry("assistant", [_use("t1")])]


@pytest.mark.parametrize(
    ("lines", "location", "words"),
    [
        ([_entry("assistant", "hi"), _entry("user", [_result("t9")])], "line 1", "start with"),
        # The pairing problem comes first, though the blank result is found before it.
        (
            [
                *ASKS_T1,
                _entry("user", [BLANK]),
                _entry("assistant", [_use("t2")]),
                _entry("user", "no result"),
            ],
            "line 4",
            "tool_use t2 has no tool_result",
        ),
        (
            [*ASKS_T1, _entry("user", [BLANK]), _entry("assistant", "done")],
            "line 3",
            "non-whitespace text",
        ),
        ([_entry("user", "only me")], "file", "no assistant message"),
        (
            [
                *ASKS_T1,
                _entry("user", [_result("t1")]),
                _entry("assistant", [_use("t1")]),
                _entry("user", [_result("t1")]),
            ],
            "line 4",
            "duplicate tool_use id t1",
        ),
    ],
)
@pytest.mark.parametrize("keep", [True, False])
def test_a_transcript_read_as_a_stream_refuses_what_a_whole_one_did(
    lines: list[str], location: str, words: str, keep: bool
) -> None:
    """Checked a message at a time beside its neighbours, the first problem is the one
    the check over the whole list raised: by kind first (role, pairing, replies, rules)."""
    with pytest.raises(TranscriptError) as caught:
        parse_claude_code_jsonl("\n".join(lines), "s.jsonl", keep=keep)
    assert caught.value.location == location
    assert words in str(caught.value)


def test_a_transcript_not_kept_reads_the_same_messages_again_as_they_are_asked_for() -> None:
    """``hango replay`` keeps the file's text, not every message parsed (a million short
    lines held ~1 GB parsed): the messages are parsed again, a few at a time."""
    text = "\n".join(CLAUDE_CODE_LINES)
    kept = parse_claude_code_jsonl(text, "s.jsonl")
    streamed = parse_claude_code_jsonl(text, "s.jsonl", keep=False)
    assert streamed.messages == () and streamed.count == kept.count == 6
    assert list(streamed.each_message()) == list(kept.messages) == list(kept.each_message())
    assert list(streamed.each_message()) == list(kept.messages)  # again, from the start
    assert streamed.times == kept.times and streamed.recorded_usage == kept.recorded_usage
    assert split_turns(streamed.each_message()) == split_turns(kept.messages)
