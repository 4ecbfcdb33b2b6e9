"""Pre-summarization: the summary a compaction at the trigger needs, dispatched earlier.

Past the watermark (``presummarize_frac`` of the window), with no compaction due, the
range a compaction at the trigger would evict is offloaded and then summarized on a small
shared thread pool, without waiting (at most one per session). At the trigger, a
pre-summary whose range is still a prefix of what must be evicted, over the very same
messages and the same previous summary, is installed at once.

Whether a ready pre-summary still holds is checked on every call in the band, in O(1):
by the identity of its range's stored objects, the fingerprint made at dispatch compared
only when those objects are others (the session was read back from the store).
"""

from __future__ import annotations

import contextvars
import dataclasses
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from hango.compaction.jobs import OffloadJob, SummaryJob, SummaryResult, range_fingerprint
from hango.compaction.record import PendingSummary
from hango.core.messages import StoredMessage
from hango.core.profiles import ModelProfile
from hango.middleware.base import ModelCall
from hango.middleware.evicted import seq_at, stored_before
from hango.tokens.base import Estimator
from hango.tokens.measure import RequestEstimate

# The middleware's own logger: one name for everything it logs.
log = logging.getLogger("hango.middleware.summarization")

# Pre-summaries of all sessions share these threads; each session has at most one in flight.
PRESUMMARY_THREADS = 4
# A ready pre-summary is replaced once what it keeps reaches this share of the target: the
# trigger's request would be larger still by the time it comes.
OUTGROWN_AT = 0.75


@dataclass(frozen=True)
class Presummary:
    """A pre-summary in flight in this process: what it covers and its two results."""

    pending: PendingSummary
    # (offload path, summary): the offload first, as at the trigger; no summary without it.
    work: Future[tuple[str | None, SummaryResult | None]]
    # The first and last stored messages of the range, the very objects it was made from,
    # and how many it holds: what makes its validity an O(1) check (see still_valid).
    first: StoredMessage
    last: StoredMessage
    count: int


# What a pre-summary's thread does: the offload, then (only if it succeeded) the summary.
Work = Callable[[OffloadJob, SummaryJob], tuple[str | None, SummaryResult | None]]


class Presummaries:
    """The pre-summaries of one middleware's sessions, at most one per session."""

    def __init__(
        self,
        *,
        profile: ModelProfile,
        estimator: Estimator,
        estimate: RequestEstimate,
        work: Work,
    ) -> None:
        self.profile = profile
        self.estimator = estimator
        self.estimate = estimate
        self._work = work
        self.items: dict[str, Presummary] = {}
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None

    def dispatch(self, call: ModelCall, tokens: int, boundary: Callable[[], int | None]) -> None:
        """Dispatch, without waiting, what a compaction at the trigger will need.

        The range is the one the trigger's boundary would evict now (tool groups kept
        whole, anchored by sequence numbers); at the trigger more messages exist, so the
        trigger's range starts with this one. Nothing is dispatched while a pre-summary of
        the session is still usable.
        """
        with self._lock:
            current = self.items.get(call.session_id)
        usable = current is not None and self.still_valid(call, current)
        if usable and current is not None and not self._outgrown(call, current, tokens):
            return
        at = boundary()
        if at is None:
            return
        evicted = stored_before(call, seq_at(call, at))
        if not evicted:
            return
        previous = call.state.state.latest
        pending = PendingSummary(
            turn=call.turn,
            from_seq=evicted[0].seq,
            to_seq=evicted[-1].seq,
            fingerprint=range_fingerprint(evicted),
            basis=previous.kept_from_seq if previous else None,
        )
        summary_job = SummaryJob(
            session_id=call.session_id,
            turn=call.turn,
            from_seq=pending.from_seq,
            to_seq=pending.to_seq,
            previous_summary=previous.summary if previous else None,
            evicted=evicted,
            model=self.profile.summarizer_model or call.request.model,
        )
        offload_job = OffloadJob(
            session_id=call.session_id,
            turn=call.turn,
            from_seq=pending.from_seq,
            to_seq=pending.to_seq,
            evicted=evicted,
        )
        # The dispatching turn's context (its trace span) goes along to the pool's thread.
        context = contextvars.copy_context()
        work = self._threads().submit(context.run, self._work, offload_job, summary_job)
        started = Presummary(
            pending=pending, work=work, first=evicted[0], last=evicted[-1], count=len(evicted)
        )
        with self._lock:
            self.items[call.session_id] = started
        call.state.presummarize(pending)
        log.info(
            "session %s turn %d: pre-summarizing messages %d-%d",
            call.session_id,
            call.turn,
            pending.from_seq,
            pending.to_seq,
        )

    def _outgrown(self, call: ModelCall, current: Presummary, tokens: int) -> bool:
        """Whether a ready pre-summary would no longer bring the request under the target.

        Then a fresh one, over the longer prefix, replaces it: installing it at the trigger
        would fail its fit check and the turn would wait for a summary after all. One in
        flight is never replaced (at most one summarizer call per session at a time).
        """
        if not current.work.done():
            return False
        path, result = current.work.result()
        if path is None or result is None:
            return True
        index = call.index_of(current.pending.to_seq + 1)
        if index is None:
            return True
        # The request from ``index`` on is estimated as the whole minus what lies before:
        # the running per-message figures answer both without a walk over the messages.
        whole, before = self.estimate.split(call.request, index)
        scale = tokens / whole if whole > 0 else 1.0
        summary = self.estimator.estimate(result.text)
        kept_tokens = (whole - before + summary) * scale
        return kept_tokens > self.profile.target_tokens * OUTGROWN_AT

    def _threads(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    PRESUMMARY_THREADS, thread_name_prefix="hango-presummary"
                )
            return self._executor

    def still_valid(self, call: ModelCall, ready: Presummary) -> bool:
        """The pre-summary covers these very messages on top of the same previous summary.

        In O(1), whatever the range's length: the loop's stored messages are the very
        objects it read or appended, in a list it only ever appends to, so the range's
        first and last objects at the same distance are the same range. Other objects (the
        loop read the session back from the store) are compared with the fingerprint made
        at dispatch, once: a match pins them.
        """
        pending = ready.pending
        previous = call.state.state.latest
        if pending.basis != (previous.kept_from_seq if previous else None):
            return False
        stored = call.stored
        count = ready.count
        if len(stored) >= count and stored[0] is ready.first and stored[count - 1] is ready.last:
            return True
        covered = stored_before(call, pending.to_seq + 1)
        if not covered or covered[0].seq != pending.from_seq:
            return False
        if range_fingerprint(covered) != pending.fingerprint:
            return False
        self._pin(call.session_id, ready, covered)
        return True

    def _pin(self, session_id: str, ready: Presummary, covered: Sequence[StoredMessage]) -> None:
        pinned = dataclasses.replace(ready, first=covered[0], last=covered[-1], count=len(covered))
        with self._lock:
            if self.items.get(session_id) is ready:
                self.items[session_id] = pinned

    def take(
        self, call: ModelCall, first_real: int, boundary: int
    ) -> tuple[Presummary, int] | None:
        """The session's pre-summary and the index it keeps from, if it can be installed
        at a compaction that keeps from ``boundary`` (a cut after ``first_real``)."""
        with self._lock:
            ready = self.items.pop(call.session_id, None)
        if ready is None:
            return None
        pending = ready.pending
        call.state.presummarize(None)
        index = call.index_of(pending.to_seq + 1)
        usable = (
            index is not None and first_real < index <= boundary and self.still_valid(call, ready)
        )
        if not usable or index is None:
            log.info(
                "session %s turn %d: the pre-summary of messages %d-%d no longer matches; "
                "summarizing now",
                call.session_id,
                call.turn,
                pending.from_seq,
                pending.to_seq,
            )
            return None
        return ready, index
