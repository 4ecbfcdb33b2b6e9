"""A worker keeps serving across a Redis restart, with a task in flight and without.

Redis here is a server of the test's own (append-only file on, as in docker-compose.yml),
stopped with ``SHUTDOWN NOSAVE`` and started again on the same port while a real
``celery -A hango_worker worker -P prefork`` process runs. Before the fix in
:mod:`hango.queue.redis_transport`, a worker with a task in flight died on the restart
("Unrecoverable error: AttributeError: 'NoneType' object has no attribute 'hostname'").
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hango.compaction.jobs import SummaryJob
from hango.core.messages import Message
from hango.core.settings import Settings
from hango.history.local import LocalHistory
from hango.providers.scripted import ScriptedProvider, text_reply
from hango.queue.celery_config import SUMMARIZE_TASK
from hango.queue.dispatch import CeleryDispatcher, producer_app
from hango.queue.keys import JobKey
from hango.queue.queued import job_key
from hango.queue.results import ResultCache
from hango.queue.signing import ResultSigner
from hango.store import Store
from hango.summarizers.llm import LLMSummarizer
from hango.summarizers.offload import InlineOffloader
from hango.wiring.queue import make_queued_ports
from tests.integration.redis_server import RedisServer, own_redis, redis_server_available
from tests.integration.worker_support import (
    TEST_QUEUE_SECRET,
    ProviderProbe,
    WorkerProcess,
    queue_settings,
    wait_until,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not redis_server_available(), reason="needs the redis-server binary"),
]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    (tmp_path / "redis").mkdir()
    with own_redis(tmp_path / "redis") as server:
        yield server


@pytest.fixture
def settings(server: RedisServer, pg_url: str, tmp_path: Path) -> Settings:
    return queue_settings(redis=server.url, database_url=pg_url, history_root=tmp_path / "h")


@pytest.fixture
def worker(settings: Settings, tmp_path: Path) -> Iterator[WorkerProcess]:
    process = WorkerProcess(settings, tmp_path / "worker.log", name="restart").start()
    yield process
    process.stop()


def publish_summary(settings: Settings, store: Store, session_id: str) -> JobKey:
    """A summarize task for a fresh two-message session; the key its result lands under."""
    store.ensure_session(session_id, "test-model")
    store.append_message(session_id, 1, Message(role="user", content="first"))
    store.append_message(session_id, 1, Message(role="assistant", content="second"))
    kwargs = {
        "session_id": session_id,
        "turn": 2,
        "from_seq": 1,
        "to_seq": 2,
        "previous_digest": "",
        "model": "summ-model",
    }
    app = producer_app(settings)
    try:
        CeleryDispatcher(app).dispatch(SUMMARIZE_TASK, kwargs, expires=120)
    finally:
        app.close()
    return job_key("summary", kwargs)


def committed(server: RedisServer, key: JobKey, worker: WorkerProcess, timeout: float) -> str:
    """The result of ``key`` once a worker committed it; fails at once if the worker died."""
    cache = ResultCache(server.client(), result_ttl=600, signer=ResultSigner(TEST_QUEUE_SECRET))
    found: list[str] = []

    def has_result() -> bool:
        assert worker.alive(), f"the worker died:\n{worker.log_tail(60)}"
        try:
            found[:] = [value] if (value := cache.get(key)) else []
        except OSError:
            return False
        return bool(found)

    wait_until(has_result, timeout, f"no result for {key}")
    return found[0]


def restart(server: RedisServer, down_seconds: float) -> None:
    server.stop()
    time.sleep(down_seconds)
    server.start()


@pytest.mark.parametrize("in_flight", [True, False], ids=["task-in-flight", "idle"])
def test_a_worker_survives_a_redis_restart_and_loses_no_job(
    server: RedisServer,
    settings: Settings,
    worker: WorkerProcess,
    pg_store: Store,
    in_flight: bool,
) -> None:
    probe = ProviderProbe(server.client())
    first: JobKey | None = None
    if in_flight:
        probe.slow_next_calls(1, seconds=3.0)
        first = publish_summary(settings, pg_store, "s-in-flight")
        probe.wait_for_call()

    restart(server, down_seconds=1.0)

    if first is not None:
        assert "Briefing #1 " in committed(server, first, worker, timeout=30), "the job was lost"
    second = publish_summary(settings, pg_store, "s-after-restart")
    assert "Briefing #" in committed(server, second, worker, timeout=60)
    log = worker.log_tail(400)
    assert worker.alive(), f"the worker died on the Redis restart:\n{log}"
    assert "Unrecoverable error" not in log
    assert probe.calls() == (2 if in_flight else 1), "each job called the provider once"


def test_a_redis_that_hangs_costs_the_turn_its_deadline_not_a_socket_timeout_more(
    server: RedisServer, settings: Settings, pg_store: Store, tmp_path: Path
) -> None:
    """A paused server accepts connections and never answers (no worker needed)."""
    hung = settings.model_copy(update={"queue_deadline": 1.5})
    inline = ScriptedProvider(fallback=lambda request: text_reply("inline briefing"))
    history = LocalHistory(tmp_path / "h")
    summarizer, _ = make_queued_ports(
        hung,
        history=history,
        fallback_summarizer=LLMSummarizer(inline),
        fallback_offloader=InlineOffloader(history),
    )
    pg_store.ensure_session("s-hung", "test-model")
    pg_store.append_message("s-hung", 1, Message(role="user", content="first"))
    evicted = tuple(pg_store.messages("s-hung"))
    job = SummaryJob(
        session_id="s-hung", turn=2, from_seq=1, to_seq=1, previous_summary=None,
        evicted=evicted, model="summ-model",
    )  # fmt: skip

    server.pause()
    try:
        started = time.monotonic()
        result = summarizer.summarize(job)
        elapsed = time.monotonic() - started
    finally:
        server.resume()

    assert result.fallback_reason is not None
    assert result.fallback_reason.startswith("queue_deadline: ")
    # deadline 1.5 s + grace 0.5 s + the fallback commit's bound (2 s), far below the
    # 5 s socket timeout that each hung Redis call cost before.
    assert elapsed < 1.5 + 0.5 + 2.0 + 0.5, f"the turn waited {elapsed:.1f} s"
