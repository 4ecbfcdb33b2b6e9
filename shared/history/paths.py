"""Which names may become history paths, and the virtual paths the product uses.

Every history path is virtual: absolute, POSIX, rooted at the history root. A session id
or tool-use id is validated before it becomes part of a path, and every path is
normalised here before a backend touches it, so nothing a model or user sends can name a
file outside the root (architecture invariant 7). Backends add their own last check
(the local one resolves symlinks), but this module refuses everything it can by name.

It also owns the section marker: the one line that records, inside a history file, that
a keyed section was appended, so both backends agree on what a file contains.
"""

from __future__ import annotations

from hango.core.errors import HistoryPathError
from hango.core.ids import is_safe_id, validate_session_id

# ASCII only (the explicit ranges do not match other scripts' letters or digits), so no
# look-alike or full-width character can smuggle a dot or slash into a file name.
MAX_PATH_CHARS = 1024
MAX_SEGMENT_BYTES = 255
MAX_SECTION_KEY_CHARS = 200

CONVERSATION_HISTORY_DIR = "/conversation_history"
LARGE_TOOL_RESULTS_DIR = "/large_tool_results"
SECTION_MARKER_PREFIX = "<!-- hango-section: "
SECTION_MARKER_SUFFIX = " -->"


def validate_tool_use_id(tool_use_id: str) -> str:
    """``tool_use_id`` itself when it can safely be a file name; else ``HistoryPathError``."""
    if not is_safe_id(tool_use_id):
        shown = str(tool_use_id)[:80]
        raise HistoryPathError(
            f"{LARGE_TOOL_RESULTS_DIR}/{shown}",
            "a tool-use id must be 1-128 letters, digits, '.', '_' or '-', "
            "not starting with '.' and without '..'",
        )
    return tool_use_id


def conversation_history_path(session_id: str) -> str:
    """Where a session's evicted messages are offloaded."""
    return f"{CONVERSATION_HISTORY_DIR}/{validate_session_id(session_id)}.md"


def large_tool_results_dir(session_id: str) -> str:
    """The directory of one session's offloaded tool results (only that session sees it)."""
    return f"{LARGE_TOOL_RESULTS_DIR}/{validate_session_id(session_id)}"


def large_tool_result_path(session_id: str, tool_use_id: str) -> str:
    """Where a tool result too large to keep in the request is offloaded.

    Scoped to the session like ``/conversation_history/{session}.md``: a tool output may
    hold anything the session's own files or commands held.
    """
    return f"{large_tool_results_dir(session_id)}/{validate_tool_use_id(tool_use_id)}"


def normalize(path: str) -> str:
    """The canonical absolute virtual path for ``path``, or ``HistoryPathError``.

    A relative path is taken from the root; ``.`` segments and repeated or trailing
    slashes are dropped. ``..`` segments are refused rather than resolved, so a path can
    never climb, even when the result would still be inside the root.
    """
    if not isinstance(path, str):
        raise HistoryPathError(repr(path), "a path must be a string")
    _refuse_bad_characters(path)
    segments = [segment for segment in path.split("/") if segment not in ("", ".")]
    for segment in segments:
        if segment == "..":
            raise HistoryPathError(path, "'..' segments are not allowed")
        if len(segment.encode("utf-8")) > MAX_SEGMENT_BYTES:
            raise HistoryPathError(path[:80], f"a segment exceeds {MAX_SEGMENT_BYTES} bytes")
    return "/" + "/".join(segments)


def _refuse_bad_characters(path: str) -> None:
    if not path.strip():
        raise HistoryPathError(path, "the path is empty")
    if len(path) > MAX_PATH_CHARS:
        raise HistoryPathError(path[:80] + "...", f"longer than {MAX_PATH_CHARS} characters")
    if "\\" in path:
        raise HistoryPathError(path, "backslashes are not allowed")
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in path):
        raise HistoryPathError(path, "control characters (NUL included) are not allowed")


def is_under(path: str, prefix: str) -> bool:
    """Whether normalised ``path`` is ``prefix`` itself or inside directory ``prefix``."""
    if prefix == "/":
        return True
    return path == prefix or path.startswith(prefix + "/")


def validate_section_key(key: str) -> str:
    """``key`` itself when it fits on the marker line; else ``ValueError`` naming it."""
    if (
        not isinstance(key, str)
        or not key.strip()
        or len(key) > MAX_SECTION_KEY_CHARS
        or "-->" in key
        or any(ord(char) < 0x20 or ord(char) == 0x7F for char in key)
    ):
        raise ValueError(
            f"invalid history section key {key!r}: use 1-{MAX_SECTION_KEY_CHARS} "
            "printable characters on one line, without '-->'"
        )
    return key


def section_marker(key: str) -> str:
    """The marker line that records that section ``key`` was appended."""
    return f"{SECTION_MARKER_PREFIX}{validate_section_key(key)}{SECTION_MARKER_SUFFIX}"


def section_keys(text: str | bytes) -> set[str]:
    """Every section key whose marker line appears in ``text``: a file's text, or its UTF-8
    bytes as read from disk.

    Found by searching for the marker's prefix (a history file of a long session is tens
    of MB, and the offload asks which sections it holds), not by splitting every line.
    In the bytes only the marker lines are decoded: decoding a whole file of tens of MB
    cost more than the search. UTF-8 never encodes a character with bytes that begin
    another one, so the marker's bytes occur exactly where its text does (a lone surrogate
    in a text passes through both ways).
    """
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    prefix, suffix = SECTION_MARKER_PREFIX.encode(), SECTION_MARKER_SUFFIX.encode()
    keys: set[str] = set()
    at = data.find(prefix)
    while at != -1:
        end = data.find(b"\n", at)
        line = data[at : len(data) if end == -1 else end].rstrip(b"\r")
        if (at == 0 or data[at - 1 : at] == b"\n") and line.endswith(suffix):
            keys.add(line[len(prefix) : -len(suffix)].decode("utf-8", "surrogatepass"))
        at = data.find(prefix, at + len(prefix))
    return keys


def section_text(key: str, content: str) -> str:
    """The text appended for section ``key``: its marker line, then ``content``, newline-ended."""
    return f"{section_marker(key)}\n{section_body(content)}"


def section_body(content: str) -> str:
    """``content`` as section text holds it: newline-ended, its marker lines escaped.

    A content line that is itself a marker line (a transcript quoting a history file) gets
    a leading backslash: only the product's own marker lines may say that a key was
    appended, or a later section of a quoted key would be refused as already there.
    """
    body = content if content.endswith("\n") or not content else content + "\n"
    return _escape_markers(body)


def _escape_markers(text: str) -> str:
    if SECTION_MARKER_PREFIX not in text:
        return text
    return "".join(
        "\\" + line if _is_marker_line(line.rstrip("\r\n")) else line
        for line in text.splitlines(keepends=True)
    )


def _is_marker_line(line: str) -> bool:
    return line.startswith(SECTION_MARKER_PREFIX) and line.endswith(SECTION_MARKER_SUFFIX)


def joined(existing: str, addition: str) -> str:
    """``existing`` + ``addition``, with a newline between when ``existing`` lacks one."""
    if existing and not existing.endswith("\n"):
        return existing + "\n" + addition
    return existing + addition
