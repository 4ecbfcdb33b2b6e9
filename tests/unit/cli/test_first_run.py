"""What a new user sees on a first run, at the default log level."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hango.cli import main
from hango.compaction.record import RunState
from hango.store import Store

HANGO = Path(sys.executable).parent / "hango"


def replay(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    transcript = tmp_path / "t.json"
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    transcript.write_text(json.dumps({"messages": messages}))
    return subprocess.run(
        [str(HANGO), "replay", str(transcript), *flags],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "NO_COLOR": "1"},
    )


def test_an_unknown_model_is_a_warning_at_the_default_level_said_once(tmp_path: Path) -> None:
    ran = replay(tmp_path, "--model", "my-own-model")
    warnings = [line for line in ran.stderr.splitlines() if "has no profile" in line]
    assert len(warnings) == 1, ran.stderr
    assert "'my-own-model'" in warnings[0] and "HANGO_MODEL_PROFILES" in warnings[0]


def test_quiet_keeps_it_quiet_and_a_known_model_says_nothing(tmp_path: Path) -> None:
    assert "has no profile" not in replay(tmp_path, "--model", "my-own-model", "-q").stderr
    assert "has no profile" not in replay(tmp_path).stderr


def hango_in_process(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *argv: str
) -> tuple[int, str, str]:
    for name in ("ANTHROPIC_API_KEY", "HANGO_ANTHROPIC_API_KEY", "HANGO_REDIS_URL"):
        monkeypatch.delenv(name, raising=False)
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_resume_of_a_finished_session_says_so_without_asking_for_a_key(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    store = ("--database-url", f"sqlite:///{tmp_path / 'h.db'}")
    history = ("--history-root", str(tmp_path / "history"))
    ran = hango_in_process(capsys, monkeypatch, "simulate", "--session", "done", "--turns", "1",
                           "--json", *store, *history)  # fmt: skip
    assert ran[0] == 0, ran[2]
    code, out, err = hango_in_process(capsys, monkeypatch, "sessions", "resume", "done", *store)
    assert (code, out.strip()) == (0, "session done: no unfinished turn to resume"), err

    # An unfinished turn does need the model: then, and only then, the key is asked for.
    opened = Store.from_url(store[1])
    opened.start_run("done", opened.last_turn("done") + 1, RunState())
    opened.engine.dispose()
    code, out, err = hango_in_process(capsys, monkeypatch, "sessions", "resume", "done", *store)
    assert code == 3 and "no Anthropic API key" in err


def test_a_mistyped_variable_is_reported_at_the_default_level(tmp_path: Path) -> None:
    ran = subprocess.run(
        [str(HANGO), "sessions", "list"],
        cwd=tmp_path, capture_output=True, text=True, check=True,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "HANGO_MODLE": "x"},
    )  # fmt: skip
    assert "HANGO_MODLE is not a hango setting" in ran.stderr
    assert "did you mean HANGO_MODEL?" in ran.stderr
