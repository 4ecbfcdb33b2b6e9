"""``hango replay`` of a long transcript: linear work per call, and a scratch database fit
for a file thrown away (issue 26, item 7; ``bench/probe_replay_scale.py`` measures it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import text

from hango.cli import main
from hango.cli.replay import replay_store
from hango.core.settings import load_settings
from hango.store.buffered import BufferedStore
from hango.store.repository import Store
from hango.tokens.framing import FramedEstimator


@pytest.fixture(autouse=True)
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _short_lines(path: Path, lines: int) -> Path:
    """The probe's shape: short user and assistant lines, alternating."""
    with path.open("w", encoding="utf-8") as out:
        for n in range(lines):
            role = "user" if n % 2 == 0 else "assistant"
            content = f"line {n}" if role == "user" else [{"type": "text", "text": f"ok {n}"}]
            out.write(json.dumps({"type": role, "message": {"role": role, "content": content}}))
            out.write("\n")
    return path


def _estimated_messages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lines: int) -> int:
    """How many times the estimator is asked for a message's figure over a whole replay."""
    asked = [0]
    original = FramedEstimator.estimate_message

    def counting(self: FramedEstimator, message: object) -> int:
        asked[0] += 1
        return original(self, message)  # type: ignore[arg-type]

    monkeypatch.setattr(FramedEstimator, "estimate_message", counting)
    transcript = _short_lines(tmp_path / f"t{lines}.jsonl", lines)
    assert main(["replay", str(transcript), "--json"]) == 0
    monkeypatch.setattr(FramedEstimator, "estimate_message", original)
    return asked[0]


def test_a_replay_estimates_each_message_a_bounded_number_of_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The recorded provider checks each request against the window. With an estimator
    # object other than the agent's, the outgoing copy's running sums did not answer for
    # it and every call estimated every message so far: 600 lines asked ~90,000 times.
    small = _estimated_messages(tmp_path, monkeypatch, 300)
    large = _estimated_messages(tmp_path, monkeypatch, 600)
    capsys.readouterr()
    assert large < 2.5 * small
    assert large < 20 * 600


def _synchronous(store: Store) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(text("PRAGMA synchronous")).scalar_one())


def test_the_scratch_database_skips_syncs_and_a_given_database_keeps_them(tmp_path: Path) -> None:
    scratch_url = f"sqlite:///{tmp_path / 'scratch.db'}"
    given_url = f"sqlite:///{tmp_path / 'kept.db'}"
    scratch_store = replay_store(load_settings(database_url=scratch_url), None)
    given_store = replay_store(load_settings(database_url=given_url), given_url)
    try:
        assert _synchronous(scratch_store) == 0  # OFF: the file is deleted at the end
        assert _synchronous(given_store) == 1  # NORMAL, as every command opens it
        assert scratch_store.session("nothing") is None  # migrated: the schema is there
        # Only the scratch file, which this process alone writes, is written in batches.
        assert isinstance(scratch_store, BufferedStore)
        assert type(given_store) is Store
    finally:
        scratch_store.engine.dispose()
        given_store.engine.dispose()
