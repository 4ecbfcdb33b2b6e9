"""Redis down at the worker's commit does not throw a finished result away (item 5).

Real ``redis-server`` of the test's own: stopped while the job computes (after the lease
was taken), started again a moment later. The finished result must be committed once
Redis is back, within the task's limits, not dropped.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import redis

from hango.queue.keys import JobKey
from hango.queue.results import ResultCache
from hango.queue.signing import ResultSigner
from hango_worker.execution import run_once
from tests.integration.redis_server import own_redis, redis_server_available
from tests.integration.worker_support import TEST_QUEUE_SECRET

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not redis_server_available(), reason="needs the redis-server binary"),
]

KEY = JobKey("summary", "s-commit", 2, (1, 4), "fp")
PAYLOAD = '{"text": "finished summary", "summarizer": "worker:llm"}'


def test_a_result_finished_while_redis_is_down_is_committed_when_it_returns(
    tmp_path: Path,
) -> None:
    (tmp_path / "redis").mkdir()
    with own_redis(tmp_path / "redis", append_only=False) as server:
        client = redis.Redis(port=server.port, socket_timeout=2, socket_connect_timeout=1)
        cache = ResultCache(client, result_ttl=600, signer=ResultSigner(TEST_QUEUE_SECRET))
        computed = []

        restart = threading.Timer(1.5, server.start)

        def compute() -> str:
            server.stop()  # Redis goes away mid-job; it is back 1.5 s later
            restart.start()
            computed.append(time.monotonic())
            return PAYLOAD

        assert run_once(cache, KEY, lease_ttl=5.0, compute=compute, commit_budget=20.0) == PAYLOAD
        restart.join()
        assert len(computed) == 1
        assert cache.get(KEY) == PAYLOAD  # committed, signed, readable by every caller


def test_without_a_budget_the_commit_failure_is_raised(tmp_path: Path) -> None:
    (tmp_path / "redis").mkdir()
    with own_redis(tmp_path / "redis", append_only=False) as server:
        client = redis.Redis(port=server.port, socket_timeout=2, socket_connect_timeout=1)
        cache = ResultCache(client, result_ttl=600, signer=ResultSigner(TEST_QUEUE_SECRET))

        def compute() -> str:
            server.stop()
            return PAYLOAD

        with pytest.raises(redis.RedisError):
            run_once(cache, KEY, lease_ttl=5.0, compute=compute, commit_budget=0.0)
