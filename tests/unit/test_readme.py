"""The README is the front door: its commands, its configuration table and its example
must match the code."""

from __future__ import annotations

import contextlib
import io
import os
import re
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from hango.core.errors import HangoError
from hango.core.settings import ENV_PREFIX, Settings
from tests.fakeapi import FakeAnthropicAPI, ScriptedError, text_reply, tool_use_reply

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


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


def test_the_command_for_a_machine_without_services_deselects_the_integration_marker() -> None:
    assert '-m "not integration"' in README
    markers = re.findall(r"^\s*\"(\w+): ", (ROOT / "pyproject.toml").read_text(), re.M)
    assert "integration" in markers


def test_configuration_table_lists_every_setting() -> None:
    documented = set(re.findall(r"^\| `(HANGO_[A-Z_]+)`", README, re.M))
    expected = {ENV_PREFIX + name.upper() for name in Settings.model_fields}
    assert documented == expected


def python_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", README, re.S | re.M)


def embedding_example() -> str:
    example = re.search(r"## Embedding.*?```python\n(.*?)```", README, re.S)
    assert example is not None
    return example.group(1)


@pytest.fixture
def fresh_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No HANGO_*/ANTHROPIC_* setting: the example as a new user runs it."""
    for name in list(os.environ):
        if name.startswith(("HANGO_", "ANTHROPIC_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HANGO_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def run_block(code: str) -> str:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, "README.md", "exec"), {})
    return printed.getvalue()


def unfinished_runs(home: Path) -> list[tuple[str, int, str]]:
    engine = create_engine(f"sqlite:///{home / 'hango.db'}")
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT session_id, turn, status FROM runs")).all()
    finally:
        engine.dispose()
    return [(s, n, status) for s, n, status in rows if status == "running"]


def test_every_python_block_runs_offline_as_printed(fresh_home: Path) -> None:
    blocks = python_blocks()
    assert embedding_example() in blocks
    for block in blocks:
        run_block(block)


def test_the_embedding_example_registers_a_tool_and_runs_it_offline(fresh_home: Path) -> None:
    printed = run_block(embedding_example()).split()
    # turn 1, two model calls, one tool call: the registered tool's answer came back
    assert printed == ["1", "2", "1", "It", "has", "3", "words."]
    assert unfinished_runs(fresh_home) == []


def test_the_live_switch_without_a_key_stops_before_storing_anything(
    fresh_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HANGO_EXAMPLE_LIVE", "1")
    for _ in range(2):
        with pytest.raises(SystemExit, match="cannot start: no Anthropic API key"):
            run_block(embedding_example())
    assert not (fresh_home / "hango.db").exists()


def test_the_live_switch_against_the_loopback_api(
    fresh_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeAnthropicAPI() as api:
        api.push(
            tool_use_reply(("toolu_01", "word_count", {"text": "three short words"})),
            text_reply("It has 3 words."),
        )
        monkeypatch.setenv("HANGO_EXAMPLE_LIVE", "1")
        monkeypatch.setenv("HANGO_ANTHROPIC_BASE_URL", api.base_url)
        monkeypatch.setenv("HANGO_ANTHROPIC_API_KEY", "sk-test-readme")
        printed = run_block(embedding_example())
        bodies = [r.body for r in api.message_requests()]
    assert printed.split()[:3] == ["1", "2", "1"]
    offered = [tool["name"] for tool in bodies[0]["tools"]]
    assert "word_count" in offered and "read_file" in offered  # beside the built-ins
    result = bodies[1]["messages"][-1]["content"][0]
    assert result["tool_use_id"] == "toolu_01" and "3" in str(result["content"])


def test_a_failed_turn_of_the_example_is_closed_not_left_unfinished(
    fresh_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeAnthropicAPI() as api:
        api.push(ScriptedError(400, "invalid_request_error", "a request the API refuses"))
        monkeypatch.setenv("HANGO_EXAMPLE_LIVE", "1")
        monkeypatch.setenv("HANGO_ANTHROPIC_BASE_URL", api.base_url)
        monkeypatch.setenv("HANGO_ANTHROPIC_API_KEY", "sk-test-readme")
        with pytest.raises(HangoError):
            run_block(embedding_example())
    assert unfinished_runs(fresh_home) == []
