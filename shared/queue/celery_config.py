"""The Celery configuration both sides share, built from :class:`~hango.core.settings.Settings`.

The worker app (``worker/app.py``) and the agent's producer app use the same dict, so a
task published by the agent is routed, serialized and expired exactly as the worker
expects. The reliability choices follow Celery 5.7 on Redis:

- late acks + requeue/retry when a pool child dies, so a SIGKILLed summary runs again;
- prefetch 1, so a worker reserves only what it is executing;
- time limits nested below the visibility timeout, because a task still running when
  the timeout passes is redelivered *while it runs* (duplicates);
- a hard-timed-out or failed task is acked, not requeued forever;
- worker task events on, so Flower shows tasks from receipt to result (the producer's
  ``task-sent`` event is off: it would cost every publish a round trip);
- kombu's Redis transport with a channel close that survives a Redis restart
  (:mod:`hango.queue.redis_transport`), and running tasks not cancelled when the broker
  connection drops: the task finishes and its late ack reaches the restarted Redis.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

from kombu import Exchange, Queue

from hango.core.errors import ConfigError
from hango.core.settings import Settings, env_name
from hango.queue import redis_transport

SUMMARIZE_QUEUE = "summarize"
OFFLOAD_QUEUE = "offload"
QUEUES = (SUMMARIZE_QUEUE, OFFLOAD_QUEUE)
SUMMARIZE_TASK = "hango.summarize"
OFFLOAD_TASK = "hango.offload"

# A task's ``default_retry_delay`` (Celery's default is 180 s): the countdown of the retry
# sent when a pool child dies mid-task. It must stay far below the visibility timeout, or
# the waiting retry message is redelivered every timeout (Redis counts from delivery).
WORKER_LOST_RETRY_DELAY = 1

# Back-off of a task retried after a transient provider error (429, 5xx, timeout).
RETRY_BACKOFF = 2
RETRY_BACKOFF_MAX = 30


def transient_countdown(retries: int, rng: random.Random | None = None) -> float:
    """Exponential back-off with equal jitter: at least half of 2 s, 4 s, 8 s ... ≤ 30 s.

    The guaranteed half keeps a retry from following a 429 at once; the random half
    spreads the retries of many jobs that failed together.
    """
    ceiling: float = min(RETRY_BACKOFF_MAX, RETRY_BACKOFF * 2**retries)
    return ceiling / 2 + (rng or random).uniform(0, ceiling / 2)


def task_queues() -> tuple[Queue, ...]:
    """One direct exchange per queue, so a summarize message never lands in ``offload``."""
    return tuple(Queue(name, Exchange(name, type="direct"), routing_key=name) for name in QUEUES)


def check_time_limits(settings: Settings) -> None:
    """Fail at start-up unless the limits nest: provider < soft < hard < visibility."""
    chain = [
        ("summarizer_timeout", settings.summarizer_timeout),
        ("worker_soft_time_limit", settings.worker_soft_time_limit),
        ("worker_time_limit", settings.worker_time_limit),
        ("queue_visibility_timeout", settings.queue_visibility_timeout),
    ]
    for (low_name, low), (high_name, high) in itertools.pairwise(chain):
        if low >= high:
            raise ConfigError(
                f"{env_name(low_name)} ({low:g} s) must be below {env_name(high_name)} "
                f"({high:g} s)",
                variable=env_name(low_name),
            )
    if settings.queue_lease_ttl >= settings.queue_visibility_timeout:
        raise ConfigError(
            f"{env_name('queue_lease_ttl')} ({settings.queue_lease_ttl:g} s) must be below "
            f"{env_name('queue_visibility_timeout')}",
            variable=env_name("queue_lease_ttl"),
        )


def redis_url_of(settings: Settings) -> str:
    if not settings.redis_url:
        raise ConfigError(
            f"{env_name('redis_url')} is not set: the worker system needs Redis",
            variable=env_name("redis_url"),
        )
    return settings.redis_url


def celery_config(settings: Settings) -> dict[str, Any]:
    """Every Celery setting of the product (keys as in ``app.conf``)."""
    check_time_limits(settings)
    url = redis_url_of(settings)
    redis_transport.install()
    visibility = int(settings.queue_visibility_timeout)
    transport_options = {
        "visibility_timeout": visibility,
        "unacked_restore_interval": settings.queue_restore_interval,
        # One sweep per interval (kombu's default scans only every 10th interval).
        "unacked_restore_throttle": 1,
        # The lock a sweep holds (milliseconds in practice) outlives a worker killed inside
        # it, and every sweep is skipped until it expires: kombu's 300 s would hold back
        # the redelivery of every orphan for five minutes. Expiring after one interval, a
        # sweep that outlasts it (thousands of orphans, a stalled process) can overlap the
        # next: a message both list is moved once (a WATCHed transaction), but one already
        # redelivered in between can be requeued again, a duplicate the tasks absorb (the
        # job's lease and committed result, as for any redelivery).
        "unacked_mutex_expire": settings.queue_restore_interval,
        # A publish to a broker that vanished must fail, not hang the agent's turn.
        "socket_timeout": 10,
        "socket_connect_timeout": 5,
    }
    return {
        "broker_url": url,
        "result_backend": url,
        "broker_transport_options": transport_options,
        "result_backend_transport_options": {"visibility_timeout": visibility},
        # Celery's Redis docs ask for the value in all three places.
        "visibility_timeout": visibility,
        "broker_connection_retry_on_startup": True,
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "result_accept_content": ["json"],
        "result_expires": 3600,
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "task_retry_on_worker_lost": True,
        "task_acks_on_failure": True,
        "task_acks_on_timeout": True,
        "worker_prefetch_multiplier": 1,
        "task_soft_time_limit": settings.worker_soft_time_limit,
        "task_time_limit": settings.worker_time_limit,
        # Cancelling on a lost connection (with the result backend down too) is handled as
        # a revoke and acked: the job is dropped. Left running, it finishes and its late
        # ack reaches the restarted Redis; a blip may requeue it meanwhile, a concurrent
        # duplicate that the job's lease and first-writer-wins commit make harmless.
        "worker_cancel_long_running_tasks_on_connection_loss": False,
        "worker_soft_shutdown_timeout": min(30.0, settings.worker_time_limit),
        "worker_send_task_events": True,
        # Not the producer's "task-sent" event: one more Redis round trip on every publish
        # from the agent's turn. Flower sees each task from the worker's "task-received".
        "task_send_sent_event": False,
        "task_queues": task_queues(),
        "task_default_queue": SUMMARIZE_QUEUE,
        "task_default_exchange": SUMMARIZE_QUEUE,
        "task_default_routing_key": SUMMARIZE_QUEUE,
        "task_routes": {
            SUMMARIZE_TASK: {"queue": SUMMARIZE_QUEUE},
            OFFLOAD_TASK: {"queue": OFFLOAD_QUEUE},
        },
    }
