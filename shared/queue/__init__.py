"""The agent side of the worker system: queued ports, Redis result cache, lease, publishing.

Only imported when ``HANGO_REDIS_URL`` is set; the embedded default never needs it.

- :mod:`~hango.queue.keys` — the Redis keys of a job ``(kind, session_id, turn)``;
- :mod:`~hango.queue.results` — commit-once results, error marks, dispatch throttle;
- :mod:`~hango.queue.lease` — a heartbeated lease so one worker computes a job (the
  worker takes it, the caller reads it to know a job is alive);
- :mod:`~hango.queue.waiting` — the caller's single-flight wait under a deadline;
- :mod:`~hango.queue.queued` — ``QueuedSummarizer`` / ``QueuedOffloader`` with fallback;
- :mod:`~hango.queue.celery_config` / :mod:`~hango.queue.dispatch` — Celery config, publishing.

What runs on a worker (the task bodies) lives in :mod:`hango_worker.execution`.
"""

from hango.queue.queued import QueuedOffloader, QueuedSummarizer

__all__ = ["QueuedOffloader", "QueuedSummarizer"]
