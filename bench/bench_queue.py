"""The worker system's overhead: the queue round trip, pool throughput, single-flight.

It starts its own ``celery -A hango_worker worker -P prefork -c 2`` subprocess on a Redis
of its own: a ``redis-server`` it starts on a free port and stops at the end (nothing of
anyone else's is touched), or the database ``HANGO_BENCH_REDIS_URL`` names, which must be
empty when the bench starts (it refuses otherwise) and from which it deletes, at the end,
only the keys that appeared during its run (never ``FLUSHDB``). The store is SQLite and
the history a local directory, in a temporary directory. The summarizer provider answers
at once (it only counts its calls in Redis), so every figure is the cost of the path, not
of a model:

- **round trip**: one ``summarize`` through ``QueuedSummarizer`` (publish, worker picks it
  up, reloads the range from the store, commits to Redis, which wakes the caller) vs
  the in-process ``LLMSummarizer`` with the same provider; and a cached call (the
  result already committed: what an overflow retry in the same turn pays);
- **throughput**: tasks per second for the 2-process pool, publishing distinct jobs in a
  burst and waiting for every result;
- **single-flight**: 50 threads asking for the same (session, turn) at once: provider
  calls per key (1 is the invariant) and the callers' latency.

Without a reachable Redis it prints why and returns. ``--json PATH`` also writes the
figures (``queue_p50_ms``, ``queue_p99_ms``, ``tasks_per_s``, ...) to PATH.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import redis

from hango.compaction.jobs import SummaryJob
from hango.core.messages import Message, StoredMessage
from hango.core.settings import Settings
from hango.history.local import LocalHistory
from hango.queue import QueuedSummarizer
from hango.queue.celery_config import SUMMARIZE_TASK
from hango.queue.dispatch import CeleryDispatcher, producer_app
from hango.queue.keys import JobKey
from hango.queue.queued import job_key, summarize_kwargs
from hango.store import Store
from hango.summarizers.llm import LLMSummarizer
from hango.summarizers.offload import InlineOffloader
from hango.wiring.queue import make_queued_ports
from tests.integration.redis_server import own_redis, redis_server_available
from tests.integration.worker_support import (
    CountingProvider,
    ProviderProbe,
    WorkerProcess,
    queue_settings,
    redis_reachable,
    wait_until,
)

REDIS_URL = os.environ.get("HANGO_BENCH_REDIS_URL")
SESSION = "bench-queue"
MESSAGES = 20
ROUND_TRIPS = 200
BURST = 400
CALLERS = 50
SINGLE_FLIGHT_KEYS = 5


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_queue", description=__doc__)
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the figures as JSON")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-queue-") as tmp, bench_redis(Path(tmp)) as url:
        if url is None:
            return
        figures = bench(url, Path(tmp))
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
        print(f"\nfigures written to {args.json}")


@contextlib.contextmanager
def bench_redis(directory: Path) -> Iterator[str | None]:
    """A Redis URL only this run writes to (None, with the reason printed, if there is none)."""
    if REDIS_URL is None:
        if not redis_server_available():
            print("bench_queue skipped: no redis-server to start (or set HANGO_BENCH_REDIS_URL)")
            yield None
            return
        (directory / "redis").mkdir()
        with own_redis(directory / "redis", append_only=False) as server:
            yield server.url
        return
    if not redis_reachable(REDIS_URL):
        print(f"bench_queue skipped: Redis is not reachable at {REDIS_URL}")
        yield None
        return
    client = redis.Redis.from_url(REDIS_URL)
    if client.dbsize():
        print(f"bench_queue refused: {REDIS_URL} holds keys; name an empty database of its own")
        yield None
        return
    try:
        yield REDIS_URL
    finally:
        # Only what appeared during the run: the database was empty when it started.
        keys = list(client.scan_iter(count=1000))
        for start in range(0, len(keys), 1000):
            client.delete(*keys[start : start + 1000])


def bench(url: str, root: Path) -> dict[str, object]:
    settings = queue_settings(
        redis=url, database_url=f"sqlite:///{root / 'bench.db'}", history_root=root / "history"
    )
    evicted = seed_store(settings)
    worker = WorkerProcess(settings, root / "worker.log", name="bench", concurrency=2)
    try:
        worker.start()
        return run(settings, redis.Redis.from_url(url), evicted)
    finally:
        worker.stop()


def seed_store(settings: Settings) -> tuple[StoredMessage, ...]:
    store = Store.from_url(settings.database_url)
    store.migrate()
    store.ensure_session(SESSION, "bench-model")
    for i in range(MESSAGES):
        role = "user" if i % 2 == 0 else "assistant"
        store.append_message(SESSION, 1, Message(role=role, content=f"{role} {i}: " + "word " * 50))
    messages = tuple(store.messages(SESSION))
    store.engine.dispose()
    return messages


def job(evicted: tuple[StoredMessage, ...], turn: int) -> SummaryJob:
    return SummaryJob(
        session_id=SESSION,
        turn=turn,
        from_seq=evicted[0].seq,
        to_seq=evicted[-1].seq,
        previous_summary=None,
        evicted=evicted,
        model="bench-summarizer",
    )


def run(
    settings: Settings, client: redis.Redis, evicted: tuple[StoredMessage, ...]
) -> dict[str, object]:
    history = LocalHistory(settings.history_root)
    inline = LLMSummarizer(CountingProvider(client))
    queued, _ = make_queued_ports(
        settings,
        history=history,
        fallback_summarizer=inline,
        fallback_offloader=InlineOffloader(history),
    )
    probe = ProviderProbe(client)
    turns = iter(range(2, 1_000_000))

    queued.summarize(job(evicted, next(turns)))  # warm the pool children
    queue_ms = timed(lambda: checked(queued, job(evicted, next(turns))), ROUND_TRIPS)
    cached_job = job(evicted, next(turns))
    queued.summarize(cached_job)
    cached_ms = timed(lambda: checked(queued, cached_job), ROUND_TRIPS)
    inline_ms = timed(lambda: inline.summarize(job(evicted, next(turns))), ROUND_TRIPS)
    print_round_trips(queue_ms, cached_ms, inline_ms)

    first_turn = next(turns)
    rate = burst_rate(settings, client, evicted, first_turn)
    for _ in range(BURST):
        next(turns)
    print(f"\npool throughput (2 prefork processes, {BURST} distinct jobs): {rate:,.0f} tasks/s")

    calls, latencies = single_flight(queued, probe, evicted, turns)
    print(
        f"\nsingle-flight, {CALLERS} concurrent callers x {SINGLE_FLIGHT_KEYS} keys: provider "
        f"calls per key {calls}; caller latency p50 {pct(latencies, 50):.1f} ms, "
        f"p99 {pct(latencies, 99):.1f} ms"
    )
    return {
        "queue_p50_ms": round(pct(queue_ms, 50), 2),
        "queue_p99_ms": round(pct(queue_ms, 99), 2),
        "tasks_per_s": round(rate, 1),
        "cached_p50_ms": round(pct(cached_ms, 50), 2),
        "in_process_p50_ms": round(pct(inline_ms, 50), 2),
        "single_flight_calls_per_key": calls,
        "single_flight_p50_ms": round(pct(latencies, 50), 1),
        "single_flight_p99_ms": round(pct(latencies, 99), 1),
        "round_trips": ROUND_TRIPS,
        "burst": BURST,
    }


def checked(queued: QueuedSummarizer, summary_job: SummaryJob) -> None:
    result = queued.summarize(summary_job)
    if result.fallback_reason is not None:
        raise RuntimeError(f"the queue fell back: {result.fallback_reason}")


def timed(call: Callable[[], object], runs: int) -> list[float]:
    durations = []
    for _ in range(runs):
        started = time.perf_counter()
        call()
        durations.append((time.perf_counter() - started) * 1000)
    return durations


def pct(values: list[float], percentile: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[percentile - 1]


def print_round_trips(
    queue_ms: list[float], cached_ms: list[float], inline_ms: list[float]
) -> None:
    print(f"round trip, zero-latency summarizer, {ROUND_TRIPS} sequential calls each (ms):")
    print(f"{'path':<34}{'p50':>9}{'p99':>9}{'p50 / in-process':>19}")
    base = pct(inline_ms, 50)
    for name, values in (
        ("in-process (LLMSummarizer)", inline_ms),
        ("queue: publish -> worker -> Redis", queue_ms),
        ("queue: result already committed", cached_ms),
    ):
        ratio = pct(values, 50) / base
        print(f"{name:<34}{pct(values, 50):>9.2f}{pct(values, 99):>9.2f}{ratio:>18.1f}x")


def burst_rate(
    settings: Settings, client: redis.Redis, evicted: tuple[StoredMessage, ...], first_turn: int
) -> float:
    app = producer_app(settings)
    dispatcher = CeleryDispatcher(app)
    jobs = [summarize_kwargs(job(evicted, first_turn + i)) for i in range(BURST)]
    keys = [job_key("summary", kwargs) for kwargs in jobs]
    started = time.perf_counter()
    for kwargs in jobs:
        dispatcher.dispatch(SUMMARIZE_TASK, kwargs, expires=60)
    wait_until(lambda: all_committed(client, keys), 120, "the pool did not finish the burst")
    elapsed = time.perf_counter() - started
    app.close()
    return BURST / elapsed


def all_committed(client: redis.Redis, keys: list[JobKey]) -> bool:
    return int(client.exists(*[key.result for key in keys])) == len(keys)


def single_flight(
    queued: QueuedSummarizer,
    probe: ProviderProbe,
    evicted: tuple[StoredMessage, ...],
    turns: Iterator[int],
) -> tuple[list[int], list[float]]:
    calls: list[int] = []
    latencies: list[float] = []
    for _ in range(SINGLE_FLIGHT_KEYS):
        summary_job = job(evicted, next(turns))
        before = probe.calls()
        barrier = threading.Barrier(CALLERS)

        def call(
            summary_job: SummaryJob = summary_job, barrier: threading.Barrier = barrier
        ) -> float:
            barrier.wait()
            started = time.perf_counter()
            checked(queued, summary_job)
            return (time.perf_counter() - started) * 1000

        with ThreadPoolExecutor(max_workers=CALLERS) as executor:
            latencies.extend(executor.map(lambda _: call(), range(CALLERS)))
        calls.append(probe.calls() - before)
    return calls, latencies


if __name__ == "__main__":
    main()
