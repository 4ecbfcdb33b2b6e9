"""The Redis keys of one job, named by its business key ``(kind, session_id, turn)``.

Every process (agent callers and workers on any host) derives the same names from the
same key, which is what makes the job idempotent: the result, the lease and the enqueue
throttle of ``summary`` for ``(s1, 7)`` are the same three keys everywhere.

    hango:summary:{s1}:7:result   committed result (JSON), set once (first writer wins)
    hango:summary:{s1}:7:lease    random token of the worker computing it, short TTL
    hango:summary:{s1}:7:enqueue  set when a task was published; throttles re-publishing
    hango:summary:{s1}:7:error    why the last attempt failed for good, short TTL
    hango:summary:{s1}:7:done     a list pushed when the result (or error) is committed:
                                  waiting callers BLPOP it instead of polling

A job is also named by its range and by a fingerprint of the evicted messages
(``hango:offload:{s1}:7:40-71:9f2c...:result``). A turn has at most one summary, but a
mechanical truncation after it evicts a further range in the same turn, which must be
written rather than answered from the first one's cache; and a session id reused on
another database (or by another deployment sharing the Redis) must never be served the
old conversation's summary. The worker recomputes the fingerprint from the range it
loads and refuses a mismatch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from hango.compaction.jobs import range_fingerprint

JobKind = Literal["summary", "offload"]

KEY_PREFIX = "hango"


@dataclass(frozen=True)
class JobKey:
    kind: JobKind
    session_id: str
    turn: int
    span: tuple[int, int] | None = None
    fingerprint: str = ""

    def _name(self, part: str) -> str:
        # The braces make the session a Redis Cluster hash tag: all keys of a job share a slot.
        scope = str(self.turn)
        if self.span:
            scope += f":{self.span[0]}-{self.span[1]}"
        if self.fingerprint:
            scope += f":{self.fingerprint}"
        return f"{KEY_PREFIX}:{self.kind}:{{{self.session_id}}}:{scope}:{part}"

    @property
    def result(self) -> str:
        return self._name("result")

    @property
    def lease(self) -> str:
        return self._name("lease")

    @property
    def enqueue(self) -> str:
        return self._name("enqueue")

    @property
    def error(self) -> str:
        return self._name("error")

    @property
    def done(self) -> str:
        return self._name("done")

    def __str__(self) -> str:
        span = f", messages {self.span[0]}-{self.span[1]}" if self.span else ""
        return f"{self.kind}({self.session_id}, turn {self.turn}{span})"


__all__ = ["KEY_PREFIX", "JobKey", "JobKind", "range_fingerprint"]
