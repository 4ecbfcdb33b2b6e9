"""Path safety by name: session ids, tool-use ids, virtual paths and section markers."""

from __future__ import annotations

import pickle
import posixpath

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hango.core.errors import HistoryPathError, InvalidSessionIdError
from hango.history.paths import (
    SECTION_MARKER_PREFIX,
    SECTION_MARKER_SUFFIX,
    conversation_history_path,
    large_tool_result_path,
    normalize,
    section_keys,
    section_marker,
    section_text,
    validate_section_key,
    validate_session_id,
)

GOOD_IDS = ["a", "s1", "Session-01.part_2", "0" * 128, "x.y", "toolu_01AbC"]
BAD_IDS = [
    "",
    ".",
    "..",
    "a..b",
    ".hidden",
    "-flag",
    "_x",
    "a/b",
    "../../etc/passwd",
    "a\\b",
    "a\x00b",
    "a\nb",
    "a b",
    "0" * 129,
    "x" * 10_000,
    "caf\u00e9",  # é: a letter, but not ASCII
    "\uff41\uff42",  # full-width "ab"
    "a\u2024b",  # one-dot leader, looks like "."
    "a\u2215b",  # division slash, looks like "/"
    "ab\u202e",  # right-to-left override
    "a\u200bb",  # zero-width space
]


@pytest.mark.parametrize("session_id", GOOD_IDS)
def test_safe_session_ids_are_accepted(session_id: str) -> None:
    assert validate_session_id(session_id) == session_id
    assert conversation_history_path(session_id) == f"/conversation_history/{session_id}.md"


@pytest.mark.parametrize("session_id", BAD_IDS)
def test_unsafe_session_ids_are_refused(session_id: str) -> None:
    with pytest.raises(InvalidSessionIdError) as caught:
        validate_session_id(session_id)
    assert caught.value.session_id == session_id
    with pytest.raises(InvalidSessionIdError):
        conversation_history_path(session_id)


def test_a_refused_long_id_is_shortened_in_the_message_and_pickles() -> None:
    with pytest.raises(InvalidSessionIdError) as caught:
        validate_session_id("x" * 10_000)
    assert len(str(caught.value)) < 300
    assert pickle.loads(pickle.dumps(caught.value)).session_id == "x" * 10_000


# Mostly characters that matter for paths, so many candidates are accepted, plus any text.
ID_CANDIDATES = st.text(alphabet="aZ09._-/\\ \x00\u00e9\uff41\u2024", max_size=140) | st.text()


@given(ID_CANDIDATES)
def test_an_accepted_id_is_one_plain_path_segment(candidate: str) -> None:
    try:
        accepted = validate_session_id(candidate)
    except InvalidSessionIdError:
        return
    joined = posixpath.normpath(posixpath.join("/root", accepted))
    assert posixpath.dirname(joined) == "/root"
    assert posixpath.basename(joined) == candidate
    assert candidate.isascii() and not candidate.startswith(".")


@pytest.mark.parametrize("tool_use_id", ["toolu_01ABC", "call-1.json"])
def test_large_tool_result_paths(tool_use_id: str) -> None:
    path = large_tool_result_path("sess-1", tool_use_id)
    assert path == f"/large_tool_results/sess-1/{tool_use_id}"


@pytest.mark.parametrize("tool_use_id", ["../x", "a/b", "", "..", "\x00", "x" * 129])
def test_unsafe_tool_use_ids_are_refused(tool_use_id: str) -> None:
    with pytest.raises(HistoryPathError, match="tool-use id"):
        large_tool_result_path("sess-1", tool_use_id)


@pytest.mark.parametrize(
    ("given_path", "expected"),
    [
        ("/a/b.md", "/a/b.md"),
        ("a/b.md", "/a/b.md"),
        ("//a///b.md/", "/a/b.md"),
        ("/a/./b.md", "/a/b.md"),
        ("/", "/"),
        ("./", "/"),
        ("/notes/ünïcödé.md", "/notes/ünïcödé.md"),
    ],
)
def test_normalize(given_path: str, expected: str) -> None:
    assert normalize(given_path) == expected


@pytest.mark.parametrize(
    ("hostile", "reason"),
    [
        ("..", "'..'"),
        ("/a/../b", "'..'"),
        ("../../etc/passwd", "'..'"),
        ("/a/b/..", "'..'"),
        ("a\\b", "backslash"),
        ("/a\x00", "control"),
        ("/a\tb", "control"),
        ("", "empty"),
        ("  ", "empty"),
        ("/" + "x" * 1025, "longer than"),
        ("/" + "y" * 256, "255 bytes"),
        ("/" + "\u00e9" * 128, "255 bytes"),
    ],
)
def test_normalize_refuses_hostile_paths(hostile: str, reason: str) -> None:
    with pytest.raises(HistoryPathError) as caught:
        normalize(hostile)
    assert reason in caught.value.reason


@given(st.text(max_size=300))
def test_normalized_paths_are_absolute_canonical_and_stable(candidate: str) -> None:
    try:
        path = normalize(candidate)
    except HistoryPathError:
        return
    assert path.startswith("/")
    assert ".." not in path.split("/")
    assert posixpath.normpath(path) == path
    assert normalize(path) == path


def test_sections_are_found_by_their_marker_lines() -> None:
    text = section_text("turn-1", "body") + "a line mentioning hango-section: turn-9\n"
    text += section_text("seq 3-9", "more\n")

    assert section_marker("turn-1") == "<!-- hango-section: turn-1 -->"
    assert section_keys(text) == {"turn-1", "seq 3-9"}
    assert section_text("k", "") == "<!-- hango-section: k -->\n"


_SECTION_PIECES = [
    section_marker("turn-1"),
    section_marker("seq 3-9"),
    section_marker("ü"),
    "x",
    "\n",
    "\r",
    "é",
    "<!-- hango-section: ",
    " -->",
    "\r\n",
]


@given(st.lists(st.sampled_from(_SECTION_PIECES), max_size=12))
def test_sections_are_found_in_the_bytes_as_in_the_lines_of_the_text(pieces: list[str]) -> None:
    text = "".join(pieces)
    lines = (line.rstrip("\r") for line in text.split("\n"))
    prefix, suffix = SECTION_MARKER_PREFIX, SECTION_MARKER_SUFFIX
    markers = [line for line in lines if line.startswith(prefix) and line.endswith(suffix)]
    expected = {marker[len(prefix) : -len(suffix)] for marker in markers}
    assert section_keys(text.encode()) == section_keys(text) == expected


@pytest.mark.parametrize("key", ["", "  ", "a\nb", "x-->y", "k" * 201, "a\rb"])
def test_bad_section_keys_are_refused(key: str) -> None:
    with pytest.raises(ValueError, match="section key"):
        validate_section_key(key)
