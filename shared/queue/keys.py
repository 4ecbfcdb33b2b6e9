"""The Redis keys of one job, named by its business key ``(kind, session_id, turn)``.

Every process (agent callers and workers on any host) derives the same names from the
same key, which is what makes the job idempotent: the result, the lease and the enqueue
throttle of ``summary`` for ``(s1, 7)`` are the same three keys everywhere.

    hango:summary:{s1}:7:result   committed result (JSON), set once (first writer wins)
    hango:summary:{s1}:7:lease    random token of the worker computing it, short TTL
    hango:summary:{s1}:7:enqueue  set when a task was published; throttles re-publishing
    hango:summary:{s1}:7:error    why the last attempt failed for good, short TTL
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

JobKind = Literal["summary", "offload"]

KEY_PREFIX = "hango"


@dataclass(frozen=True)
class JobKey:
    kind: JobKind
    session_id: str
    turn: int

    def _name(self, part: str) -> str:
        # The braces make the session a Redis Cluster hash tag: all keys of a job share a slot.
        return f"{KEY_PREFIX}:{self.kind}:{{{self.session_id}}}:{self.turn}:{part}"

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

    def __str__(self) -> str:
        return f"{self.kind}({self.session_id}, turn {self.turn})"
