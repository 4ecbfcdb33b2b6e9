"""Every command a hint prints runs as printed: from another directory, in a shell where
this venv is not activated (its bin/ is not on PATH)."""

from __future__ import annotations

import argparse
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hango.cli import errors
from hango.cli.errors import error_line, hango_command
from hango.core.errors import SchemaNotReadyError

VENV_BIN = Path(sys.executable).parent
HANGO = VENV_BIN / "hango"


def shell_env(home: Path) -> dict[str, str]:
    """A shell without this venv on PATH, no HANGO_* settings, a fresh HOME."""
    path = [p for p in os.environ["PATH"].split(os.pathsep) if Path(p) != VENV_BIN]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HANGO_", "VIRTUAL_ENV"))}
    env.update(PATH=os.pathsep.join(path), HOME=str(home), XDG_DATA_HOME="", NO_COLOR="1")
    return env


def test_simulate_hints_run_as_printed_from_another_directory(tmp_path: Path) -> None:
    env = shell_env(tmp_path / "home")
    (tmp_path / "here").mkdir()
    (tmp_path / "elsewhere").mkdir()
    ran = subprocess.run(
        [str(HANGO), "simulate", "--turns", "6", "-q"],
        cwd=tmp_path / "here",
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    hints = re.findall(r"^(?:Inspect it|Read its offloaded history): (.+)$", ran.stdout, re.M)
    assert len(hints) == 2, ran.stdout
    for hint in hints:
        assert hint.startswith(str(HANGO)), hint  # the venv's script, by its absolute path
        again = subprocess.run(
            hint,
            shell=True,
            cwd=tmp_path / "elsewhere",
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert again.returncode == 0, (hint, again.stderr)
        assert hint.split()[-1] in again.stdout


def test_the_plain_name_when_the_shell_finds_this_very_script(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys, "argv", [str(HANGO)])
    monkeypatch.setattr(errors.shutil, "which", lambda _name: str(HANGO))
    assert hango_command() == "hango"
    monkeypatch.setattr(errors.shutil, "which", lambda _name: None)
    assert hango_command() == str(HANGO)


def test_the_migrate_advice_carries_the_database_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", [str(HANGO)])
    monkeypatch.setattr(errors.shutil, "which", lambda _name: str(HANGO))  # venv activated
    error = SchemaNotReadyError(
        "database x has no hango schema, not 0006: run `hango migrate` on it", database="x"
    )
    args = argparse.Namespace(database_url="postgresql://u:secret@127.0.0.1/db")
    line = error_line("sessions list", error, args)
    assert "`hango migrate --database-url 'postgresql://u:***@127.0.0.1/db'`" in line


def output_on_a_terminal(command: list[str], env: dict[str, str], cwd: Path) -> bytes:
    """What ``command`` writes to a real terminal (a pseudo-terminal), stdout and stderr."""
    controller, terminal = pty.openpty()
    try:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=terminal, stderr=terminal)
        os.close(terminal)
        chunks = []
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # the terminal closed: the process is done writing
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert process.wait(timeout=120) == 0
    finally:
        os.close(controller)
    return b"".join(chunks)


def test_no_color_on_a_terminal_writes_no_escape_at_all(tmp_path: Path) -> None:
    env = shell_env(tmp_path / "home")
    env.pop("NO_COLOR")
    command = [str(HANGO), "simulate", "--turns", "2"]
    assert b"\x1b" in output_on_a_terminal(command, env, tmp_path)  # the check below can fail
    plain = output_on_a_terminal(command, {**env, "NO_COLOR": "1"}, tmp_path)
    assert b"Simulated 2 turns" in plain
    assert b"\x1b" not in plain
