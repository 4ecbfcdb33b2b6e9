"""Reliability runs too heavy for the suite: ``python -m bench.reliability load|faults``.

``load``: SESSIONS sessions of TURNS turns of the scripted coding agent (``hango simulate``'s
model and user) from AGENTS agent processes at once, every summary and offload through a
4-process worker pool (``hango worker``) with the simulated summarizer, on a Redis server
of its own (a free port in 6391-6399), a fresh PostgreSQL database and a shared history
directory. Checked afterwards: every turn returned and every user message is stored (no
lost turn), no compaction fell back, and each (session, turn, range) has exactly one
committed summary that every record of it carries. Reported: turns/s and the latency of
turns that compacted through the queue against those that did not.

``faults``: each fault test of the integration suite (real worker processes, a Redis of
its own stopped, restarted or paused, SIGKILLs) run TRIALS times; a table of outcomes.

Needs redis-server and the PostgreSQL at 127.0.0.1:5432 (``HANGO_TEST_PG_ADMIN_URL``).
Results and the commands: docs/reliability.md.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hango.core.settings import Settings, load_settings
from hango.simulate.runner import build_simulation, scripted_model
from tests.integration.conftest import create_database, drop_database
from tests.integration.redis_server import own_redis
from tests.integration.worker_support import REPO_ROOT, worker_env

WORKER_CONCURRENCY = 4
SUMMARY_LATENCY = 0.05  # seconds per simulated summary, on the worker


@dataclass(frozen=True)
class SessionRun:
    session_id: str
    turn_seconds: list[float]
    compacting_turns: list[int]
    records: list[dict[str, Any]]
    stored_user_messages: int


def agent_settings(redis_url: str, database_url: str, history_root: Path) -> Settings:
    return load_settings(
        redis_url=redis_url,
        queue_secret=secrets.token_hex(32),
        database_url=database_url,
        history_root=history_root,
        worker_summarizer="simulated",
        simulated_summarizer_latency=SUMMARY_LATENCY,
        estimator="heuristic",
        queue_deadline=60.0,
    )


def run_sessions(job: tuple[dict[str, Any], list[int], int]) -> list[SessionRun]:
    """One agent process: its sessions one after another, every turn through the queue."""
    values, seeds, turns = job
    settings = load_settings(**values)
    runs = []
    for seed in seeds:
        model = scripted_model(settings, seed)
        simulation = build_simulation(
            settings, seed=seed, provider=model, session_id=f"load-{seed}", model=model
        )
        seconds, compacting, records = [], [], []
        for number in range(1, turns + 1):
            started = time.perf_counter()
            message = simulation.user.next_message(number, None)
            result = simulation.agent.loop.run_turn(simulation.session_id, message)
            seconds.append(time.perf_counter() - started)
            if result.compactions:
                compacting.append(number - 1)
            records += [r.model_dump(mode="json") for r in result.compactions]
        stored = simulation.agent.store.messages(simulation.session_id)
        users = sum(1 for m in stored if m.message.role == "user" and m.message.text())
        simulation.agent.store.engine.dispose()
        runs.append(SessionRun(simulation.session_id, seconds, compacting, records, users))
    return runs


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def load(sessions: int, turns: int, agents: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hango-load-") as scratch:
        root = Path(scratch)
        (root / "redis").mkdir()
        database = create_database()
        try:
            with own_redis(root / "redis") as server:
                settings = agent_settings(server.url, database, root / "history")
                from hango.store import Store

                store = Store.from_url(database)
                store.migrate()
                store.engine.dispose()
                worker = start_worker(settings, root / "worker.log")
                try:
                    return drive(settings, sessions, turns, agents, server.client())
                finally:
                    stop_worker(worker)
        finally:
            drop_database(database)


def start_worker(settings: Settings, log: Path) -> subprocess.Popen[bytes]:
    env = worker_env(settings)
    env["HANGO_SIMULATED_SUMMARIZER_LATENCY"] = str(SUMMARY_LATENCY)
    command = [
        str(Path(sys.executable).parent / "hango"), "worker", "-P", "prefork",
        "-c", str(WORKER_CONCURRENCY), "-Q", "summarize,offload", "-n", "load@%h",
        "--without-mingle", "--without-gossip", "-l", "warning",
    ]  # fmt: skip
    with log.open("ab") as out:
        process = subprocess.Popen(
            command, cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    time.sleep(8)  # the pool's start-up; a job published earlier waits in the queue anyway
    return process


def stop_worker(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, 9)


def drive(
    settings: Settings, sessions: int, turns: int, agents: int, redis_client: Any
) -> dict[str, Any]:
    values = {
        key: getattr(settings, key)
        for key in (
            "redis_url", "database_url", "history_root", "worker_summarizer",
            "simulated_summarizer_latency", "estimator", "queue_deadline",
        )
    }  # fmt: skip
    secret = settings.queue_secret
    values["queue_secret"] = secret.get_secret_value() if secret else None
    seeds = list(range(1, sessions + 1))
    jobs = [(values, seeds[i::agents], turns) for i in range(agents)]
    started = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(agents) as pool:
        runs = [run for batch in pool.map(run_sessions, jobs) for run in batch]
    elapsed = time.perf_counter() - started
    return report(runs, turns, elapsed, redis_client)


def report(runs: list[SessionRun], turns: int, elapsed: float, client: Any) -> dict[str, Any]:
    all_turns = [s for run in runs for s in run.turn_seconds]
    compacting = [run.turn_seconds[i] for run in runs for i in run.compacting_turns]
    plain = [
        s
        for run in runs
        for i, s in enumerate(run.turn_seconds)
        if i not in set(run.compacting_turns)
    ]
    records = [r for run in runs for r in run.records]
    summaries: dict[tuple[str, int], set[str]] = {}
    for run in runs:
        for record in run.records:
            if record.get("summary"):
                summaries.setdefault((run.session_id, record["at_turn"]), set()).add(
                    record["summary"]
                )
    committed = sum(1 for _ in client.scan_iter(match="hango:summary:*:result", count=1000))
    return {
        "sessions": len(runs),
        "turns": len(all_turns),
        "turns_expected": len(runs) * turns,
        "lost_turns": sum(turns - run.stored_user_messages for run in runs),
        "compactions": len(records),
        "summarizers": dict(Counter(r["summarizer"] for r in records)),
        "fallbacks": sum(1 for r in records if r.get("fallback_reason")),
        "turns_with_two_summaries": sum(1 for texts in summaries.values() if len(texts) > 1),
        "committed_summary_keys": committed,
        "elapsed_s": round(elapsed, 1),
        "turns_per_s": round(len(all_turns) / elapsed, 1),
        "compacting_turn_p50_ms": round(percentile(compacting, 0.5) * 1000),
        "compacting_turn_p99_ms": round(percentile(compacting, 0.99) * 1000),
        "other_turn_p50_ms": round(percentile(plain, 0.5) * 1000),
        "other_turn_p99_ms": round(percentile(plain, 0.99) * 1000),
        "turn_mean_ms": round(statistics.fmean(all_turns) * 1000) if all_turns else None,
    }


FAULT_TESTS = {
    "Redis restarted, task in flight": "tests/integration/test_redis_restart.py::"
    "test_a_worker_survives_a_redis_restart_and_loses_no_job[task-in-flight]",
    "Redis restarted, worker idle": "tests/integration/test_redis_restart.py::"
    "test_a_worker_survives_a_redis_restart_and_loses_no_job[idle]",
    "Redis hanging (SIGSTOP)": "tests/integration/test_redis_restart.py::"
    "test_a_redis_that_hangs_costs_the_turn_its_deadline_not_a_socket_timeout_more",
    "pool child SIGKILLed mid-summary": "tests/integration/test_queue_worker.py::"
    "test_pool_child_killed_mid_summary_still_commits_one_summary",
    "whole worker SIGKILLed mid-summary": "tests/integration/test_queue_worker.py::"
    "test_whole_worker_killed_mid_summary_is_redispatched_and_commits_one_summary",
    "Redis unreachable (refused)": "tests/integration/test_queue_worker.py::"
    "test_redis_down_the_turn_completes_through_the_fallback_within_the_deadline",
    "transient provider errors (back-off)": "tests/integration/test_queue_worker.py::"
    "test_a_waiting_caller_leaves_the_workers_transient_back_off_alone",
}


def faults(trials: int) -> dict[str, Any]:
    table = {}
    for fault, test in FAULT_TESTS.items():
        outcomes: Counter[str] = Counter()
        started = time.perf_counter()
        for _ in range(trials):
            done = subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test],
                cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
            )  # fmt: skip
            outcomes["passed" if done.returncode == 0 else "failed"] += 1
        table[fault] = {**outcomes, "seconds": round(time.perf_counter() - started)}
        print(fault, table[fault], flush=True)
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.reliability")
    runs = parser.add_subparsers(dest="run", required=True)
    load_parser = runs.add_parser("load")
    load_parser.add_argument("--sessions", type=int, default=200)
    load_parser.add_argument("--turns", type=int, default=20)
    load_parser.add_argument("--agents", type=int, default=4)
    fault_parser = runs.add_parser("faults")
    fault_parser.add_argument("--trials", type=int, default=5)
    args = parser.parse_args(argv)
    if args.run == "load":
        result = load(args.sessions, args.turns, args.agents)
    else:
        result = faults(args.trials)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
