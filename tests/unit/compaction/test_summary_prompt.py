"""The summarizer's request, the artifact index and the summary message."""

from __future__ import annotations

import json
from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from hango.compaction.jobs import SummaryJob
from hango.compaction.summary_prompt import (
    _PAYLOAD_CAPS,
    MAX_LISTED_ARTIFACTS,
    SUMMARY_SECTIONS,
    SUMMARY_SYSTEM_PROMPT,
    _pieces,
    _render,
    _sizes,
    artifact_index,
    build_summary_message,
    build_summary_request,
    render_transcript,
)
from hango.compaction.validate import validate_request
from hango.core.messages import Message, StoredMessage, TextBlock, ToolUseBlock
from tests.histories import HistoryBuilder, call, calls, histories, payload, result, results, user


def stored(messages: Sequence[Message], first_seq: int = 1) -> tuple[StoredMessage, ...]:
    return tuple(
        StoredMessage(seq=first_seq + n, turn=1 + n // 4, message=m) for n, m in enumerate(messages)
    )


def job(evicted: Sequence[StoredMessage], previous: str | None = None) -> SummaryJob:
    return SummaryJob(
        session_id="sess-1",
        turn=7,
        from_seq=evicted[0].seq,
        to_seq=evicted[-1].seq,
        previous_summary=previous,
        evicted=tuple(evicted),
        model="claude-haiku-test",
    )


def sample() -> tuple[StoredMessage, ...]:
    return stored(
        [
            user("Fix the parser bug in src/parser.py; keep the public API."),
            calls(
                call("toolu_a1", "read_file", path="/src/parser.py"),
                call("toolu_a2", "bash", command="pytest -x tests/test_parser.py"),
                text="Reading the parser and running its tests.",
            ),
            results(
                result("toolu_a1", "def parse(text):\n    return tokens"),
                result("toolu_a2", "FAILED tests/test_parser.py::test_empty", is_error=True),
            ),
            Message(role="assistant", content=(TextBlock(text="The empty input crashes."),)),
        ]
    )


def request_text(evicted: Sequence[StoredMessage], previous: str | None = None) -> str:
    request = build_summary_request(job(evicted, previous), model="m", max_tokens=100)
    return request.messages[0].text()


# --- the prompt -------------------------------------------------------------------------


def test_system_prompt_has_the_preservation_clause_sections_and_no_tools_rule() -> None:
    for phrase in ("IDENTIFIER PRESERVATION", "verbatim", "file paths", "URLs", "hashes",
                   "commands", "tool-call results", "open questions", "current plan",
                   "fresh agent", "Do not call any tools"):  # fmt: skip
        assert phrase in SUMMARY_SYSTEM_PROMPT, phrase
    positions = [SUMMARY_SYSTEM_PROMPT.index(f"## {title}") for title in SUMMARY_SECTIONS]
    assert positions == sorted(positions)


def test_summary_request_is_valid_text_only_and_carries_every_detail() -> None:
    evicted = sample()
    request = build_summary_request(job(evicted), model="claude-haiku-test", max_tokens=321)
    assert validate_request(request) == []
    assert request.model == "claude-haiku-test" and request.max_tokens == 321
    assert request.tools is None
    assert [m.role for m in request.messages] == ["user"]
    assert all(isinstance(b, TextBlock) for b in request.messages[0].blocks())
    assert request.system_blocks()[0].text == SUMMARY_SYSTEM_PROMPT
    text = request.messages[0].text()
    assert "Do not call any tools" in text
    for needle in (
        "Fix the parser bug in src/parser.py; keep the public API.",
        "[tool call read_file id=toolu_a1] " + json.dumps({"path": "/src/parser.py"}),
        json.dumps({"command": "pytest -x tests/test_parser.py"}),
        "def parse(text):\n    return tokens",
        "[tool result for toolu_a2 (bash) ERROR]",
        "FAILED tests/test_parser.py::test_empty",
        "The empty input crashes.",
        "[seq 1] USER:",
        "[seq 4] ASSISTANT:",
    ):
        assert needle in text, needle
    assert "<previous_summary>" not in text


def test_previous_summary_is_folded_in_with_the_update_instruction() -> None:
    text = request_text(sample(), previous="## Goal and user requests\nShip v2 of /api/users.")
    assert "Update the previous summary with the newly evicted messages" in text
    assert "<previous_summary>\n## Goal and user requests\nShip v2 of /api/users.\n" in text
    assert text.index("<previous_summary>") < text.index("<transcript>")


def test_request_is_deterministic() -> None:
    first = build_summary_request(job(sample(), "prev"), model="m", max_tokens=10)
    again = build_summary_request(job(sample(), "prev"), model="m", max_tokens=10)
    assert first.to_api() == again.to_api()


# --- the bound --------------------------------------------------------------------------


def test_large_tool_results_keep_head_and_tail_when_over_the_bound() -> None:
    big = "HEAD-MARK\n" + payload(300_000, "mid") + "\nTAIL-MARK"
    evicted = stored(
        [
            user("go"),
            calls(call("toolu_b1", "bash", command="make")),
            results(result("toolu_b1", big)),
        ]
    )
    transcript = render_transcript(evicted, max_chars=50_000)
    assert len(transcript) <= 50_000
    assert "HEAD-MARK" in transcript and "TAIL-MARK" in transcript
    assert "characters omitted here" in transcript
    assert big not in transcript
    # Under the bound nothing is cut.
    assert big in render_transcript(evicted, max_chars=1_000_000)


def test_transcript_too_long_even_with_small_payloads_drops_its_middle() -> None:
    builder = HistoryBuilder().user("FIRST REQUEST")
    for n in range(200):
        builder.say(f"note {n} " + payload(400, str(n))).user(f"more {n}")
    builder.user("LAST REQUEST")
    transcript = render_transcript(stored(builder.build()), max_chars=20_000)
    assert len(transcript) <= 20_000
    assert "FIRST REQUEST" in transcript and "LAST REQUEST" in transcript
    assert "of the transcript omitted here" in transcript


@settings(max_examples=40, deadline=None)
@given(history=histories(min_steps=1, max_steps=8), bound=st.integers(2_000, 60_000))
def test_any_history_gives_a_valid_bounded_summary_request(
    history: tuple[Message, ...], bound: int
) -> None:
    evicted = stored(history)
    request = build_summary_request(job(evicted), model="m", max_tokens=100)
    assert validate_request(request) == []
    assert not any(isinstance(b, ToolUseBlock) for m in request.messages for b in m.blocks())
    assert len(render_transcript(evicted, max_chars=bound)) <= bound


@settings(max_examples=40, deadline=None)
@given(history=histories(min_steps=1, max_steps=8), bound=st.integers(500, 60_000))
def test_the_cap_chosen_from_lengths_is_the_first_whose_rendering_fits(
    history: tuple[Message, ...], bound: int
) -> None:
    """The plain search: render at every cap in turn until one fits, else cut the middle."""
    evicted = stored(history)
    names = {use.id: use.name for s in evicted for use in s.message.tool_uses()}
    pieces = [_pieces(s, names) for s in evicted]
    rendered = ""
    for cap in _PAYLOAD_CAPS:
        rendered = _render(pieces, cap)
        assert _sizes(pieces).at(cap) == len(rendered)
        if len(rendered) <= bound:
            break
    else:
        rendered = _plain_drop_middle(rendered, bound)
    assert render_transcript(evicted, max_chars=bound) == rendered


def test_a_cut_transcript_is_the_whole_rendering_cut_in_its_middle() -> None:
    """Only the ends are rendered; what they make is the plain cut of the whole rendering."""
    history: list[Message] = [user("FIRST REQUEST")]
    for n in range(150):
        use = call(f"toolu_{n}", "bash", command=f"{n} " + payload(700, str(n)))
        history += [calls(use), results(result(f"toolu_{n}", payload(900, f"r{n}")))]
    evicted = stored([*history, user("LAST REQUEST")])
    names = {use.id: use.name for s in evicted for use in s.message.tool_uses()}
    whole = _render([_pieces(s, names) for s in evicted], _PAYLOAD_CAPS[-1])
    for bound in (0, 90, 101, 1_000, 20_000, len(whole) - 1):
        assert render_transcript(evicted, max_chars=bound) == _plain_drop_middle(whole, bound)


def _plain_drop_middle(text: str, max_chars: int) -> str:
    """The whole rendering cut in its middle: a quarter of the room from the start, the
    rest from the end (what render_transcript makes from only the ends it renders)."""
    note = "\n\n[... {} characters of the transcript omitted here to fit the bound ...]\n\n"
    room = max(0, max_chars - len(note.format(len(text))))
    head = room // 4
    tail = room - head
    omitted = len(text) - head - tail
    return text[:head] + note.format(omitted) + (text[-tail:] if tail else "")


# --- the artifact index -----------------------------------------------------------------


def test_artifact_index_collects_paths_and_urls_in_order_without_duplicates() -> None:
    evicted = stored(
        [
            user("start"),
            calls(
                call("toolu_c1", "read_file", path="/src/app.py"),
                call("toolu_c2", "Edit", file_path="/src/db.py", old_string="a b", new_string="x"),
                call(
                    "toolu_c3",
                    "bash",
                    command="cat /etc/app.conf | grep -n port src/cfg.yaml 2>/dev/null",
                ),
                call("toolu_c4", "fetch", url="https://example.com/docs?page=2", prompt="read it"),
                call("toolu_c5", "write_file", path="/src/app.py", content="/not/a/path inside"),
                call("toolu_c6", "str_replace_editor", command="view", path="/repo/README.md"),
                call("toolu_c7", "bash", command="curl -s https://api.example.com/v1/items."),
            ),
            results(
                result(
                    "toolu_c1", "[too large: saved at /large_tool_results/s-1/toolu_c1; read it]"
                ),
                *(result(f"toolu_c{n}") for n in range(2, 8)),
            ),
        ]
    )
    assert artifact_index(evicted) == [
        "/src/app.py",
        "/src/db.py",
        "/etc/app.conf",
        "src/cfg.yaml",
        "https://example.com/docs?page=2",
        "/repo/README.md",
        "https://api.example.com/v1/items",
        "/large_tool_results/s-1/toolu_c1",
    ]
    assert artifact_index(evicted) == artifact_index(evicted)


def test_artifact_index_of_a_text_only_range_is_empty() -> None:
    assert (
        artifact_index(stored([user("hello /tmp/x"), Message(role="assistant", content="hi")]))
        == []
    )


# --- the summary message ----------------------------------------------------------------


def test_summary_message_points_at_the_offload_and_lists_artifacts() -> None:
    message = build_summary_message(
        "## Goal and user requests\nFix the parser.",
        offload_path="/conversation_history/sess-1.md",
        artifacts=["/src/parser.py", "https://example.com"],
        saved_to=42,
    )
    assert message.role == "user"
    text = message.text()
    assert text.startswith("This session is being continued from an earlier conversation")
    assert "The full transcript of the 42 earlier messages" in text
    assert (
        "saved at /conversation_history/sess-1.md; use session_history (search, read) or read_file"
        in text
    )
    assert "<summary>\n## Goal and user requests\nFix the parser.\n</summary>" in text
    assert "- /src/parser.py\n- https://example.com" in text
    assert isinstance(message.blocks()[-1], TextBlock)


def test_summary_message_is_deterministic_and_bounds_the_artifact_list() -> None:
    artifacts = [f"/f/{n}.py" for n in range(MAX_LISTED_ARTIFACTS + 7)]

    def build() -> Message:
        return build_summary_message(
            "s" * 50,
            offload_path="/p.md",
            artifacts=artifacts,
            saved_to=3,
        )

    assert build().to_api() == build().to_api()
    text = build().text()
    assert f"- /f/{MAX_LISTED_ARTIFACTS - 1}.py" in text
    assert f"- /f/{MAX_LISTED_ARTIFACTS}.py" not in text
    assert "... and 7 more" in text
