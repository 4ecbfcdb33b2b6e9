"""The compaction record and the run's private state that carries it.

The record is the only trace compaction leaves: stored messages are never rewritten, so
the outgoing request is always rebuilt as ``[summary message] + messages from
kept_from_seq``. The record lives in the run's state JSON (``runs.state``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from hango.compaction.jobs import JobRef
from hango.compaction.route import SummaryRoute
from hango.core.messages import Usage

CompactionReason = Literal["threshold", "overflow", "tool", "truncate"]


class CompactionRecord(BaseModel):
    model_config = ConfigDict(frozen=True)

    at_turn: int
    reason: CompactionReason
    kept_from_seq: int
    summary: str | None
    offload_path: str | None
    tokens_before: int
    tokens_after: int
    evicted_messages: int
    summarizer: str = "none"
    fallback_reason: str | None = None
    artifacts: tuple[str, ...] = ()
    # The last sequence number the history file holds. Normally kept_from_seq - 1; lower
    # only when a mechanical truncation had to evict messages its offload failed to write
    # (they are still in the store, which is never rewritten).
    offloaded_to_seq: int | None = None
    # The user message that started turn ``at_turn``, verbatim, when this cut evicted it:
    # the head message quotes it, so the task of a long working turn is never known only
    # through a summary. ``None`` when it is kept (or would not fit even alone).
    user_request: str | None = None
    # What the summarizer's model calls cost (kept apart from the agent's own usage).
    summary_usage: Usage | None = None
    # How the summary was made (``range`` or ``prefix``), both routes' expected cost and
    # the real one; ``None`` on records without a summary and on records stored before.
    route: SummaryRoute | None = None

    @property
    def saved_to_seq(self) -> int:
        """The last sequence number whose message the history file holds."""
        offloaded = self.offloaded_to_seq
        return self.kept_from_seq - 1 if offloaded is None else offloaded


class PendingSummary(JobRef):
    """A summary dispatched early, at the watermark, for a compaction the trigger will need:
    the range ``[from_seq, to_seq]``, its messages' ``fingerprint`` (as in the job's key) and
    the ``kept_from_seq`` it builds on (``basis``; None: the first). Used while all still hold.
    """

    basis: int | None


class RunState(BaseModel):
    """The run's private state: ``latest`` is the record the outgoing request is built from,
    ``compactions`` the records this run (turn) made, ``compaction_count`` the session's.

    Each run carries forward only the latest record and the count, so its state stays small
    however long the session grows. ``truncated_before_seq`` is the sticky tool-argument
    truncation (the cached prefix changes only when it moves).
    """

    model_config = ConfigDict(frozen=True)

    latest: CompactionRecord | None = None
    compactions: tuple[CompactionRecord, ...] = ()
    compaction_count: int = 0
    force_compaction: CompactionReason | None = None
    truncated_before_seq: int = 0
    # Real input tokens per estimated token, per model, learned from the provider's usage
    # (``tokens.measure.learned_correction``); carried over so a restart keeps it.
    token_corrections: dict[str, float] = {}
    # The pre-summary in flight (dispatched at the watermark, not installed yet), if any.
    presummary: PendingSummary | None = None

    def with_compaction(self, record: CompactionRecord) -> RunState:
        return self.model_copy(
            update={
                "latest": record,
                "compactions": (*self.compactions, record),
                "compaction_count": self.compaction_count + 1,
                "force_compaction": None,
                # Installed, or summarizing a history this record has just changed.
                "presummary": None,
            }
        )

    def next_turn(self) -> RunState:
        """The state a new turn starts from: what carries over, without this turn's records."""
        return self.model_copy(update={"compactions": ()})
