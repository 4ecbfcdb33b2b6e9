"""A worker and an agent with different queue secrets: found at the agent's start-up
(issue 26, item 2), not summary by summary.

A real worker on a real Redis (a database of its own) publishes a probe signed with its
``HANGO_QUEUE_SECRET`` when it starts; an agent assembling its queued ports reads it and
refuses to start with another secret, naming the setting and never a secret.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from hango.core.errors import ConfigError
from hango.core.settings import Settings
from hango.providers.scripted import ScriptedProvider
from hango.queue.signing import PROBE_KEY, ResultSigner, check_probe, publish_probe
from hango.summarizers.llm import LLMSummarizer
from hango.summarizers.offload import InlineOffloader
from hango.wiring.queue import make_queued_ports
from tests.integration.worker_support import (
    TEST_QUEUE_SECRET,
    claimed_redis_db,
    queue_settings,
    redis_url,
    running_worker,
)
from tests.memory_history import MemoryHistory

pytestmark = pytest.mark.integration

OTHER_SECRET = "another-queue-secret-fedcba9876543210-x"


@pytest.fixture
def db() -> Iterator[int]:
    with claimed_redis_db() as claimed:
        yield claimed


def ports(settings: Settings) -> None:
    history = MemoryHistory()
    make_queued_ports(
        settings,
        history=history,
        fallback_summarizer=LLMSummarizer(ScriptedProvider()),
        fallback_offloader=InlineOffloader(history),
    )


def fragments(secret: str, size: int = 8) -> set[str]:
    return {secret[i : i + size].lower() for i in range(len(secret) - size + 1)}


def test_an_agent_with_another_secret_than_the_workers_refuses_to_start(
    db: int, pg_url: str, tmp_path: Path
) -> None:
    worker_settings = queue_settings(
        redis=redis_url(db), database_url=pg_url, history_root=tmp_path / "h"
    )
    client = redis.Redis.from_url(redis_url(db))
    ports(worker_settings)  # no probe yet (no worker since the database was emptied): starts
    assert client.get(PROBE_KEY) is None
    with running_worker(worker_settings, tmp_path / "worker.log"):
        assert client.get(PROBE_KEY) is not None
        ports(worker_settings)  # the workers' secret: starts
        wrong = queue_settings(
            redis=redis_url(db),
            database_url=pg_url,
            history_root=tmp_path / "h",
            queue_secret=OTHER_SECRET,
        )
        with pytest.raises(ConfigError) as caught:
            ports(wrong)
    error = caught.value
    assert error.variable == "HANGO_QUEUE_SECRET"
    assert "HANGO_QUEUE_SECRET differs from the one the workers" in str(error)
    said = str(error).lower()
    for secret in (TEST_QUEUE_SECRET, OTHER_SECRET):
        assert not [piece for piece in fragments(secret) if piece in said], said


def test_a_worker_replaces_a_probe_of_another_secret_and_redis_down_is_no_error(
    db: int, caplog: pytest.LogCaptureFixture
) -> None:
    client = redis.Redis.from_url(redis_url(db))
    old, new = ResultSigner(OTHER_SECRET), ResultSigner(TEST_QUEUE_SECRET)
    publish_probe(client, old, "old@host")
    with pytest.raises(ConfigError):
        check_probe(client, new)
    publish_probe(client, new, "new@host")
    assert "signed with another HANGO_QUEUE_SECRET" in caplog.text
    check_probe(client, new)
    down = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.5)
    check_probe(down, new)  # unreachable: checked per result later, not a start-up error
    assert "could not read the workers' secret probe" in caplog.text
