"""``hango simulate`` on the real stack: PostgreSQL store and history, and the Celery queue."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hango.cli import main
from hango.cli.errors import EXIT_QUEUE
from tests.integration.worker_support import (
    FAST_LIMITS,
    TEST_QUEUE_SECRET,
    claimed_redis_db,
    queue_settings,
    redis_reachable,
    redis_url,
    running_worker,
)

pytestmark = pytest.mark.integration


def hango(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(autouse=True)
def stack_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HANGO_HISTORY_BACKEND", "postgres")
    monkeypatch.setenv("HANGO_ESTIMATOR", "heuristic")
    monkeypatch.setenv("HANGO_MODEL", "cli-pg-model")
    monkeypatch.delenv("HANGO_REDIS_URL", raising=False)


def test_simulate_on_postgres_then_inspect_it(
    capsys: pytest.CaptureFixture[str], pg_url: str
) -> None:
    code, out, err = hango(
        capsys, "simulate", "--turns", "5", "--max-input-tokens", "8000", "--json",
        "--database-url", pg_url,
    )  # fmt: skip
    assert code == 0, err
    report = json.loads(out)
    session = report["session_id"]

    _, shown, _ = hango(capsys, "sessions", "show", session, "--database-url", pg_url, "--json")
    _, history, _ = hango(capsys, "history", session, "--database-url", pg_url)

    assert report["compactions"] and report["summary_calls"] >= 1
    assert "in the database" in report["history_file"]
    details = json.loads(shown)
    assert details["compaction_records"] == report["compactions"]
    assert details["compactions"] == len(report["compactions"])
    assert "/work/src/" in history and f"{session}" in json.dumps(details)


def _queue_env(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    monkeypatch.setenv("HANGO_REDIS_URL", url)
    monkeypatch.setenv("HANGO_QUEUE_SECRET", TEST_QUEUE_SECRET)
    for name, value in FAST_LIMITS.items():
        monkeypatch.setenv(f"HANGO_{name.upper()}", str(value))


def test_simulate_queue_gets_its_summaries_from_the_worker(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    pg_url: str,
    tmp_path: Path,
) -> None:
    if not redis_reachable(redis_url(0)):
        pytest.fail(f"Redis is not reachable at {redis_url(0)}")
    # A database of our own: a worker of another test run on a shared one would take our
    # tasks and read its own PostgreSQL database.
    with claimed_redis_db() as db:
        _simulate_through_the_worker(capsys, monkeypatch, pg_url, tmp_path, redis_url(db))


def _simulate_through_the_worker(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    pg_url: str,
    tmp_path: Path,
    url: str,
) -> None:
    settings = queue_settings(
        redis=url,
        database_url=pg_url,
        history_root=tmp_path / "history",
        history_backend="postgres",
        worker_summarizer="simulated",
    )
    _queue_env(monkeypatch, url)

    with running_worker(settings, tmp_path / "worker.log"):
        code, out, err = hango(
            capsys, "simulate", "--queue", "--turns", "5", "--max-input-tokens", "8000",
            "--json", "--database-url", pg_url,
        )  # fmt: skip

    assert code == 0, err
    report: dict[str, Any] = json.loads(out)
    assert report["queue"] is True and report["compactions"]
    # Every summary came back from the worker: none fell back, none was made in-process.
    assert [(c["summarizer"], c["fallback_reason"]) for c in report["compactions"]] == [
        ("worker:llm", None)
    ] * len(report["compactions"])
    assert report["summary_calls"] == 0
    assert report["summaries"] == {
        "from_worker": len(report["compactions"]),
        "in_process": 0,
        "fell_back": 0,
        "fallback_reasons": {},
    }


def test_simulate_queue_without_a_worker_says_so(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, pg_url: str
) -> None:
    if not redis_reachable(redis_url(0)):
        pytest.fail(f"Redis is not reachable at {redis_url(0)}")
    with claimed_redis_db() as db:  # ours alone: no worker of another run listens on it
        _queue_env(monkeypatch, redis_url(db))
        code, out, err = hango(capsys, "simulate", "--queue", "--database-url", pg_url)

    assert code == EXIT_QUEUE and out == ""
    assert "no Celery worker answered" in err and err.count("\n") == 1
