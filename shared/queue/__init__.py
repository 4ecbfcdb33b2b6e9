"""The worker system's shared core: Redis result cache, lease, and the queued ports.

Only imported when ``HANGO_REDIS_URL`` is set; the embedded default never needs it.

- :mod:`~shared.queue.keys` — the Redis keys of a job ``(kind, session_id, turn)``;
- :mod:`~shared.queue.results` — commit-once results, error marks, dispatch throttle;
- :mod:`~shared.queue.lease` — a heartbeated lease so one worker computes a job;
- :mod:`~shared.queue.execution` — the task bodies the worker runs;
- :mod:`~shared.queue.waiting` — the caller's single-flight wait under a deadline;
- :mod:`~shared.queue.ports` — ``QueuedSummarizer`` / ``QueuedOffloader`` with fallback;
- :mod:`~shared.queue.config` / :mod:`~shared.queue.dispatch` — Celery config, publishing.
"""

from shared.queue.factory import make_queued_ports
from shared.queue.ports import QueuedOffloader, QueuedSummarizer

__all__ = ["QueuedOffloader", "QueuedSummarizer", "make_queued_ports"]
