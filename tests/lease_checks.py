"""Checks shared by the SQLite and PostgreSQL tests of one turn at a time per session."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hango.core.messages import ToolResultBlock
from hango.store import Store

REPO_ROOT = Path(__file__).resolve().parents[1]


def run_processes(
    database_url: str, session_id: str, processes: int, turns: int, home: Path
) -> list[int]:
    """Start ``processes`` agent processes at once on one session; the turns they ran."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HANGO_")}
    env.update(
        HANGO_HOME=str(home),
        HANGO_SESSION_BUSY_TIMEOUT="120",
        HANGO_SESSION_LEASE_TTL="5",
        PYTHONPATH=str(REPO_ROOT),
    )
    started = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.turn_process", database_url, session_id, str(turns)],
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(processes)
    ]
    ran: list[int] = []
    for process in started:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err[-2000:]
        ran.extend(int(line) for line in out.split())
    return ran


def assert_turns_serialized(store: Store, session_id: str, turns: int) -> None:
    """Turns 1..N, each stored whole and in order: user, tool call, its result, answer."""
    runs = store.runs(session_id)
    assert [run.turn for run in runs] == list(range(1, turns + 1))
    assert {run.status for run in runs} == {"completed"}
    stored = store.messages(session_id)
    assert [m.seq for m in stored] == list(range(1, 4 * turns + 1))  # nothing lost
    for turn in range(1, turns + 1):
        own = stored[4 * (turn - 1) : 4 * turn]  # contiguous: no other turn interleaved
        assert [m.turn for m in own] == [turn] * 4
        user, call, result, answer = (m.message for m in own)
        assert user.role == "user" and user.text().startswith("task ")
        (use,) = call.tool_uses()
        (block,) = result.blocks()
        assert isinstance(block, ToolResultBlock) and block.tool_use_id == use.id
        assert answer.role == "assistant" and not list(answer.tool_uses())
