"""``hango serve --queue``: the gateway on PostgreSQL, Redis and a real Celery worker.

The gateway is the app ``hango serve --queue`` runs, built from queue settings (the same
the worker gets): summaries are made on ``celery -A hango_worker worker`` by the test's
counting provider, whose text names it. Two gateway apps on one PostgreSQL store serve
one session's requests in turn, as two processes behind a load balancer would.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import anthropic
import pytest
import redis
from sqlalchemy import Engine

from hango.core.settings import Settings
from tests.fakeapi import FakeAnthropicAPI, count_input_tokens
from tests.gateway_support import (
    RunningGateway,
    breakpoints,
    running_gateway,
    tool_output,
    tool_round_responder,
)
from tests.integration.worker_support import (
    ProviderProbe,
    WorkerProcess,
    claimed_redis_db,
    queue_settings,
    redis_url,
)

pytestmark = pytest.mark.integration

WINDOW = 8000
ROUNDS = 20
TOOLS = [{"name": "Bash", "description": "run", "input_schema": {"type": "object"}}]
# What the worker's counting provider writes (tests/integration/worker_support.py).
WORKER_SUMMARY = "written by the test provider"


@pytest.fixture(scope="module")
def redis_db() -> Iterator[int]:
    with claimed_redis_db() as db:
        yield db


@pytest.fixture
def settings(
    redis_db: int, pg_url: str, pg_engine: Engine, tmp_path_factory: pytest.TempPathFactory
) -> Settings:
    return queue_settings(
        redis=redis_url(redis_db),
        database_url=pg_url,
        history_root=tmp_path_factory.mktemp("history"),
    )


@pytest.fixture
def worker(settings: Settings, tmp_path: Path) -> Iterator[WorkerProcess]:
    process = WorkerProcess(settings, tmp_path / "worker.log", name="gwq").start()
    yield process
    process.stop()


@pytest.fixture
def probe(redis_db: int) -> ProviderProbe:
    probe = ProviderProbe(redis.Redis.from_url(redis_url(redis_db)))
    probe.reset()
    return probe


def tool_session(urls: Iterator[str], session: str) -> list[Any]:
    """A streamed Bash session of ``ROUNDS`` rounds, each request to the next URL."""
    history: list[Any] = [{"role": "user", "content": "run every step"}]
    for n in range(1, ROUNDS + 2):
        with (
            anthropic.Anthropic(api_key="sk-ant-q", base_url=next(urls), max_retries=0) as client,
            client.messages.stream(
                model="claude-sonnet-4-5",
                max_tokens=2000,
                tools=TOOLS,  # type: ignore[arg-type]
                messages=history,
                extra_headers={"x-hango-session": session},
            ) as stream,
        ):
            reply = stream.get_final_message()
        if reply.stop_reason != "tool_use":
            assert reply.content[0].text == "all rounds done"  # type: ignore[union-attr]
            return history
        content = [block.model_dump(exclude_none=True) for block in reply.content]
        history.append({"role": "assistant", "content": content})
        result = {"type": "tool_result", "tool_use_id": f"toolu_{n:03d}"}
        history.append({"role": "user", "content": [{**result, "content": tool_output(n, 3600)}]})
    raise AssertionError("the upstream never ended the session")


def gateway_at(
    upstream: FakeAnthropicAPI, home: Path, settings: Settings
) -> AbstractContextManager[RunningGateway]:
    return running_gateway(upstream.base_url, home, max_input_tokens=WINDOW, settings=settings)


def stored_history(gateway: RunningGateway) -> tuple[list[Any], int]:
    store = gateway.gateway.store
    (session,) = store.sessions()
    return [m.message.to_api() for m in store.messages(session.id)], session.compactions


def assert_every_request_fits(upstream: FakeAnthropicAPI, history: list[Any]) -> None:
    sent = upstream.message_requests()
    assert len(sent) == ROUNDS + 1
    for request in sent:
        assert count_input_tokens(request.body) <= WINDOW
        assert request.body["tools"] == TOOLS
        assert breakpoints(request.body) <= 4
    full = count_input_tokens({"tools": TOOLS, "messages": history})
    assert full > 2 * WINDOW  # without compaction it would never have fit


def test_a_streamed_session_through_the_queue_is_compacted_with_the_workers_summary(
    settings: Settings, worker: WorkerProcess, probe: ProviderProbe, tmp_path: Path
) -> None:
    with (
        FakeAnthropicAPI(window=WINDOW, responder=tool_round_responder(ROUNDS)) as upstream,
        gateway_at(upstream, tmp_path, settings) as gateway,
    ):
        history = tool_session(itertools.repeat(gateway.url), "queued")
        stored, compactions = stored_history(gateway)
    assert_every_request_fits(upstream, history)
    assert compactions >= 2
    assert stored == history  # every message once, as the client sent it
    assert probe.calls() >= 1  # the summaries were made on the worker
    summarized = [r for r in upstream.message_requests() if WORKER_SUMMARY in str(r.body)]
    assert summarized, "no request upstream carried a summary written on the worker"


def test_two_gateways_on_one_store_serve_one_session_in_turn(
    settings: Settings, worker: WorkerProcess, probe: ProviderProbe, tmp_path: Path
) -> None:
    with (
        FakeAnthropicAPI(window=WINDOW, responder=tool_round_responder(ROUNDS)) as upstream,
        gateway_at(upstream, tmp_path / "a", settings) as first,
        gateway_at(upstream, tmp_path / "b", settings) as second,
    ):
        history = tool_session(itertools.cycle([first.url, second.url]), "balanced")
        stored, compactions = stored_history(first)
    assert_every_request_fits(upstream, history)
    assert stored == history  # no message lost, none stored twice
    assert compactions >= 1
