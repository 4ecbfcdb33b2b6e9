"""The two slow operations of compaction, behind small ports.

The middleware only knows these protocols. The in-process implementations run the work
inline (the embedded default and the fallback); the queued ones (``hango.queue``) send a
Celery task keyed by ``(session_id, turn)`` and wait for its result in Redis.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from hango.compaction.route import SummaryRoute
from hango.core.messages import StoredMessage, Usage


class JobRef(BaseModel):
    """Where a summary job's result is found. Numbers and a digest only, so a task may carry
    it: an extension of a pre-summary names the job whose text it builds on, and a worker
    reads that text from the (signed) result cache, not from the task's arguments."""

    model_config = ConfigDict(frozen=True)

    turn: int
    from_seq: int
    to_seq: int
    fingerprint: str


class SummaryJob(BaseModel):
    """What to summarize: the evicted range ``[from_seq, to_seq]`` of one session (a queued
    summarizer sends only the numbers; the worker reloads ``evicted`` from the store)."""

    model_config = ConfigDict(frozen=True)

    session_id: str
    turn: int
    from_seq: int
    to_seq: int
    previous_summary: str | None
    evicted: tuple[StoredMessage, ...]
    model: str
    # A cap on the summary's length: set when a first summary did not fit its room.
    max_tokens: int | None = None
    # The briefing's length asked for (``summary_fit.briefing_budget``): the prompt asks for
    # it and the request leaves it headroom (:meth:`reply_cap`).
    budget: int | None = Field(default=None, ge=1)
    # The job whose result ``previous_summary`` is, when that is a pre-summary this one
    # extends (not yet in any compaction record).
    builds_on: JobRef | None = None

    def asked_length(self) -> int | None:
        """The length the briefing is asked to keep under: the cap if set, else the budget."""
        return self.max_tokens or self.budget

    def reply_cap(self, default: int) -> int:
        """The request's ``max_tokens``. A cap is hard; a budget gets twice its length, so a
        reply a little over what was asked is finished, not cut off and paid for in vain."""
        if self.max_tokens:
            return self.max_tokens
        return min(default, 2 * self.budget) if self.budget else default

    def ref(self) -> JobRef:
        return JobRef(
            turn=self.turn,
            from_seq=self.from_seq,
            to_seq=self.to_seq,
            fingerprint=range_fingerprint(self.evicted),
        )


class SummaryResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    text: str
    summarizer: str
    usage: Usage | None = None
    fallback_reason: str | None = None
    # Set by the in-process router (``middleware/summary_route.py``); ``None``: range.
    route: SummaryRoute | None = None


class OffloadJob(BaseModel):
    model_config = ConfigDict(frozen=True)

    session_id: str
    turn: int
    from_seq: int
    to_seq: int
    evicted: tuple[StoredMessage, ...]


class Summarizer(Protocol):
    def summarize(self, job: SummaryJob) -> SummaryResult: ...


class HistoryOffloader(Protocol):
    def offload(self, job: OffloadJob) -> str:
        """Append the evicted range to the session's history file; return its path."""


def range_fingerprint(evicted: Sequence[StoredMessage]) -> str:
    """A short digest of the evicted messages: same range, same content, same digest."""
    digest = hashlib.sha256()
    for stored in evicted:
        payload = [stored.seq, stored.message.to_api()]
        digest.update(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode())
    return digest.hexdigest()[:16]


def summary_digest(text: str | None) -> str:
    """A short digest of a previous summary (``""`` for none): task arguments carry no
    conversation text, so the worker reads it from the store and checks it against this."""
    return "" if text is None else hashlib.sha256(text.encode()).hexdigest()[:16]
