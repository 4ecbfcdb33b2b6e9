"""``run_command``: the simulation's extra tool, a deterministic pretend shell.

It never runs anything. It answers the commands the scripted agent issues with long,
realistic logs (test runs, builds, searches) that depend only on the seed, the command
and the files in the history backend: a test run fails while the module under test
still holds the bug marker, and passes once ``edit_file`` removed it. That keeps the
session coherent without any process, network or real file system.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from hango.core.messages import ToolDefinition
from hango.history.base import HistoryBackend
from hango.simulate.content import build_log, grep_log, pytest_log
from hango.simulate.plan import BUG_MARKER, WORKSPACE
from hango.tools.builtin import Tool, ToolOutcome

RUN_COMMAND = ToolDefinition(
    name="run_command",
    description="Run a shell command in the workspace (/work) and return its output.",
    input_schema={
        "type": "object",
        "properties": {"command": {"type": "string", "description": "The command line."}},
        "required": ["command"],
        "additionalProperties": False,
    },
)


class PretendShell:
    """Answers commands from the seed and the workspace files."""

    def __init__(self, history: HistoryBackend, seed: int) -> None:
        self.history = history
        self.seed = seed
        self.runs = 0

    def tool(self) -> Tool:
        return Tool(RUN_COMMAND, self.run)

    def run(self, arguments: Mapping[str, Any]) -> ToolOutcome:
        command = str(arguments["command"]).strip()
        self.runs += 1
        rng = random.Random(f"shell-{self.seed}-{self.runs}-{command}")
        words = command.split()
        if words[:1] == ["pytest"] and len(words) > 1:
            return self._pytest(words[1], rng)
        if words[:1] == ["make"]:
            target = words[1] if len(words) > 1 else "all"
            return ToolOutcome(content=build_log(target, rng))
        if words[:2] == ["grep", "-rn"] and len(words) > 2:
            return ToolOutcome(content=grep_log(words[2], words[3:], rng))
        return ToolOutcome(content=f"$ {command}\n(no output)")

    def _pytest(self, test_path: str, rng: random.Random) -> ToolOutcome:
        module = module_under_test(test_path)
        try:
            source = self.history.read(module)
        except FileNotFoundError:
            message = f"ERROR: file or module not found: {module} (imported by {test_path})"
            return ToolOutcome(content=message, is_error=True)
        names = tuple(
            line[4:].split("(")[0] for line in source.splitlines() if line.startswith("def ")
        )
        failing = BUG_MARKER in source
        log = pytest_log(test_path, names or ("module",), rng, fail=failing)
        return ToolOutcome(content=log, is_error=failing)


def module_under_test(test_path: str) -> str:
    """``tests/pkg/test_x.py`` tests ``/work/src/pkg/x.py``."""
    relative = test_path.removeprefix(WORKSPACE + "/").removeprefix("tests/")
    directory, _, name = relative.rpartition("/")
    module = name.removeprefix("test_")
    return f"{WORKSPACE}/src/{directory}/{module}" if directory else f"{WORKSPACE}/src/{module}"
