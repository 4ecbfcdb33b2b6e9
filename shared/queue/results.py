"""The Redis side of a job: its committed result, error marker and dispatch throttle.

The result of ``(kind, session_id, turn)`` is committed once: a Lua script sets it only
if absent and returns whichever value won, so a worker, a duplicate worker and an agent
that fell back inline all end up returning the same text (invariant 4: one committed
summary per turn).

The same script pushes onto the job's ``done`` list, in the same atomic step, so a
waiting caller blocked in ``BLPOP`` wakes the moment the result exists; a woken caller
pushes the token back for the next one. The stored result stays the source of truth:
the list only says "look now", and a caller that misses it still sees the result at its
next check.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import redis

from hango.core.errors import LeaseBusyError
from hango.queue.keys import JobKey
from hango.queue.lease import Lease
from hango.queue.signing import SECRET_VARIABLE, ResultSigner

log = logging.getLogger(__name__)

# A value that fails the check is deleted and the step tried again, this many times at
# most (a rogue writer racing the cache cannot keep it busy for ever).
FORGERY_RETRIES = 3

# How long a job's wake-up list lives: only callers waiting right now use it.
DONE_TTL_MS = 300_000

# KEYS: result, done. ARGV: payload, result ttl (ms), done ttl (ms).
_SET_IF_ABSENT_RETURN_WINNER = """
local current = redis.call('get', KEYS[1])
if current then
  return current
end
redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('rpush', KEYS[2], '1')
redis.call('pexpire', KEYS[2], ARGV[3])
return ARGV[1]
"""

# KEYS: error, done. ARGV: reason, error ttl (ms), done ttl (ms).
_RECORD_ERROR_AND_WAKE = """
redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('rpush', KEYS[2], '1')
redis.call('pexpire', KEYS[2], ARGV[3])
return 1
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

# One round trip for the task's end: commit unless a result is there (waking the waiting
# callers), release the lease if it is still ours, return the winning result.
# KEYS: result, lease, done. ARGV: payload, result ttl (ms), token, done ttl (ms).
_COMMIT_AND_RELEASE = """
local current = redis.call('get', KEYS[1])
if not current then
  redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
  redis.call('rpush', KEYS[3], '1')
  redis.call('pexpire', KEYS[3], ARGV[4])
  current = ARGV[1]
end
if redis.call('get', KEYS[2]) == ARGV[3] then
  redis.call('del', KEYS[2])
end
return current
"""


# Deletes a rejected value only if it is still the one that was checked.
# KEYS: result. ARGV: the rejected value.
_DELETE_IF_SAME = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0
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
    """Reads and commits job results in Redis; every method may raise ``redis.RedisError``.

    Results are signed (:mod:`hango.queue.signing`): every read returns only a value
    whose MAC matches its key; anything else is logged, counted in :attr:`rejected`,
    deleted, and read as absent, so the job is computed again.
    """

    def __init__(self, client: redis.Redis, *, result_ttl: float, signer: ResultSigner) -> None:
        self.client = client
        self.result_ttl_ms = max(1, int(result_ttl * 1000))
        self.signer = signer
        self.rejected = 0
        self._delete_if_same = client.register_script(_DELETE_IF_SAME)
        # Registered once: each call is then one EVALSHA, not the script's text again.
        self._set_if_absent = client.register_script(_SET_IF_ABSENT_RETURN_WINNER)
        self._commit_and_release = client.register_script(_COMMIT_AND_RELEASE)
        self._result_or_lease = client.register_script(_RESULT_OR_LEASE)
        self._record_error = client.register_script(_RECORD_ERROR_AND_WAKE)

    def _opened(self, key: JobKey, stored: object) -> str | None:
        """The payload of a stored value, or None (absent, or rejected and deleted)."""
        text = _text(stored)
        if text is None:
            return None
        payload = self.signer.open(key.result, text)
        if payload is None:
            self.rejected += 1
            log.error(
                "%s: a result in Redis failed its signature check and was discarded (%d so "
                "far): written by something else, copied from another job, or signed with "
                "another %s",
                key,
                self.rejected,
                SECRET_VARIABLE,
            )
            self._delete_if_same(keys=[key.result], args=[text])
        return payload

    def get(self, key: JobKey) -> str | None:
        return self._opened(key, self.client.get(key.result))

    def commit(self, key: JobKey, payload: str) -> str:
        """Store ``payload`` unless a result is already there; return the one that is."""
        signed = self.signer.sign(key.result, payload)
        for _ in range(FORGERY_RETRIES):
            winner = self._set_if_absent(
                keys=[key.result, key.done], args=[signed, self.result_ttl_ms, DONE_TTL_MS]
            )
            opened = self._opened(key, winner)
            if opened is not None:
                return opened
        return payload  # ours is the only genuine one: never a rejected value

    def result_or_lease(self, key: JobKey, lease: Lease) -> str | None:
        """The committed result; else take ``lease`` and return None; else LeaseBusyError."""
        for _ in range(FORGERY_RETRIES):
            outcome, value = self._result_or_lease(
                keys=[key.result, key.lease], args=[lease.token, lease.ttl_ms]
            )
            if _text(outcome) == "busy":
                raise LeaseBusyError(key.lease)
            if _text(outcome) != "done":
                return None
            opened = self._opened(key, value)
            if opened is not None:
                return opened
        raise LeaseBusyError(key.lease)  # someone keeps planting values: try again later

    def commit_and_release(self, key: JobKey, payload: str, lease: Lease) -> str:
        """:meth:`commit`, and release ``lease`` if still held, in one round trip."""
        signed = self.signer.sign(key.result, payload)
        for _ in range(FORGERY_RETRIES):
            winner = self._commit_and_release(
                keys=[key.result, key.lease, key.done],
                args=[signed, self.result_ttl_ms, lease.token, DONE_TTL_MS],
            )
            opened = self._opened(key, winner)
            if opened is not None:
                return opened
        return payload

    def wait_for_commit(self, key: JobKey, timeout: float) -> bool:
        """Block until the job's result or error is committed, at most ``timeout`` seconds.

        True when woken by a commit. The token is pushed back so every other caller
        waiting on the same job wakes too (one ``BLPOP`` wakes one client).
        """
        woken = self.client.blpop([key.done], timeout=max(0.001, timeout))
        if woken is None:
            return False
        pipe = self.client.pipeline(transaction=False)
        pipe.rpush(key.done, "1")
        pipe.pexpire(key.done, DONE_TTL_MS)
        pipe.execute()
        return True

    def state(self, key: JobKey) -> JobState:
        pipe = self.client.pipeline(transaction=True)
        pipe.get(key.result)
        pipe.get(key.error)
        pipe.exists(key.lease)
        pipe.exists(key.enqueue)
        result, error, leased, dispatched = pipe.execute()
        opened = self._opened(key, result)
        return JobState(opened, _text(error), bool(leased), bool(dispatched))

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
        """Record why the job failed for good, and wake its callers so they fall back now."""
        ttl_ms = max(1, int(ttl_seconds * 1000))
        self._record_error(keys=[key.error, key.done], args=[reason[:500], ttl_ms, DONE_TTL_MS])
