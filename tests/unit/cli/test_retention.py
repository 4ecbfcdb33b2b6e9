"""``hango sessions delete`` and ``prune``: what a simulated session stored, then gone."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import update

from hango.cli import main
from hango.store import Store
from hango.store.tables import messages, sessions


def hango(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def stored(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> tuple[str, ...]:
    """Two simulated sessions, ``gone`` and ``kept``, with their history files."""
    flags = ("--database-url", f"sqlite:///{tmp_path / 'h.db'}")
    flags += ("--history-root", str(tmp_path / "history"))
    for session_id in ("gone", "kept"):
        ran = hango(capsys, "simulate", "--session", session_id, "--turns", "6", "-q", *flags)
        assert ran[0] == 0, ran[2]
    return flags


def files_of(root: Path, session_id: str) -> list[Path]:
    return [p for p in root.rglob("*") if (p.is_file() and session_id in p.relative_to(root).parts)
            or p.name == f"{session_id}.md"]  # fmt: skip


def test_delete_removes_the_session_and_its_history_files_only(
    capsys: pytest.CaptureFixture[str], stored: tuple[str, ...], tmp_path: Path
) -> None:
    root = tmp_path / "history"
    before = len(files_of(root, "gone"))
    assert before > 2 and files_of(root, "kept")  # the transcript, large results, workspace
    code, out, err = hango(capsys, "sessions", "delete", "gone", "--json", *stored)
    assert code == 0, err
    assert json.loads(out) == {"deleted": ["gone"], "history_files": before}
    assert files_of(root, "gone") == []
    code, out, _ = hango(capsys, "sessions", "list", "--json", *stored[:2])
    assert [s["id"] for s in json.loads(out)] == ["kept"]
    assert hango(capsys, "sessions", "show", "gone", *stored)[0] == 5
    assert hango(capsys, "sessions", "delete", "gone", *stored)[0] == 5  # unknown now
    assert hango(capsys, "history", "kept", *stored)[0] == 0


def test_prune_deletes_the_sessions_idle_longer_than_the_age(
    capsys: pytest.CaptureFixture[str], stored: tuple[str, ...]
) -> None:
    store = Store.from_url(stored[1])
    long_ago = datetime.now(UTC) - timedelta(days=40)
    with store.engine.begin() as conn:
        conn.execute(
            update(messages).where(messages.c.session_id == "gone").values(created_at=long_ago)
        )
        conn.execute(update(sessions).where(sessions.c.id == "gone").values(created_at=long_ago))
    store.engine.dispose()
    code, out, _ = hango(
        capsys, "sessions", "prune", "--older-than", "30d", "--dry-run", "--json", *stored
    )
    assert code == 0 and json.loads(out)["idle"] == ["gone"] and json.loads(out)["deleted"] == []
    code, out, _ = hango(capsys, "sessions", "prune", "--older-than", "30d", "--json", *stored)
    assert json.loads(out)["deleted"] == ["gone"] and json.loads(out)["history_files"] > 2
    code, out, _ = hango(capsys, "sessions", "list", "--json", *stored[:2])
    assert [s["id"] for s in json.loads(out)] == ["kept"]


@pytest.mark.parametrize("age", ["0d", "30", "-1d", "3w", "d"])
def test_a_bad_age_is_a_usage_error(capsys: pytest.CaptureFixture[str], age: str) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["sessions", "prune", f"--older-than={age}"])
    assert exited.value.code == 2
    assert "is not an age like 30d" in capsys.readouterr().err
