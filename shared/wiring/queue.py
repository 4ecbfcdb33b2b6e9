"""Assembling the queued ports for an agent process from its settings."""

from __future__ import annotations

import redis

from hango.compaction.jobs import HistoryOffloader, Summarizer
from hango.core.settings import Settings
from hango.history.base import HistoryBackend
from hango.queue.celery_config import check_time_limits, redis_url_of
from hango.queue.dispatch import CeleryDispatcher, producer_app
from hango.queue.queued import QueuedOffloader, QueuedSummarizer
from hango.queue.results import ResultCache
from hango.queue.signing import check_probe, signer_from_settings
from hango.queue.waiting import WaitPolicy

# A Redis that stops answering must not hold a turn for long: the port falls back.
REDIS_SOCKET_TIMEOUT = 5.0
REDIS_CONNECT_TIMEOUT = 2.0


def redis_client(settings: Settings) -> redis.Redis:
    return redis.Redis.from_url(
        redis_url_of(settings),
        socket_timeout=REDIS_SOCKET_TIMEOUT,
        socket_connect_timeout=REDIS_CONNECT_TIMEOUT,
        health_check_interval=30,
    )


def result_cache(settings: Settings, client: redis.Redis | None = None) -> ResultCache:
    """The signed result cache; a ``ConfigError`` without ``HANGO_QUEUE_SECRET``."""
    signer = signer_from_settings(settings)
    return ResultCache(
        client or redis_client(settings), result_ttl=settings.queue_result_ttl, signer=signer
    )


def wait_policy(settings: Settings) -> WaitPolicy:
    return WaitPolicy(deadline=settings.queue_deadline, enqueue_ttl=settings.queue_enqueue_ttl)


def make_queued_ports(
    settings: Settings,
    *,
    history: HistoryBackend,
    fallback_summarizer: Summarizer,
    fallback_offloader: HistoryOffloader,
    store: object | None = None,
) -> tuple[QueuedSummarizer, QueuedOffloader]:
    """The queued summarizer and offloader over ``HANGO_REDIS_URL``.

    A missing or too short ``HANGO_QUEUE_SECRET`` is a ``ConfigError`` now, and so is one
    that differs from the workers' (their start-up probe in Redis does not verify with
    it). That one read is all that is contacted here: an unreachable Redis shows up on the
    first job, which then falls back.
    ``store`` is accepted for symmetry with the in-process ports and unused: the agent
    side sends sequence numbers, the worker reads the messages.
    """
    del store
    check_time_limits(settings)
    cache = result_cache(settings)
    check_probe(cache.client, cache.signer)
    dispatcher = CeleryDispatcher(producer_app(settings))
    policy = wait_policy(settings)
    summarizer = QueuedSummarizer(
        cache=cache,
        dispatcher=dispatcher,
        policy=policy,
        fallback=fallback_summarizer,
        timeout=settings.summarizer_timeout,
    )
    offloader = QueuedOffloader(
        cache=cache,
        dispatcher=dispatcher,
        policy=policy,
        fallback=fallback_offloader,
        history=history,
    )
    return summarizer, offloader
