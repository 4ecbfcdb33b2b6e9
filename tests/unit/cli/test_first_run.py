"""What a new user sees on a first run, at the default log level."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
