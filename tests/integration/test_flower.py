"""Flower watching a real worker: basic auth on the API, the worker and its tasks listed."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from hango.compaction.extractive import ExtractiveSummarizer
from hango.compaction.jobs import SummaryJob
from hango.core.messages import Message
from hango.core.settings import Settings
from hango.history.local import LocalHistory
from hango.queue.celery_config import SUMMARIZE_TASK
from hango.store import Store
from hango.summarizers.offload import InlineOffloader
from hango.wiring.queue import make_queued_ports
from tests.integration.worker_support import (
    FlowerProcess,
    ProviderProbe,
    WorkerProcess,
    claimed_redis_db,
    queue_settings,
    redis_url,
    wait_until,
)

pytestmark = pytest.mark.integration


@dataclass
class Stack:
    settings: Settings
    worker: WorkerProcess
    flower: FlowerProcess


@pytest.fixture(scope="module")
def stack(pg_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with claimed_redis_db() as db:
        yield from started_stack(redis_url(db), pg_url, tmp_path_factory)


def started_stack(
    redis: str, pg_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    logs = tmp_path_factory.mktemp("flower-logs")
    settings = queue_settings(
        redis=redis,
        database_url=pg_url,
        history_root=tmp_path_factory.mktemp("history"),
    )
    worker = WorkerProcess(settings, logs / "worker.log", name="fw", concurrency=1)
    flower = FlowerProcess(settings, logs / "flower.log")
    try:
        flower.launch()
        worker.launch()
        flower.wait_ready(45)
        worker.wait_ready(45)
        yield Stack(settings, worker, flower)
    finally:
        worker.stop()
        flower.stop()


def test_flower_api_needs_credentials_and_lists_the_worker(stack: Stack) -> None:
    status, _ = stack.flower.get("/api/workers", auth=False)
    assert status == 401

    def worker_listed() -> bool:
        # refresh=1 inspects the workers now; a reply slower than Flower's inspect timeout
        # (1 s, on a loaded machine) is missing from that answer, so ask again.
        status, workers = stack.flower.get("/api/workers?refresh=1")
        assert status == 200
        return stack.worker.nodename in workers

    wait_until(worker_listed, 30, "flower never listed the worker")


def test_summarize_task_shows_up_in_flower(stack: Stack, pg_store: Store, tmp_path: Path) -> None:
    ProviderProbe(redis.Redis.from_url(stack.settings.redis_url or "")).reset()
    pg_store.ensure_session("s-flower", "test-model")
    for i in range(4):
        role = "user" if i % 2 == 0 else "assistant"
        pg_store.append_message("s-flower", 1, Message(role=role, content=f"{role} says {i}"))
    evicted = tuple(pg_store.messages("s-flower"))
    history = LocalHistory(stack.settings.history_root)
    summarizer, _ = make_queued_ports(
        stack.settings,
        history=history,
        fallback_summarizer=ExtractiveSummarizer(),
        fallback_offloader=InlineOffloader(history),
    )
    result = summarizer.summarize(
        SummaryJob(
            session_id="s-flower",
            turn=2,
            from_seq=1,
            to_seq=4,
            previous_summary=None,
            evicted=evicted,
            model="summ-model",
        )
    )
    assert result.summarizer == "worker:llm"

    def summarize_task_succeeded() -> bool:
        status, tasks = stack.flower.get(f"/api/tasks?taskname={SUMMARIZE_TASK}")
        return status == 200 and any(
            task.get("name") == SUMMARIZE_TASK
            and task.get("state") == "SUCCESS"
            and task.get("worker") == stack.worker.nodename
            and "s-flower" in str(task.get("kwargs"))
            for task in tasks.values()
        )

    wait_until(summarize_task_succeeded, 20, "flower never listed the summarize task")
