"""The in-process ``HistoryOffloader``: the evicted range appended to the history file."""

from __future__ import annotations

from hango.compaction.jobs import OffloadJob
from hango.history.base import HistoryBackend
from hango.history.markdown import render_evicted
from hango.history.paths import conversation_history_path


class InlineOffloader:
    """``HistoryOffloader`` writing to a history backend in this process.

    The section key names the turn and the evicted range, so a retried offload of the
    same compaction (overflow retry, resumed turn) appends nothing.
    """

    def __init__(self, history: HistoryBackend) -> None:
        self.history = history

    def offload(self, job: OffloadJob) -> str:
        if not job.evicted:
            raise ValueError(
                f"offload for session {job.session_id!r} turn {job.turn} has no messages"
            )
        path = conversation_history_path(job.session_id)
        section = render_evicted(job.session_id, job.turn, job.evicted)
        self.history.append_section(path, offload_key(job), section)
        return path


def offload_key(job: OffloadJob) -> str:
    """The idempotency key of one offload: turn and evicted range."""
    return f"turn-{job.turn}-seq-{job.from_seq}-{job.to_seq}"
