"""The API key never reaches a worker's log or Redis, even when the endpoint quotes it.

A real ``celery`` worker summarizes with the Anthropic provider against the loopback fake
of the Messages API, which answers with errors that quote the request's credential
headers (some proxies do). A transient error is retried by the task (Celery logs the
exception with its traceback); a permanent one falls back to the extractive summary with
the reason recorded in the committed result. Neither may carry the key.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from hango.compaction.jobs import SummaryJob
from hango.core.messages import Message
from hango.history.local import LocalHistory
from hango.providers.scripted import ScriptedProvider, text_reply
from hango.queue.celery_config import SUMMARIZE_TASK
from hango.store import Store
from hango.summarizers.llm import LLMSummarizer
from hango.summarizers.offload import InlineOffloader
from hango.wiring.queue import make_queued_ports
from tests.fakeapi import FakeAnthropicAPI
from tests.integration.worker_support import (
    FlowerProcess,
    WorkerProcess,
    claimed_redis_db,
    clear_job_keys,
    queue_settings,
    redis_url,
    wait_until,
)

pytestmark = pytest.mark.integration

# No word in it: Flower's pages quote Celery's docs ("task-reject-on-worker-lost"), and
# any 8 characters of the key found anywhere count.
KEY = "sk-ant-api03-Xq7TbR2mW9vLp4ZcK8sNj5Hd0gYe"
BRIEFING = "## Goal and user requests\nThe briefing the worker's model wrote, long enough."


@pytest.fixture
def redis_db() -> Iterator[int]:
    with claimed_redis_db() as db:
        yield db


def _job(store: Store, session_id: str) -> SummaryJob:
    store.ensure_session(session_id, "test-model")
    for i in range(4):
        role = "user" if i % 2 == 0 else "assistant"
        store.append_message(session_id, 1, Message(role=role, content=f"{role} message {i}"))
    evicted = tuple(store.messages(session_id))
    return SummaryJob(
        session_id=session_id,
        turn=2,
        from_seq=evicted[0].seq,
        to_seq=evicted[-1].seq,
        previous_summary=None,
        evicted=evicted,
        model="claude-haiku-4-5",
    )


def _everything_in(client: redis.Redis) -> bytes:
    dumped = b""
    for key in client.scan_iter():
        kind = client.type(key)
        if kind == b"string":
            dumped += client.get(key) or b""
        elif kind == b"list":
            dumped += b"".join(client.lrange(key, 0, -1))
        elif kind == b"hash":
            dumped += b"".join(k + v for k, v in client.hgetall(key).items())
        elif kind in (b"set", b"zset"):
            dumped += b"".join(
                client.zrange(key, 0, -1) if kind == b"zset" else client.smembers(key)
            )
    return dumped


def test_an_endpoint_quoting_the_key_leaks_it_neither_to_the_worker_log_nor_redis(
    redis_db: int, pg_url: str, pg_store: Store, tmp_path: Path
) -> None:
    client = redis.Redis.from_url(redis_url(redis_db))
    with FakeAnthropicAPI(responder=lambda body: text_reply_body(BRIEFING)) as api:
        settings = queue_settings(
            redis=redis_url(redis_db),
            database_url=pg_url,
            history_root=tmp_path / "history",
            worker_summarizer="anthropic",
            anthropic_api_key=KEY,
            anthropic_base_url=api.base_url,
            # The task's six attempts back off up to a minute, and the agent waits for a
            # summary at most HANGO_SUMMARIZER_TIMEOUT (one deadline, retries included).
            queue_deadline=120.0,
            summarizer_timeout=100.0,
            worker_soft_time_limit=110.0,
            worker_time_limit=120.0,
            queue_visibility_timeout=300.0,
        )
        history = LocalHistory(settings.history_root)
        inline = ScriptedProvider(fallback=lambda request: text_reply("inline, unexpected"))
        summarizer, _ = make_queued_ports(
            settings,
            history=history,
            fallback_summarizer=LLMSummarizer(inline),
            fallback_offloader=InlineOffloader(history),
        )
        worker = WorkerProcess(settings, tmp_path / "worker.log", name="secrets", concurrency=1)
        # Flower watches from before the first task: it lists what the events carried.
        flower = FlowerProcess(settings, tmp_path / "flower.log").start()
        worker.start()
        try:
            clear_job_keys(client)
            # Transient errors until the task gives up (Celery logs the failure with its
            # traceback); then a permanent one (the extractive fallback, reason recorded).
            api.echo_credentials_next(1000, 529, endpoint="/v1/messages")
            failed = summarizer.summarize(_job(pg_store, "s-failed"))
            api.forget_failures()
            # Upper-cased this time, as some gateways echo it (issue 26, item 6).
            api.echo_credentials_next(1, 401, endpoint="/v1/messages", form="upper")
            refused = summarizer.summarize(_job(pg_store, "s-refused"))
            log = worker.log_path.read_text()
            shown = _flower_pages(flower, worker.nodename)
        finally:
            worker.stop()
            flower.stop()
        sent_key = [r for r in api.message_requests() if KEY in str(r.headers)]
    assert len(sent_key) >= 7, "the worker did not call the endpoint with the key"
    assert failed.fallback_reason is not None and "worker_failed" in failed.fallback_reason
    assert refused.fallback_reason is not None and "request headers" in refused.fallback_reason
    assert "Traceback" in log and "request headers" in log
    assert KEY not in log
    assert KEY.encode() not in _everything_in(client)
    assert KEY.upper()[-20:] not in refused.fallback_reason  # what the endpoint sent back
    everything = log + _everything_in(client).decode(errors="replace") + refused.fallback_reason
    assert _fragments_of(KEY, everything) == []
    assert "request headers" in shown  # Flower shows the failures' (scrubbed) text
    assert _fragments_of(KEY, shown) == []
    assert len(inline.requests) == 1  # the failed job fell back in the agent process


def _flower_pages(flower: FlowerProcess, worker: str) -> str:
    """Everything Flower serves about the worker and its tasks: API answers and pages."""

    def tasks() -> dict[str, dict[str, object]]:
        status, listed = flower.get(f"/api/tasks?taskname={SUMMARIZE_TASK}")
        return listed if status == 200 and isinstance(listed, dict) else {}

    def both_sessions_listed() -> bool:
        kwargs = str([task.get("kwargs") for task in tasks().values()])
        return "s-failed" in kwargs and "s-refused" in kwargs

    wait_until(both_sessions_listed, 30, "flower never listed both summarize tasks")
    paths = ["/api/tasks", "/api/workers", "/tasks", "/workers", f"/worker/{worker}"]
    order = "order%5B0%5D%5Bcolumn%5D=0&columns%5B0%5D%5Bdata%5D=name&order%5B0%5D%5Bdir%5D=asc"
    paths.append(f"/tasks/datatable?draw=1&start=0&length=100&search%5Bvalue%5D=&{order}")
    for task_id in tasks():
        paths += [f"/api/task/info/{task_id}", f"/task/{task_id}"]
    pages = {path: flower.get_text(path) for path in paths}
    refused = {path: status for path, (status, _) in pages.items() if status != 200}
    assert not refused, refused
    return "\n".join(text for _, text in pages.values())


def _fragments_of(key: str, text: str) -> list[str]:
    """Every 8-character piece of ``key`` found in ``text``, in any letter case."""
    lowered = text.lower()
    return [key[i : i + 8] for i in range(len(key) - 7) if key[i : i + 8].lower() in lowered]


def text_reply_body(text: str) -> dict[str, object]:
    return {"content": [{"type": "text", "text": text}], "stop_reason": "end_turn"}
