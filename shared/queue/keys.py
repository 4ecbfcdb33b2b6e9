"""The Redis keys of one job, named by its business key ``(kind, session_id, turn)``.

Every process (agent callers and workers on any host) derives the same names from the
same key, which is what makes the job idempotent: the result, the lease and the enqueue
throttle of ``summary`` for ``(s1, 7)`` are the same three keys everywhere.

    hango:summary:{s1}:7:result   committed result (JSON), set once (first writer wins)
    hango:summary:{s1}:7:lease    random token of the worker computing it, short TTL
    hango:summary:{s1}:7:enqueue  set when a task was published; throttles re-publishing
    hango:summary:{s1}:7:error    why the last attempt failed for good, short TTL

An offload is also named by its range (``hango:offload:{s1}:7:40-71:result``): a turn
has at most one summary, but a mechanical truncation after it evicts a further range in
the same turn, and that range must be written, not answered from the first one's cache.
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
    span: tuple[int, int] | None = None

    def _name(self, part: str) -> str:
        # The braces make the session a Redis Cluster hash tag: all keys of a job share a slot.
        turn = f"{self.turn}:{self.span[0]}-{self.span[1]}" if self.span else str(self.turn)
        return f"{KEY_PREFIX}:{self.kind}:{{{self.session_id}}}:{turn}:{part}"

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
        span = f", messages {self.span[0]}-{self.span[1]}" if self.span else ""
        return f"{self.kind}({self.session_id}, turn {self.turn}{span})"
