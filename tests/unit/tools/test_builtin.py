"""The agent's tools: file tools over the history backend, compaction, the registry."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from hango.core.messages import ToolDefinition, ToolUseBlock
from hango.history.local import LocalHistory
from hango.history.paths import conversation_history_path
from hango.tools.builtin import (
    READ_DEFAULT_LIMIT,
    READ_LINE_CHARS,
    READ_MAX_LIMIT,
    Tool,
    ToolOutcome,
    ToolRegistry,
    calling_session,
)
from tests.memory_history import MemoryHistory


@pytest.fixture
def history() -> MemoryHistory:
    return MemoryHistory()


@pytest.fixture
def tools(history: MemoryHistory) -> ToolRegistry:
    return ToolRegistry(history)


def run(tools: ToolRegistry, name: str, **arguments: Any) -> ToolOutcome:
    return tools.execute(ToolUseBlock(id="toolu_t", name=name, input=arguments))


def ok(outcome: ToolOutcome) -> str:
    assert not outcome.is_error, outcome.content
    assert outcome.force_compaction is None
    return outcome.content


def error(outcome: ToolOutcome) -> str:
    assert outcome.is_error
    return outcome.content


# --- definitions ------------------------------------------------------------------------


def test_definitions_are_the_builtin_tools_with_closed_schemas(tools: ToolRegistry) -> None:
    definitions = tools.definitions()
    assert [d.name for d in definitions] == [
        "read_file",
        "write_file",
        "edit_file",
        "ls",
        "compact_conversation",
    ]
    for definition in definitions:
        assert definition.description
        assert definition.input_schema["type"] == "object"
        assert definition.input_schema["additionalProperties"] is False
    assert definitions == ToolRegistry(MemoryHistory()).definitions()  # stable for the cache


# --- read_file --------------------------------------------------------------------------


def test_read_file_numbers_lines_and_pages(history: MemoryHistory, tools: ToolRegistry) -> None:
    history.write("/notes.txt", "".join(f"line {n}\n" for n in range(1, 11)))
    assert ok(run(tools, "read_file", path="/notes.txt", limit=3)) == (
        "     1\tline 1\n     2\tline 2\n     3\tline 3\n"
        "(lines 1-3 of 10 in /notes.txt; call read_file with offset=3 to read on)"
    )
    last = ok(run(tools, "read_file", path="notes.txt", offset=8))
    assert last == "     9\tline 9\n    10\tline 10"


def test_read_file_bounds_its_output(history: MemoryHistory, tools: ToolRegistry) -> None:
    history.write("/big.txt", "x\n" * (READ_MAX_LIMIT + 50))
    default = ok(run(tools, "read_file", path="/big.txt"))
    assert default.count("\tx") == READ_DEFAULT_LIMIT
    clamped = ok(run(tools, "read_file", path="/big.txt", limit=READ_MAX_LIMIT * 10))
    assert clamped.count("\tx") == READ_MAX_LIMIT

    history.write("/wide.txt", "y" * (READ_LINE_CHARS + 10) + "\nshort\n")
    wide = ok(run(tools, "read_file", path="/wide.txt"))
    assert "[... line cut, 10 more characters]" in wide and "\tshort" in wide

    small = ToolRegistry(history, read_max_chars=1_000)
    history.write("/long.txt", ("z" * 90 + "\n") * 100)
    page = ok(run(small, "read_file", path="/long.txt"))
    assert len(page) < 1_200
    assert "call read_file with offset=" in page


def test_read_file_errors(history: MemoryHistory, tools: ToolRegistry) -> None:
    assert "file not found: /missing.txt" in error(run(tools, "read_file", path="/missing.txt"))
    history.write("/two.txt", "a\nb\n")
    assert "offset 5 is past the end of /two.txt (2 lines)" in error(
        run(tools, "read_file", path="/two.txt", offset=5)
    )
    history.write("/empty.txt", "")
    assert ok(run(tools, "read_file", path="/empty.txt")) == "(/empty.txt is empty)"


def test_history_files_are_readable(history: MemoryHistory, tools: ToolRegistry) -> None:
    history.append_section("/conversation_history/s1.md", "turn-1", "## Turn 1\nhello\n")
    assert "\t## Turn 1" in ok(run(tools, "read_file", path="/conversation_history/s1.md"))


# --- write_file / edit_file -------------------------------------------------------------


def test_write_file_creates_and_replaces(history: MemoryHistory, tools: ToolRegistry) -> None:
    assert ok(run(tools, "write_file", path="/a/b.txt", content="one\ntwo\n")) == (
        "Created /a/b.txt (2 lines, 8 characters)."
    )
    assert ok(run(tools, "write_file", path="/a/b.txt", content="new")).startswith("Replaced")
    assert history.read("/a/b.txt") == "new"


@pytest.mark.parametrize("path", ["/conversation_history/s1.md", "/large_tool_results/toolu_1"])
def test_history_directories_are_read_only(
    history: MemoryHistory, tools: ToolRegistry, path: str
) -> None:
    history.write(path, "saved")
    assert "is read-only" in error(run(tools, "write_file", path=path, content="x"))
    assert "is read-only" in error(
        run(tools, "edit_file", path=path, old_string="saved", new_string="x")
    )
    assert history.read(path) == "saved"


@pytest.mark.parametrize("path", ["../etc/passwd", "/a/../../b", "/a\\b", "/nul\x00"])
def test_escaping_paths_are_refused_as_tool_errors(tools: ToolRegistry, path: str) -> None:
    for outcome in (
        run(tools, "read_file", path=path),
        run(tools, "write_file", path=path, content="x"),
        run(tools, "ls", path=path),
    ):
        assert "refused history path" in error(outcome)


def test_edit_file_replaces_a_unique_string(history: MemoryHistory, tools: ToolRegistry) -> None:
    history.write("/f.py", "a = 1\nb = 2\n")
    assert ok(run(tools, "edit_file", path="/f.py", old_string="b = 2", new_string="b = 3")) == (
        "Replaced 1 occurrence(s) in /f.py."
    )
    assert history.read("/f.py") == "a = 1\nb = 3\n"


def test_edit_file_errors_leave_the_file_alone(history: MemoryHistory, tools: ToolRegistry) -> None:
    history.write("/f.py", "x = 1\nx = 1\n")
    assert "was not found in /f.py" in error(
        run(tools, "edit_file", path="/f.py", old_string="y", new_string="z")
    )
    assert "occurs 2 times in /f.py" in error(
        run(tools, "edit_file", path="/f.py", old_string="x = 1", new_string="x = 2")
    )
    assert "identical" in error(
        run(tools, "edit_file", path="/f.py", old_string="x", new_string="x")
    )
    assert "old_string is empty" in error(
        run(tools, "edit_file", path="/f.py", old_string="", new_string="x")
    )
    assert "file not found: /nope.py" in error(
        run(tools, "edit_file", path="/nope.py", old_string="a", new_string="b")
    )
    assert history.read("/f.py") == "x = 1\nx = 1\n"
    assert "Replaced 2 occurrence(s)" in ok(
        run(
            tools,
            "edit_file",
            path="/f.py",
            old_string="x = 1",
            new_string="x = 2",
            replace_all=True,
        )
    )
    assert history.read("/f.py") == "x = 2\nx = 2\n"


# --- ls and compact_conversation --------------------------------------------------------


def test_ls_lists_files_under_a_directory(history: MemoryHistory, tools: ToolRegistry) -> None:
    for path in ("/b/2.txt", "/a/1.txt", "/a/sub/3.txt", "/ab.txt"):
        history.write(path, "x")
    assert ok(run(tools, "ls")) == "/a/1.txt\n/a/sub/3.txt\n/ab.txt\n/b/2.txt"
    assert ok(run(tools, "ls", path="/a")) == "/a/1.txt\n/a/sub/3.txt"
    assert ok(run(tools, "ls", path="/zzz")) == "(no files under /zzz)"


def test_compact_conversation_requests_compaction(tools: ToolRegistry) -> None:
    outcome = run(tools, "compact_conversation")
    assert outcome.force_compaction == "tool"
    assert not outcome.is_error
    assert "/conversation_history/" in outcome.content


# --- the registry -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "arguments", "message"),
    [
        ("rm_rf", {}, "unknown tool 'rm_rf'; the tools are: read_file, write_file"),
        ("read_file", {}, "missing required argument(s): path"),
        ("read_file", {"path": 3}, "'path' must be of type string, not int"),
        ("read_file", {"path": "/a", "offset": True}, "'offset' must be of type integer, not bool"),
        ("read_file", {"path": "/a", "offset": -1}, "'offset' must be at least 0, not -1"),
        ("read_file", {"path": "/a", "lines": 3}, "unknown argument(s): lines"),
        ("compact_conversation", {"now": True}, "unknown argument(s): now"),
    ],
)
def test_bad_calls_become_error_results(
    tools: ToolRegistry, name: str, arguments: dict[str, Any], message: str
) -> None:
    assert message in error(run(tools, name, **arguments))


def test_extra_tools_are_registered_and_failures_never_escape(history: MemoryHistory) -> None:
    def run_command(arguments: Mapping[str, Any]) -> ToolOutcome:
        if arguments["command"] == "crash":
            raise RuntimeError("disk on fire")
        return ToolOutcome(content=f"ran {arguments['command']}")

    definition = ToolDefinition(
        name="run_command",
        input_schema={
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    )
    tools = ToolRegistry(history, [Tool(definition, run_command)])
    assert tools.names()[-1] == "run_command"
    assert tools.definitions()[-1] == definition
    assert ok(run(tools, "run_command", command="make")) == "ran make"
    assert error(run(tools, "run_command", command="crash")) == (
        "run_command failed: RuntimeError: disk on fire"
    )
    with pytest.raises(ValueError, match="already registered"):
        tools.add(Tool(definition, run_command))


# --- a symlink planted inside the local root (issue 14, defect 17) -----------------------


@pytest.mark.parametrize("planted", ["directory", "file"])
def test_a_symlink_inside_the_root_cannot_reach_another_sessions_history(
    tmp_path: Path, planted: str
) -> None:
    local = LocalHistory(tmp_path / "history")
    alice = conversation_history_path("alice")
    local.append_section(alice, "turn-1", "alice's secret plan")
    root = local.root
    (root / "work").mkdir()
    if planted == "directory":
        (root / "work" / "alias").symlink_to(root / "conversation_history")
        via = "/work/alias/alice.md"
    else:
        (root / "work" / "alias.md").symlink_to(root / "conversation_history" / "alice.md")
        via = "/work/alias.md"
    registry = ToolRegistry(local)
    with calling_session("bob"):
        assert "another session" in error(run(registry, "read_file", path=via))
        edited = run(registry, "edit_file", path=via, old_string="secret", new_string="public")
        written = run(registry, "write_file", path=via, content="overwritten")
    assert "read-only" in error(edited) and "read-only" in error(written)
    assert "alice's secret plan" in local.read(alice)
