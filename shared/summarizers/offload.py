"""The in-process ``HistoryOffloader``: the evicted range appended to the history file."""

from __future__ import annotations

import re

from hango.compaction.jobs import OffloadJob
from hango.history.base import HistoryBackend
from hango.history.markdown import render_evicted
from hango.history.paths import conversation_history_path, section_keys

_KEY = re.compile(r"turn-\d+-seq-(\d+)-(\d+)")


class InlineOffloader:
    """``HistoryOffloader`` writing to a history backend in this process.

    Each evicted message is written once: messages a section of the file already holds
    (an earlier attempt of this compaction that evicted less, then fell back to a larger
    cut) are left out, and the section key names the turn and the range written, so a
    retried offload of the same compaction (overflow retry, resumed turn) appends nothing.
    """

    def __init__(self, history: HistoryBackend) -> None:
        self.history = history

    def offload(self, job: OffloadJob) -> str:
        if not job.evicted:
            raise ValueError(
                f"offload for session {job.session_id!r} turn {job.turn} has no messages"
            )
        path = conversation_history_path(job.session_id)
        held = self._held(path)
        fresh = tuple(m for m in job.evicted if m.seq not in held)
        if fresh:
            section = render_evicted(job.session_id, job.turn, fresh)
            key = offload_key(job.model_copy(update={"evicted": fresh}))
            self.history.append_section(path, key, section)
        return path

    def _held(self, path: str) -> set[int]:
        """The sequence numbers the history file's sections already hold."""
        held: set[int] = set()
        for key in self._keys(path):
            found = _KEY.fullmatch(key)
            if found:
                held.update(range(int(found[1]), int(found[2]) + 1))
        return held

    def _keys(self, path: str) -> set[str]:
        # A backend written before the protocol asked for ``section_keys`` still works:
        # its file is read and searched here, as every backend did before.
        asked = getattr(self.history, "section_keys", None)
        if asked is not None:
            return set(asked(path))
        try:
            return section_keys(self.history.read(path))
        except FileNotFoundError:
            return set()


def offload_key(job: OffloadJob) -> str:
    """The idempotency key of one offload: turn and the range it writes."""
    first, last = job.evicted[0].seq, job.evicted[-1].seq
    return f"turn-{job.turn}-seq-{first}-{last}"
