"""The agent's tools: files in the history backend, and a request to compact.

``read_file``, ``write_file``, ``edit_file`` and ``ls`` work on the same virtual file
system as the offloaded history, so the model can read back what compaction moved out of
its context (``/conversation_history/``, ``/large_tool_results/``); those two
directories are read-only to the model, because history is never rewritten.
``compact_conversation`` asks for compaction on the next model call.

``ToolRegistry.execute`` never raises: an unknown tool, bad arguments, a refused path or
a failing tool all become an ``is_error`` result the model can read and correct, which is
what the Messages API expects (a tool error is data for the model, not a crash).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from hango.compaction.record import CompactionReason
from hango.core.errors import HangoError, ToolInputError
from hango.core.messages import ToolDefinition, ToolUseBlock
from hango.history.base import HistoryBackend
from hango.history.paths import (
    CONVERSATION_HISTORY_DIR,
    LARGE_TOOL_RESULTS_DIR,
    conversation_history_path,
    is_under,
    large_tool_results_dir,
    normalize,
)

logger = logging.getLogger(__name__)

READ_DEFAULT_LIMIT = 500
READ_MAX_LIMIT = 2_000
READ_LINE_CHARS = 2_000
# About 10k tokens: under the default large-result threshold (20k tokens), so a page of a
# file is never itself offloaded as a large tool result.
READ_MAX_CHARS = 40_000
LS_MAX_ENTRIES = 500
READ_ONLY_DIRS = (CONVERSATION_HISTORY_DIR, LARGE_TOOL_RESULTS_DIR)


@dataclass(frozen=True)
class ToolOutcome:
    """What a tool produced: the result text, whether it is an error, a compaction request."""

    content: str
    is_error: bool = False
    force_compaction: CompactionReason | None = None


def tool_error(message: str) -> ToolOutcome:
    return ToolOutcome(content=message, is_error=True)


@dataclass(frozen=True)
class Tool:
    """A tool the model can call: its definition and the function that runs it.

    ``run`` receives the arguments already checked against the definition's schema.
    """

    definition: ToolDefinition
    run: Callable[[Mapping[str, Any]], ToolOutcome]

    @property
    def name(self) -> str:
        return self.definition.name


class ToolRegistry:
    """The tools of one agent: the built-in ones over ``history``, plus ``extra``."""

    def __init__(
        self,
        history: HistoryBackend,
        extra: Iterable[Tool] = (),
        *,
        read_max_chars: int = READ_MAX_CHARS,
    ) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in (*builtin_tools(history, read_max_chars=read_max_chars), *extra):
            self.add(tool)

    def add(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool

    def names(self) -> tuple[str, ...]:
        return tuple(self._tools)

    def definitions(self) -> tuple[ToolDefinition, ...]:
        return tuple(tool.definition for tool in self._tools.values())

    def execute(self, tool_use: ToolUseBlock) -> ToolOutcome:
        tool = self._tools.get(tool_use.name)
        if tool is None:
            known = ", ".join(self._tools)
            return tool_error(f"unknown tool {tool_use.name!r}; the tools are: {known}")
        problem = check_arguments(tool.definition.input_schema, tool_use.input)
        if problem is not None:
            return tool_error(f"invalid arguments for {tool.name}: {problem}")
        return _run(tool, tool_use)


def _run(tool: Tool, tool_use: ToolUseBlock) -> ToolOutcome:
    try:
        # A copy: the input belongs to the transcript, and a tool must not change it.
        return tool.run(copy.deepcopy(tool_use.input))
    except (ToolInputError, HangoError) as error:
        return tool_error(f"{tool.name}: {error}")
    except FileNotFoundError as error:
        return tool_error(f"{tool.name}: file not found ({error})")
    except Exception as error:  # a tool failure is data for the model, not a crashed turn
        logger.exception("tool %s failed for tool_use %s", tool.name, tool_use.id)
        return tool_error(f"{tool.name} failed: {type(error).__name__}: {error}")


# --- Argument checking -------------------------------------------------------------------

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
}


def check_arguments(schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> str | None:
    """Why ``arguments`` do not fit the (flat) object ``schema``, or ``None`` when they do."""
    properties: Mapping[str, Any] = schema.get("properties", {})
    missing = [name for name in schema.get("required", ()) if name not in arguments]
    if missing:
        return "missing required argument(s): " + ", ".join(missing)
    if schema.get("additionalProperties") is False:
        unknown = sorted(set(arguments) - set(properties))
        if unknown:
            return "unknown argument(s): " + ", ".join(unknown)
    for name, value in arguments.items():
        problem = _check_value(name, properties.get(name, {}), value)
        if problem is not None:
            return problem
    return None


def _check_value(name: str, spec: Mapping[str, Any], value: Any) -> str | None:
    kind = spec.get("type")
    expected = _JSON_TYPES.get(kind) if isinstance(kind, str) else None
    # JSON has no separate boolean-as-integer; Python's bool is an int subclass.
    if expected is not None and (
        not isinstance(value, expected) or (isinstance(value, bool) and kind != "boolean")
    ):
        return f"{name!r} must be of type {kind}, not {type(value).__name__}"
    minimum = spec.get("minimum")
    if minimum is not None and isinstance(value, int | float) and value < minimum:
        return f"{name!r} must be at least {minimum}, not {value}"
    return None


# --- The built-in tools ------------------------------------------------------------------


def _schema(properties: dict[str, Any], required: Sequence[str] = ()) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


_PATH = {"type": "string", "description": "Absolute path, e.g. /notes/plan.md"}

READ_FILE = ToolDefinition(
    name="read_file",
    description=(
        "Read a text file, with line numbers. Long files are returned a page at a time: "
        "use offset (lines to skip) and limit (lines to return) to read on. Earlier "
        "conversation is saved under /conversation_history/ and large tool results under "
        "/large_tool_results/."
    ),
    input_schema=_schema(
        {
            "path": _PATH,
            "offset": {"type": "integer", "minimum": 0, "description": "Lines to skip (0)."},
            "limit": {
                "type": "integer",
                "minimum": 1,
                "description": f"Lines to return ({READ_DEFAULT_LIMIT}, at most {READ_MAX_LIMIT}).",
            },
        },
        ["path"],
    ),
)
WRITE_FILE = ToolDefinition(
    name="write_file",
    description="Create a text file, or replace its whole content.",
    input_schema=_schema({"path": _PATH, "content": {"type": "string"}}, ["path", "content"]),
)
EDIT_FILE = ToolDefinition(
    name="edit_file",
    description=(
        "Replace old_string with new_string in a file. old_string must occur exactly once "
        "unless replace_all is true; include surrounding lines to make it unique."
    ),
    input_schema=_schema(
        {
            "path": _PATH,
            "old_string": {"type": "string"},
            "new_string": {"type": "string"},
            "replace_all": {"type": "boolean", "description": "Replace every occurrence."},
        },
        ["path", "old_string", "new_string"],
    ),
)
LS = ToolDefinition(
    name="ls",
    description="List the files under a directory (recursively), one path a line.",
    input_schema=_schema({"path": {"type": "string", "description": "Directory (/)."}}),
)
COMPACT_CONVERSATION = ToolDefinition(
    name="compact_conversation",
    description=(
        "Summarize the earlier conversation now to free context space. The earlier "
        "messages are saved under /conversation_history/ and stay readable with read_file."
    ),
    input_schema=_schema({}),
)
COMPACTION_REQUESTED = (
    "Compaction requested: the earlier conversation will be summarized before the next "
    "model call, and its full transcript saved under /conversation_history/."
)
NOTHING_TO_COMPACT = (
    "Nothing to compact yet: every message of this conversation is among the recent ones "
    "kept verbatim, so a summary would free no context. No compaction is pending; carry on."
)


def builtin_tools(
    history: HistoryBackend, *, read_max_chars: int = READ_MAX_CHARS
) -> tuple[Tool, ...]:
    """The file tools over ``history`` and ``compact_conversation``, in a stable order."""
    files = FileTools(history, read_max_chars=read_max_chars)
    return (
        Tool(READ_FILE, files.read_file),
        Tool(WRITE_FILE, files.write_file),
        Tool(EDIT_FILE, files.edit_file),
        Tool(LS, files.ls),
        Tool(COMPACT_CONVERSATION, compact_conversation),
    )


def compact_conversation(arguments: Mapping[str, Any]) -> ToolOutcome:
    return ToolOutcome(content=COMPACTION_REQUESTED, force_compaction="tool")


class FileTools:
    """The file tools' behaviour over one history backend."""

    def __init__(self, history: HistoryBackend, *, read_max_chars: int = READ_MAX_CHARS) -> None:
        self.history = history
        self.read_max_chars = read_max_chars

    def read_file(self, arguments: Mapping[str, Any]) -> ToolOutcome:
        path = normalize(arguments["path"])
        if not (_visible(path) and _visible(self.history.resolve(path))):
            raise ToolInputError(f"{path} belongs to another session")
        offset = arguments.get("offset", 0)
        limit = min(arguments.get("limit", READ_DEFAULT_LIMIT), READ_MAX_LIMIT)
        lines = self._read(path).splitlines()
        if not lines:
            return ToolOutcome(content=f"({path} is empty)")
        if offset >= len(lines):
            raise ToolInputError(f"offset {offset} is past the end of {path} ({len(lines)} lines)")
        return ToolOutcome(content=self._page(path, lines, offset, limit))

    def _read(self, path: str) -> str:
        try:
            return self.history.read(path)
        except FileNotFoundError:
            raise ToolInputError(f"file not found: {path}") from None

    def _page(self, path: str, lines: list[str], offset: int, limit: int) -> str:
        shown: list[str] = []
        size = 0
        for number in range(offset, min(offset + limit, len(lines))):
            line = f"{number + 1:>6}\t{_clip_line(lines[number])}"
            if shown and size + len(line) + 1 > self.read_max_chars:
                break
            shown.append(line)
            size += len(line) + 1
        end = offset + len(shown)
        if end < len(lines):
            shown.append(
                f"(lines {offset + 1}-{end} of {len(lines)} in {path}; "
                f"call read_file with offset={end} to read on)"
            )
        return "\n".join(shown)

    def write_file(self, arguments: Mapping[str, Any]) -> ToolOutcome:
        path = self._writable(arguments["path"])
        content: str = arguments["content"]
        verb = "Replaced" if self.history.exists(path) else "Created"
        self.history.write(path, content)
        return ToolOutcome(content=f"{verb} {path} ({_size(content)}).")

    def edit_file(self, arguments: Mapping[str, Any]) -> ToolOutcome:
        path = self._writable(arguments["path"])
        old, new = arguments["old_string"], arguments["new_string"]
        if not old:
            raise ToolInputError("old_string is empty; use write_file to create a file")
        if old == new:
            raise ToolInputError("old_string and new_string are identical; nothing to change")
        text = self._read(path)
        count = text.count(old)
        if count == 0:
            raise ToolInputError(f"old_string was not found in {path}")
        if count > 1 and not arguments.get("replace_all", False):
            raise ToolInputError(
                f"old_string occurs {count} times in {path}; include more surrounding text "
                "to make it unique, or set replace_all to true"
            )
        self.history.write(path, text.replace(old, new))
        return ToolOutcome(content=f"Replaced {count} occurrence(s) in {path}.")

    def _writable(self, path: str) -> str:
        """The path, when neither it nor what it really names is a system directory."""
        given = _writable(path)
        _writable(self.history.resolve(given), shown=given)
        return given

    def ls(self, arguments: Mapping[str, Any]) -> ToolOutcome:
        prefix = normalize(arguments.get("path", "/"))
        paths = [path for path in self.history.ls(prefix) if _visible(path)]
        if not paths:
            return ToolOutcome(content=f"(no files under {prefix})")
        listed = paths[:LS_MAX_ENTRIES]
        if len(paths) > LS_MAX_ENTRIES:
            listed.append(f"({len(paths) - LS_MAX_ENTRIES} more; list a subdirectory)")
        return ToolOutcome(content="\n".join(listed))


# The session whose model is calling the tools (set by the loop around each call): its
# own history file is readable, other sessions' are not, even on a shared backend.
_calling_session: ContextVar[str | None] = ContextVar("hango_tool_session", default=None)


@contextmanager
def calling_session(session_id: str) -> Iterator[None]:
    token = _calling_session.set(session_id)
    try:
        yield
    finally:
        _calling_session.reset(token)


def current_session() -> str | None:
    """The session whose model is calling the tools, when the loop set one."""
    return _calling_session.get()


def _visible(path: str) -> bool:
    """Whether the calling session may see ``path``: of the two system directories, only
    its own history file and its own offloaded tool results."""
    session_id = _calling_session.get()
    if session_id is None:
        return True
    if is_under(path, CONVERSATION_HISTORY_DIR):
        return path == conversation_history_path(session_id)
    if is_under(path, LARGE_TOOL_RESULTS_DIR) and path != LARGE_TOOL_RESULTS_DIR:
        return is_under(path, large_tool_results_dir(session_id))
    return True


def _writable(path: str, *, shown: str | None = None) -> str:
    normalized = normalize(path)
    for directory in READ_ONLY_DIRS:
        if is_under(normalized, directory):
            raise ToolInputError(
                f"{shown or normalized} is read-only: {directory}/ holds history saved by "
                "the system"
            )
    return normalized


def _clip_line(line: str) -> str:
    if len(line) <= READ_LINE_CHARS:
        return line
    return f"{line[:READ_LINE_CHARS]} [... line cut, {len(line) - READ_LINE_CHARS} more characters]"


def _size(content: str) -> str:
    return f"{len(content.splitlines())} lines, {len(content)} characters"
