"""The Redis side of a job: its committed result, error marker and dispatch throttle.

The result of ``(kind, session_id, turn)`` is committed once: a Lua script sets it only
if absent and returns whichever value won, so a worker, a duplicate worker and an agent
that fell back inline all end up returning the same text (invariant 4: one committed
summary per turn).
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

from shared.core.errors import LeaseBusyError
from shared.queue.keys import JobKey
from shared.queue.lease import Lease

_SET_IF_ABSENT_RETURN_WINNER = """
local current = redis.call('get', KEYS[1])
if current then
  return current
end
redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
return ARGV[1]
"""


# One round trip for the task's start: the committed result if there is one, else the
# lease if it is free. KEYS: result, lease. ARGV: token, lease ttl (ms).
_RESULT_OR_LEASE = """
local done = redis.call('get', KEYS[1])
if done then
  return {'done', done}
end
if redis.call('set', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {'leased', ''}
end
return {'busy', ''}
"""

# One round trip for the task's end: commit unless a result is there, release the lease if
# it is still ours, return the winning result. KEYS: result, lease. ARGV: payload, result
# ttl (ms), token.
_COMMIT_AND_RELEASE = """
local current = redis.call('get', KEYS[1])
if not current then
  redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
  current = ARGV[1]
end
if redis.call('get', KEYS[2]) == ARGV[3] then
  redis.call('del', KEYS[2])
end
return current
"""


@dataclass(frozen=True)
class JobState:
    """One consistent snapshot of a job's keys."""

    result: str | None
    error: str | None
    leased: bool
    dispatched: bool


def _text(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8")
    return str(value)


class ResultCache:
    """Reads and commits job results in Redis; every method may raise ``redis.RedisError``."""

    def __init__(self, client: redis.Redis, *, result_ttl: float) -> None:
        self.client = client
        self.result_ttl_ms = max(1, int(result_ttl * 1000))

    def get(self, key: JobKey) -> str | None:
        return _text(self.client.get(key.result))

    def commit(self, key: JobKey, payload: str) -> str:
        """Store ``payload`` unless a result is already there; return the one that is."""
        winner = self.client.eval(
            _SET_IF_ABSENT_RETURN_WINNER, 1, key.result, payload, self.result_ttl_ms
        )
        return _text(winner) or payload

    def result_or_lease(self, key: JobKey, lease: Lease) -> str | None:
        """The committed result; else take ``lease`` and return None; else LeaseBusyError."""
        outcome, value = self.client.eval(
            _RESULT_OR_LEASE, 2, key.result, key.lease, lease.token, lease.ttl_ms
        )
        if _text(outcome) == "done":
            return _text(value)
        if _text(outcome) == "busy":
            raise LeaseBusyError(key.lease)
        return None

    def commit_and_release(self, key: JobKey, payload: str, lease: Lease) -> str:
        """:meth:`commit`, and release ``lease`` if still held, in one round trip."""
        winner = self.client.eval(
            _COMMIT_AND_RELEASE, 2, key.result, key.lease, payload, self.result_ttl_ms, lease.token
        )
        return _text(winner) or payload

    def state(self, key: JobKey) -> JobState:
        pipe = self.client.pipeline(transaction=True)
        pipe.get(key.result)
        pipe.get(key.error)
        pipe.exists(key.lease)
        pipe.exists(key.enqueue)
        result, error, leased, dispatched = pipe.execute()
        return JobState(_text(result), _text(error), bool(leased), bool(dispatched))

    def claim_dispatch(self, key: JobKey, ttl_seconds: float) -> bool:
        """True for the one caller that should publish the task now."""
        ttl_ms = max(1, int(ttl_seconds * 1000))
        return bool(self.client.set(key.enqueue, "1", nx=True, px=ttl_ms))

    def hold_dispatch(self, key: JobKey, ttl_seconds: float) -> None:
        """Mark the job as published for ``ttl_seconds``, whoever holds the mark now.

        A worker that scheduled a retry sets it for the retry's countdown plus the enqueue
        TTL: waiting callers then leave the back-off alone instead of publishing the job
        again at once (and calling an overloaded provider without a pause).
        """
        ttl_ms = max(1, int(ttl_seconds * 1000))
        self.client.set(key.enqueue, "retry", px=ttl_ms)

    def release_dispatch(self, key: JobKey) -> None:
        self.client.delete(key.enqueue)

    def record_error(self, key: JobKey, reason: str, ttl_seconds: float) -> None:
        ttl_ms = max(1, int(ttl_seconds * 1000))
        self.client.set(key.error, reason[:500], px=ttl_ms)
