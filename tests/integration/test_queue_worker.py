"""The worker system against a real ``celery -A hango_worker worker -P prefork`` process.

Real Redis (a database of its own), real PostgreSQL (the worker reloads the evicted range
by sequence number), the real local history directory shared by the agent and the worker.
One worker process serves the whole module; the test that kills the whole worker starts
its replacement. Limits are small (lease 1.5 s, enqueue mark 2 s, visibility timeout 8 s)
so recovery paths run in seconds.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from hango.compaction.jobs import OffloadJob, SummaryJob, SummaryResult
from hango.compaction.record import CompactionRecord
from hango.core.errors import ContextOverflowError, LeaseBusyError
from hango.core.messages import Message, StoredMessage
from hango.core.settings import Settings
from hango.history.local import LocalHistory
from hango.history.paths import conversation_history_path, section_marker
from hango.providers.scripted import ScriptedProvider, text_reply
from hango.queue import QueuedOffloader, QueuedSummarizer
from hango.queue.celery_config import OFFLOAD_TASK
from hango.queue.dispatch import CeleryDispatcher, producer_app
from hango.queue.keys import JobKey
from hango.queue.lease import Lease, heartbeat
from hango.queue.results import ResultCache
from hango.queue.signing import ResultSigner
from hango.store import Store
from hango.summarizers.llm import LLMSummarizer
from hango.summarizers.offload import InlineOffloader, offload_key
from hango.wiring.queue import make_queued_ports
from tests.agent_support import build
from tests.integration.worker_support import (
    FAST_LIMITS,
    TEST_QUEUE_SECRET,
    ProviderProbe,
    WorkerProcess,
    claimed_redis_db,
    clear_job_keys,
    closed_port,
    queue_settings,
    redis_url,
    wait_until,
)

pytestmark = pytest.mark.integration

SUMMARY_MODEL = "summ-model"
INLINE_TEXT = "Inline briefing: the earlier work, summarized in the agent process itself."


# -- fixtures ------------------------------------------------------------------------------


@dataclass
class Pool:
    """The module's worker; a test that kills it starts the replacement here."""

    settings: Settings
    logs: Path
    current: WorkerProcess | None = None
    started: int = 0

    def start(self) -> WorkerProcess:
        self.started += 1
        log = self.logs / f"worker-{self.started}.log"
        self.current = WorkerProcess(self.settings, log, name=f"qw{self.started}").start()
        return self.current

    def worker(self) -> WorkerProcess:
        assert self.current is not None
        return self.current


@pytest.fixture(scope="module")
def redis_db() -> Iterator[int]:
    with claimed_redis_db() as db:
        yield db


@pytest.fixture(scope="module")
def client(redis_db: int) -> redis.Redis:
    return redis.Redis.from_url(redis_url(redis_db))


@pytest.fixture(scope="module")
def settings(redis_db: int, pg_url: str, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return queue_settings(
        redis=redis_url(redis_db),
        database_url=pg_url,
        history_root=tmp_path_factory.mktemp("history"),
    )


@pytest.fixture(scope="module")
def pool(
    settings: Settings, client: redis.Redis, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Pool]:
    pool = Pool(settings, tmp_path_factory.mktemp("worker-logs"))
    pool.start()
    yield pool
    pool.worker().stop()


@pytest.fixture
def probe(client: redis.Redis, pool: Pool) -> ProviderProbe:
    if not pool.worker().alive():
        pool.start()
    clear_job_keys(client)
    return ProviderProbe(client)


@dataclass
class Ports:
    summarizer: QueuedSummarizer
    offloader: QueuedOffloader
    inline: ScriptedProvider
    history: LocalHistory


def make_ports(settings: Settings) -> Ports:
    inline = ScriptedProvider(fallback=lambda request: text_reply(INLINE_TEXT))
    history = LocalHistory(settings.history_root)
    summarizer, offloader = make_queued_ports(
        settings,
        history=history,
        fallback_summarizer=LLMSummarizer(inline),
        fallback_offloader=InlineOffloader(history),
    )
    return Ports(summarizer, offloader, inline, history)


@pytest.fixture
def ports(settings: Settings) -> Ports:
    return make_ports(settings)


def seed(store: Store, session_id: str, count: int = 6) -> tuple[StoredMessage, ...]:
    store.ensure_session(session_id, "test-model")
    for i in range(count):
        role = "user" if i % 2 == 0 else "assistant"
        store.append_message(session_id, 1, Message(role=role, content=f"{role} message {i}"))
    return tuple(store.messages(session_id))


def summary_job(session_id: str, evicted: tuple[StoredMessage, ...], turn: int = 2) -> SummaryJob:
    return SummaryJob(
        session_id=session_id,
        turn=turn,
        from_seq=evicted[0].seq,
        to_seq=evicted[-1].seq,
        previous_summary=None,
        evicted=evicted,
        model=SUMMARY_MODEL,
    )


def offload_job(session_id: str, evicted: tuple[StoredMessage, ...], turn: int = 2) -> OffloadJob:
    return OffloadJob(
        session_id=session_id,
        turn=turn,
        from_seq=evicted[0].seq,
        to_seq=evicted[-1].seq,
        evicted=evicted,
    )


def concurrently(count: int, call: Callable[[], Any]) -> list[Any]:
    barrier = threading.Barrier(count)

    def run() -> Any:
        barrier.wait()
        return call()

    with ThreadPoolExecutor(max_workers=count) as executor:
        futures = [executor.submit(run) for _ in range(count)]
        return [future.result(timeout=60) for future in futures]


def section_count(history: LocalHistory, job: OffloadJob) -> int:
    text = history.read(conversation_history_path(job.session_id))
    return text.splitlines().count(section_marker(offload_key(job)))


RESTORE_LOCK = "unacked_mutex"  # kombu's lock around a sweep of unacknowledged messages


def wait_for_idle_broker(client: redis.Redis, timeout: float = 30.0) -> None:
    """Every published message consumed and acknowledged (orphans included)."""
    state: dict[str, int] = {}

    def idle() -> bool:
        state.update(
            summarize=client.llen("summarize"),
            offload=client.llen("offload"),
            unacked=client.hlen("unacked"),
            restore_lock_ms=client.pttl(RESTORE_LOCK),
        )
        return state["summarize"] == state["offload"] == state["unacked"] == 0

    try:
        wait_until(idle, timeout, "messages are still queued or unacknowledged")
    except AssertionError as stuck:
        raise AssertionError(f"{stuck}: {state}") from None


def restore_lock_expiry_ms(db: int, timeout: float = 5.0) -> int:
    """The expiry a running worker gives its sweep lock, read from the command it sends."""
    deadline = time.monotonic() + timeout
    watcher = redis.Redis.from_url(redis_url(db), socket_timeout=timeout)
    try:
        with watcher.monitor() as monitor, contextlib.suppress(redis.TimeoutError):
            while time.monotonic() < deadline:
                sent = monitor.next_command()
                words = sent["command"].split()
                if sent["db"] == db and words[:2] == ["SET", RESTORE_LOCK]:
                    return int(words[words.index("PX") + 1])
    finally:
        watcher.close()
    raise AssertionError(f"no sweep took the lock within {timeout:g} s")


# -- Redis primitives --------------------------------------------------------------------


def test_lease_is_exclusive_kept_alive_and_released_only_by_its_holder(
    client: redis.Redis,
) -> None:
    key = "hango:test:lease"
    client.delete(key)
    with held_lease(client, key, ttl_seconds=0.3) as lease:
        with pytest.raises(LeaseBusyError), held_lease(client, key, ttl_seconds=0.3):
            pass
        time.sleep(0.8)  # well past the TTL: only the heartbeat keeps it
        assert client.get(key) == lease.token.encode()
        assert not lease.lost.is_set()
    assert client.exists(key) == 0

    client.set(key, "someone-else", px=5000)
    with pytest.raises(LeaseBusyError), held_lease(client, key, ttl_seconds=1):
        pass
    assert client.get(key) == b"someone-else"


def test_result_commit_keeps_the_first_writer(client: redis.Redis) -> None:
    cache = ResultCache(client, result_ttl=60, signer=ResultSigner(TEST_QUEUE_SECRET))
    key = JobKey("summary", "s-commit", 1)
    client.delete(key.result)
    assert cache.commit(key, "first") == "first"
    assert cache.commit(key, "second") == "first"
    assert cache.get(key) == "first"
    assert 0 < client.pttl(key.result) <= 60_000


def test_a_task_takes_the_lease_or_the_result_and_releases_as_it_commits(
    client: redis.Redis,
) -> None:
    cache = ResultCache(client, result_ttl=60, signer=ResultSigner(TEST_QUEUE_SECRET))
    key = JobKey("summary", "s-claim", 1)
    client.delete(key.result, key.lease)
    mine, theirs = Lease(client, key.lease, 5), Lease(client, key.lease, 5)

    assert cache.result_or_lease(key, mine) is None
    assert client.get(key.lease) == mine.token.encode()
    with pytest.raises(LeaseBusyError):
        cache.result_or_lease(key, theirs)

    assert cache.commit_and_release(key, "summary text", mine) == "summary text"
    assert client.exists(key.lease) == 0
    assert cache.result_or_lease(key, theirs) == "summary text"
    assert client.exists(key.lease) == 0, "a done job is not leased again"
    assert cache.commit_and_release(key, "late duplicate", theirs) == "summary text"


# -- the normal path -------------------------------------------------------------------------


def test_summary_comes_from_the_worker_and_is_reused_without_a_second_call(
    probe: ProviderProbe, ports: Ports, pg_store: Store, settings: Settings
) -> None:
    evicted = seed(pg_store, "s-normal")
    job = summary_job("s-normal", evicted)

    first = ports.summarizer.summarize(job)

    assert first.summarizer == "worker:llm"
    assert first.fallback_reason is None
    assert first.text.startswith("Briefing #1 ")
    assert SUMMARY_MODEL in first.text
    assert probe.calls() == 1
    assert ports.inline.requests == []

    again = ports.summarizer.summarize(job)
    elsewhere = make_ports(settings).summarizer.summarize(job)  # another agent process
    assert again == first
    assert elsewhere == first
    assert probe.calls() == 1


def test_fifty_callers_of_one_turn_get_one_summary_from_one_provider_call(
    probe: ProviderProbe, ports: Ports, pg_store: Store
) -> None:
    job = summary_job("s-fifty", seed(pg_store, "s-fifty"))
    probe.delay_every_call(0.5)  # every caller arrives while the one call is in flight

    results: list[SummaryResult] = concurrently(50, lambda: ports.summarizer.summarize(job))

    assert len({r.text for r in results}) == 1
    assert all(r.summarizer == "worker:llm" and r.fallback_reason is None for r in results)
    assert probe.calls() == 1
    assert ports.inline.requests == []


def test_offload_writes_one_section_despite_concurrent_callers_and_a_duplicate_task(
    probe: ProviderProbe, ports: Ports, pg_store: Store, client: redis.Redis, settings: Settings
) -> None:
    evicted = seed(pg_store, "s-offload")
    job = offload_job("s-offload", evicted)

    paths = concurrently(20, lambda: ports.offloader.offload(job))
    # A duplicate message, as a broker redelivery would produce.
    CeleryDispatcher(producer_app(settings)).dispatch(
        OFFLOAD_TASK,
        {"session_id": "s-offload", "turn": 2, "from_seq": 1, "to_seq": 6},
        expires=30,
    )
    wait_for_idle_broker(client)

    assert set(paths) == {conversation_history_path("s-offload")}
    assert section_count(ports.history, job) == 1
    text = ports.history.read(paths[0])
    for stored in evicted:
        assert text.count(stored.message.text()) == 1


def test_transient_provider_errors_are_retried_on_the_worker(
    probe: ProviderProbe, ports: Ports, pg_store: Store
) -> None:
    job = summary_job("s-transient", seed(pg_store, "s-transient"))
    probe.fail_next_calls(1)
    # The worker's back-off (1-2 s) plus the call may pass the fast 4 s summary deadline.
    ports.summarizer.timeout = FAST_LIMITS["queue_deadline"]

    result = ports.summarizer.summarize(job)

    assert result.fallback_reason is None
    assert result.text.startswith("Briefing #2 ")
    assert probe.calls() == 2
    assert ports.inline.requests == []


def test_a_waiting_caller_leaves_the_workers_transient_back_off_alone(
    probe: ProviderProbe, ports: Ports, pg_store: Store
) -> None:
    # Back-offs of at least 1 s and 2 s; the caller's publish mark lasts only 2 s (its
    # enqueue TTL), so a caller that published again once the mark expired would have the
    # third call made about 2 s after the first, in the middle of the back-off.
    job = summary_job("s-backoff", seed(pg_store, "s-backoff"))
    probe.fail_next_calls(2)
    # Two back-offs (up to 2 s and 4 s) pass the fast 4 s summary deadline: this test is
    # about the back-off, so the caller waits for it.
    ports.summarizer.timeout = FAST_LIMITS["queue_deadline"]

    started = time.monotonic()
    result = ports.summarizer.summarize(job)
    elapsed = time.monotonic() - started

    assert result.fallback_reason is None
    assert result.text.startswith("Briefing #3 ")
    assert probe.calls() == 3
    assert elapsed >= 1.0 + 2.0, "the third call came before the back-off ended"


# -- a worker dies mid-summary -----------------------------------------------------------------


def test_pool_child_killed_mid_summary_still_commits_one_summary(
    probe: ProviderProbe, ports: Ports, pg_store: Store, pool: Pool, client: redis.Redis
) -> None:
    evicted = seed(pg_store, "s-child")
    path = ports.offloader.offload(offload_job("s-child", evicted))
    job = summary_job("s-child", evicted)
    probe.slow_next_calls(1, seconds=4.0)

    with ThreadPoolExecutor(max_workers=5) as executor:
        futures = [executor.submit(ports.summarizer.summarize, job) for _ in range(5)]
        child = probe.wait_for_call()
        assert child != pool.worker().pid(), "the provider runs in a pool child"
        os.kill(child, signal.SIGKILL)
        results = [future.result(timeout=60) for future in futures]

    assert len({r.text for r in results}) == 1
    assert results[0].text.startswith("Briefing #2 ")
    assert results[0].fallback_reason is None
    assert probe.calls() == 2  # the killed call and the one that committed
    assert pool.worker().alive()
    assert ports.offloader.offload(offload_job("s-child", evicted)) == path
    wait_for_idle_broker(client)
    assert probe.calls() == 2
    assert section_count(ports.history, offload_job("s-child", evicted)) == 1


def test_whole_worker_killed_mid_summary_is_redispatched_and_commits_one_summary(
    probe: ProviderProbe,
    ports: Ports,
    pg_store: Store,
    pool: Pool,
    client: redis.Redis,
    redis_db: int,
) -> None:
    evicted = seed(pg_store, "s-whole")
    ports.offloader.offload(offload_job("s-whole", evicted))
    job = summary_job("s-whole", evicted)
    probe.slow_next_calls(1, seconds=4.0)
    # A summary is waited for at most the summarizer's deadline (4 s in the fast limits,
    # which the worker's time limits must stay above); recovering from a dead worker
    # (lease, publish mark, a new worker's start-up, the 4 s call again) takes longer.
    ports.summarizer.timeout = FAST_LIMITS["queue_deadline"]
    # The worker dies inside a sweep of unacknowledged messages, holding kombu's lock
    # (about a millisecond per sweep by chance; every time here). Its expiry, the one a
    # running worker gives it, must end before the orphan below is due (the visibility
    # timeout): with kombu's default of 300 s it would not come back for five minutes.
    lock_ms = restore_lock_expiry_ms(redis_db)
    assert lock_ms == FAST_LIMITS["queue_restore_interval"] * 1000

    with ThreadPoolExecutor(max_workers=5) as executor:
        futures = [executor.submit(ports.summarizer.summarize, job) for _ in range(5)]
        probe.wait_for_call()
        client.set(RESTORE_LOCK, "the killed worker's sweep", px=lock_ms)
        pool.worker().kill()
        assert client.hlen("unacked") == 1, "the killed worker's message is left unacked"
        pool.start()
        results = [future.result(timeout=60) for future in futures]

    assert len({r.text for r in results}) == 1
    assert results[0].text.startswith("Briefing #2 ")
    assert results[0].fallback_reason is None
    assert probe.calls() == 2
    # The orphaned message comes back after the visibility timeout, finds the committed
    # summary and stops without calling the provider.
    wait_for_idle_broker(client, timeout=30)
    assert probe.calls() == 2
    assert ports.summarizer.summarize(job) == results[0]
    assert section_count(ports.history, offload_job("s-whole", evicted)) == 1


# -- the queue cannot deliver: the turn falls back ---------------------------------------------


def test_worker_failure_makes_every_caller_fall_back_at_once(
    probe: ProviderProbe, ports: Ports, pg_store: Store
) -> None:
    evicted = seed(pg_store, "s-missing", count=4)
    # The job names messages the store does not hold: the worker fails for good.
    job = summary_job("s-missing", evicted).model_copy(update={"to_seq": 40})

    started = time.monotonic()
    result = ports.summarizer.summarize(job)
    elapsed = time.monotonic() - started

    assert result.fallback_reason is not None
    assert result.fallback_reason.startswith("worker_failed: ")
    assert "MissingRangeError" in result.fallback_reason
    assert result.text == INLINE_TEXT
    assert elapsed < 10, "the recorded failure must not wait for the 30 s deadline"
    assert probe.calls() == 0
    # The fallback result is the committed one: the turn's next call reuses it.
    assert ports.summarizer.summarize(job) == result
    assert len(ports.inline.requests) == 1


def test_no_worker_listening_falls_back_at_the_deadline_and_commits_that_summary(
    pg_store: Store, settings: Settings
) -> None:
    with claimed_redis_db() as idle_db:  # a database no worker listens on
        idle = redis.Redis.from_url(redis_url(idle_db))
        lonely = settings.model_copy(
            update={"redis_url": redis_url(idle_db), "queue_deadline": 1.5}
        )
        ports = make_ports(lonely)
        job = summary_job("s-deadline", seed(pg_store, "s-deadline"))

        started = time.monotonic()
        result = ports.summarizer.summarize(job)
        elapsed = time.monotonic() - started

        assert result.fallback_reason is not None
        assert result.fallback_reason.startswith("queue_deadline: ")
        assert result.text == INLINE_TEXT
        assert 1.5 <= elapsed < 5
        assert idle.llen("summarize") == 1, "exactly one task was published"
        assert make_ports(lonely).summarizer.summarize(job) == result


def test_redis_down_the_turn_completes_through_the_fallback_within_the_deadline(
    tmp_path: Path, pg_store: Store
) -> None:
    down = f"redis://127.0.0.1:{closed_port()}/0"
    agent, provider = build(
        tmp_path,
        store=pg_store,
        redis_url=down,
        queue_deadline=5.0,
        queue_secret=TEST_QUEUE_SECRET,
    )
    assert isinstance(agent.summarizer, QueuedSummarizer)

    started = time.monotonic()
    compactions: list[CompactionRecord] = []
    for i in range(16):
        provider.push(text_reply(f"noted {i}"))
        result = agent.loop.run_turn("s-down", f"remember item {i}: " + "context " * 180)
        compactions.extend(result.compactions)
        if compactions:
            break
    elapsed = time.monotonic() - started

    assert compactions, "the session went over the trigger"
    record = compactions[0]
    assert record.fallback_reason is not None
    assert record.fallback_reason.startswith("redis_unavailable: ")
    assert record.summarizer == "llm"
    assert record.offload_path == conversation_history_path("s-down")
    assert agent.history.exists(record.offload_path)
    assert elapsed < 5.0


# -- the agent loop on the queue ---------------------------------------------------------------


def overflow() -> ContextOverflowError:
    return ContextOverflowError(
        "prompt is too long: 7000 tokens > 6000 maximum", tokens=7000, maximum=6000, status=400
    )


def test_agent_turn_compacts_through_the_queue_and_reuses_the_cached_summary(
    probe: ProviderProbe, tmp_path: Path, pg_store: Store, settings: Settings
) -> None:
    def agent_on_queue() -> Any:
        return build(
            tmp_path,
            store=pg_store,
            redis_url=settings.redis_url,
            queue_secret=settings.queue_secret,
            history_root=settings.history_root,
            queue_deadline=settings.queue_deadline,
            queue_lease_ttl=settings.queue_lease_ttl,
            queue_enqueue_ttl=settings.queue_enqueue_ttl,
        )

    agent, provider = agent_on_queue()
    for i in range(3):
        provider.push(text_reply(f"noted {i}"))
        assert agent.loop.run_turn("s-agent", f"remember item {i}").compactions == ()
    # Under the trigger, the model still says the prompt is too long: compact and retry.
    provider.push(overflow(), text_reply("done"))
    result = agent.loop.run_turn("s-agent", "one more thing")

    assert result.model_calls == 2
    (record,) = result.compactions
    assert record.reason == "overflow"
    assert record.summarizer == "worker:llm"
    assert record.fallback_reason is None
    assert record.summary is not None and record.summary.startswith("Briefing #1 ")
    retried = provider.requests[-1]
    assert record.summary in retried.messages[0].text()
    assert probe.calls() == 1

    # A second process resuming that turn asks for the same summary: it is the cached one.
    evicted = tuple(pg_store.messages("s-agent", 1, record.kept_from_seq - 1))
    job = SummaryJob(
        session_id="s-agent",
        turn=result.turn,
        from_seq=evicted[0].seq,
        to_seq=evicted[-1].seq,
        previous_summary=None,
        evicted=evicted,
        model="test-model",
    )
    resumed, _ = agent_on_queue()
    assert resumed.summarizer.summarize(job).text == record.summary
    assert probe.calls() == 1
    history = agent.history.read(conversation_history_path("s-agent"))
    assert history.count("remember item 0") == 1

    # A second summary builds on the first: the worker reads it from the stored record
    # (the task carries only its digest) and summarizes on the worker, not in-process.
    for i in range(3):
        provider.push(text_reply(f"noted again {i}"))
        agent.loop.run_turn("s-agent", f"remember another item {i}")
    provider.push(overflow(), text_reply("done again"))
    (second,) = agent.loop.run_turn("s-agent", "and one more").compactions
    assert second.summarizer == "worker:llm" and second.fallback_reason is None
    assert probe.calls() == 2


@contextmanager
def held_lease(client: redis.Redis, key: str, ttl_seconds: float) -> Iterator[Lease]:
    """Hold the lease ``key`` for the body, heartbeating, as a job holds it;
    :class:`LeaseBusyError` if taken."""
    lease = Lease(client, key, ttl_seconds)
    if not lease.acquire():
        raise LeaseBusyError(key)
    try:
        with heartbeat(lease):
            yield lease
    finally:
        lease.release_quietly()
