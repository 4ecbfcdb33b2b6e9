"""A short Redis lease with a heartbeat: at most one worker computes a job at a time.

``SET key token NX PX ttl`` takes the lease; a heartbeat thread extends it every third
of its TTL, but only while the key still holds our token (compare-and-pexpire), and the
release deletes it only if it is still ours (compare-and-delete). A short TTL plus a
heartbeat means a SIGKILLed holder blocks the job for at most one TTL, while a long
provider call keeps its lease for as long as it runs.

Hand-written rather than redis-py's ``Lock``: the lease is taken in the same Lua round trip
that reads a committed result (``results._RESULT_OR_LEASE``) and released in the one that
commits it (``_COMMIT_AND_RELEASE``), which keeps a task at two Redis round trips; ``Lock``
cannot join either script.
"""

from __future__ import annotations

import logging
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import redis

log = logging.getLogger(__name__)

_EXTEND_IF_OURS = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
"""

_DELETE_IF_OURS = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0
"""


class Lease:
    """One attempt to hold ``key``: a random token, taken with ``SET NX PX``."""

    def __init__(self, client: redis.Redis, key: str, ttl_seconds: float) -> None:
        self.client = client
        self.key = key
        self.ttl_ms = max(1, int(ttl_seconds * 1000))
        self.token = secrets.token_hex(16)
        self.lost = threading.Event()

    def acquire(self) -> bool:
        return bool(self.client.set(self.key, self.token, nx=True, px=self.ttl_ms))

    def extend(self) -> bool:
        return bool(self.client.eval(_EXTEND_IF_OURS, 1, self.key, self.token, self.ttl_ms))

    def release(self) -> bool:
        return bool(self.client.eval(_DELETE_IF_OURS, 1, self.key, self.token))

    def release_quietly(self) -> None:
        try:
            self.release()
        except redis.RedisError:
            # The lease expires on its own within one TTL; nothing else to do.
            log.warning("could not release lease %s; it expires by itself", self.key)


@contextmanager
def heartbeat(lease: Lease) -> Iterator[Lease]:
    """Keep an acquired lease alive while the body runs (it is not released here)."""
    stop = threading.Event()
    beat = threading.Thread(
        target=_heartbeat, args=(lease, stop), name=f"lease-heartbeat {lease.key}", daemon=True
    )
    beat.start()
    try:
        yield lease
    finally:
        stop.set()
        beat.join()


def _heartbeat(lease: Lease, stop: threading.Event) -> None:
    interval = lease.ttl_ms / 3000
    while not stop.wait(interval):
        try:
            still_ours = lease.extend()
        except redis.RedisError:
            log.warning("lease %s: heartbeat could not reach Redis", lease.key)
            continue
        if not still_ours:
            # Expired and maybe taken by another worker: our result is still committed
            # with SET NX, so the first writer wins and nobody sees two summaries.
            log.warning("lease %s was lost while the job ran", lease.key)
            lease.lost.set()
            return
