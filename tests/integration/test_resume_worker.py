"""A turn killed after dispatching its summary is finished by another process, for free.

A real agent process (``tests.turn_process``) compacts through a real Celery worker whose
summarizer is slow; the agent is SIGKILLed while the worker computes. A second process
resumes the session: same turn, same run state, same job key, so it takes the summary the
worker committed in Redis. One provider call in all, and the stored messages intact.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from sqlalchemy import Engine

from hango.compaction.record import RunState
from hango.core.messages import Message
from hango.store import Store
from tests.integration.worker_support import (
    REPO_ROOT,
    ProviderProbe,
    claimed_redis_db,
    queue_settings,
    redis_reachable,
    redis_url,
    running_worker,
    worker_env,
)

pytestmark = pytest.mark.integration

SESSION = "resumed"
SEEDED_TURNS = 12


def seed(store: Store) -> None:
    """Twelve finished turns, large enough that the next request is over the trigger."""
    store.ensure_session(SESSION, "test-model")
    for turn in range(1, SEEDED_TURNS + 1):
        run_id = store.start_run(SESSION, turn, RunState())
        store.append_message(SESSION, turn, Message(role="user", content=f"q{turn} " * 150))
        store.append_message(SESSION, turn, Message(role="assistant", content=f"a{turn} " * 150))
        store.finish_run(run_id, "completed")


def agent_command(database_url: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "tests.turn_process", database_url, SESSION, *extra]


def test_a_turn_killed_after_dispatch_is_finished_by_another_process_from_redis(
    pg_url: str, pg_engine: Engine, tmp_path: Path
) -> None:
    if not redis_reachable(redis_url(0)):
        pytest.fail(f"Redis is not reachable at {redis_url(0)}")
    store = Store(pg_engine)
    seed(store)
    with claimed_redis_db() as db:
        url = redis_url(db)
        settings = queue_settings(
            redis=url,
            database_url=pg_url,
            history_root=tmp_path / "history",
            history_backend="postgres",
        )
        env = {
            **worker_env(settings),
            "HANGO_HOME": str(tmp_path / "home"),
            "HANGO_MODEL": "test-model",
            "HANGO_MODEL_PROFILES": json.dumps({"test-model": {"max_input_tokens": 4000}}),
            "HANGO_SESSION_LEASE_TTL": "2",
        }
        probe = ProviderProbe(redis.Redis.from_url(url))
        with running_worker(settings, tmp_path / "worker.log"):
            probe.delay_every_call(4)  # the summary takes a while: the agent waits on it
            first = subprocess.Popen(agent_command(pg_url, "1"), cwd=REPO_ROOT, env=env)
            try:
                probe.wait_for_call(timeout=60)  # dispatched, and the worker is on it
            finally:
                os.kill(first.pid, signal.SIGKILL)
                first.wait(timeout=30)
            unfinished = store.latest_run(SESSION)
            assert unfinished is not None and unfinished.status == "running"

            second = subprocess.run(
                agent_command(pg_url, "0", "resume"),
                cwd=REPO_ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=180,
                check=False,
            )

        assert second.returncode == 0, second.stderr[-3000:]
        assert second.stdout.split() == [str(SEEDED_TURNS + 1)]  # the same turn, resumed
        assert probe.calls() == 1  # the summary the dead process paid for, reused

    runs = store.runs(SESSION)
    assert [(r.turn, r.status) for r in runs][-1] == (SEEDED_TURNS + 1, "completed")
    assert len(runs) == SEEDED_TURNS + 1  # no new turn was started
    (record,) = runs[-1].state.compactions
    assert record.summarizer == "worker:llm" and record.fallback_reason is None
    stored = store.messages(SESSION)
    assert [m.seq for m in stored] == list(range(1, len(stored) + 1))
    resumed = [m.message for m in stored if m.turn == SEEDED_TURNS + 1]
    assert [m.role for m in resumed] == ["user", "assistant", "user", "assistant"]
    assert resumed[0].text() == "task 0 from this process"  # stored once, not twice
