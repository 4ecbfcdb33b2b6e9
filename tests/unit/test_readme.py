"""The README is the front door: its commands, its configuration table and its example
must match the code."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from hango.core.settings import ENV_PREFIX, Settings
from tests.fakeapi import FakeAnthropicAPI, text_reply, tool_use_reply

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def quickstart_commands() -> list[str]:
    block = re.search(r"^#+\s*Quick\s*start.*?```[a-z]*\n(.*?)```", README, re.S | re.I | re.M)
    assert block is not None, "README has no Quickstart code block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_quickstart_has_exactly_the_two_commands() -> None:
    main_job, tests = quickstart_commands()
    assert main_job.endswith("hango simulate")
    assert "pytest" in tests and "'.[test]'" in tests
    # CI runs the second verbatim (.ci/run): the exact versions of the one constraints file.
    assert "-c constraints.txt" in main_job and "-c constraints.txt" in tests


def test_configuration_table_lists_every_setting() -> None:
    documented = set(re.findall(r"^\| `(HANGO_[A-Z_]+)`", README, re.M))
    expected = {ENV_PREFIX + name.upper() for name in Settings.model_fields}
    assert documented == expected


def test_embedding_example_runs_against_the_loopback_api(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    example = re.search(r"## Embedding.*?```python\n(.*?)```", README, re.S)
    assert example is not None
    with FakeAnthropicAPI() as api:
        api.push(
            tool_use_reply(("toolu_01", "ls", {"path": "/"})),
            text_reply("Two files: a.py and b.py."),
        )
        monkeypatch.setenv("HANGO_ANTHROPIC_BASE_URL", api.base_url)
        monkeypatch.setenv("HANGO_ANTHROPIC_API_KEY", "sk-test-readme")
        monkeypatch.setenv("HANGO_DATABASE_URL", f"sqlite:///{tmp_path / 'db.sqlite'}")
        monkeypatch.setenv("HANGO_HISTORY_ROOT", str(tmp_path / "history"))
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(example.group(1), "README.md", "exec"), {})
        bodies = [r.body for r in api.message_requests()]
    assert printed.getvalue().split()[:2] == ["1", "2"]
    assert bodies[1]["messages"][-1]["content"][0]["tool_use_id"] == "toolu_01"
    assert "ran ls with ['path']" in str(bodies[1]["messages"][-1])
