"""Pre-summarization: the summary a compaction at the trigger needs, dispatched earlier.

When the pacer says one is due (``pacing.py``), the range a compaction at the trigger is
projected to evict is summarized on a small shared thread pool, without waiting (at most
one per session in flight). A ready one that will not fit at the trigger, or falls a third
of the target short of what a cut made then would evict, is extended: the next job
summarizes only the messages past it, on top of its text, and the ready one stays the
fallback until the extension is ready. Nothing is offloaded here: the range goes to the
history file when a compaction installs it, so a replaced pre-summary writes nothing and
each evicted message is written once.
"""

from __future__ import annotations

import contextvars
import dataclasses
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from hango.compaction.head import head_message
from hango.compaction.jobs import JobRef, SummaryJob, SummaryResult, range_fingerprint
from hango.compaction.pace import outgrows
from hango.compaction.record import PendingSummary
from hango.compaction.summary_fit import briefing_budget
from hango.core.messages import StoredMessage, summed_usage
from hango.core.profiles import ModelProfile
from hango.history.paths import conversation_history_path
from hango.middleware.base import ModelCall
from hango.middleware.evicted import (
    MEASURED_SUMMARY,
    seq_at,
    stored_before,
    summary_record,
    tokens_between,
)
from hango.middleware.pacing import Pacer
from hango.middleware.summary_route import PRESUMMARY_OPENING, RoutedSummary, SummaryRouter
from hango.tokens.base import Estimator
from hango.tokens.measure import RequestEstimate

# The middleware's own logger: one name for everything it logs.
log = logging.getLogger("hango.middleware.summarization")

# Pre-summaries of all sessions share these threads; each session has at most one in flight.
PRESUMMARY_THREADS = 4

# A ready pre-summary leaving a third of the target or more verbatim is extended for coverage
# (``Presummaries._short_of``). Measured on the corpus (docs/benchmarks.md, 2026-12-03
# "coverage"): at a quarter more were extended, the summaries cost more and one
# transcript's cache-read share fell; at the trigger's slack (trigger - target) none was.
COVERAGE_SHARE = 3


@dataclass(frozen=True)
class Presummary:
    """A pre-summary in flight in this process: what it covers and its result."""

    pending: PendingSummary
    # The summary, when it was ready (on the pacer's clock) and its estimated tokens.
    work: Future[tuple[SummaryResult, float, int]]
    # The first and last stored messages of the range, the very objects it was made from,
    # and how many it holds: what makes its validity an O(1) check (see still_valid).
    first: StoredMessage
    last: StoredMessage
    count: int
    # When it was dispatched, on the pacer's clock.
    started: float
    # The ready pre-summary this one extends: installed instead at a trigger that comes
    # before this one is ready, when it fits (never a chain: its own is dropped).
    fallback: Presummary | None = None
    # Where its job's result is found (an extension of it names this to a worker).
    ref: JobRef | None = None


@dataclass(kw_only=True, eq=False)
class Presummaries:
    """The pre-summaries of one middleware's sessions, at most one per session."""

    profile: ModelProfile
    estimator: Estimator
    estimate: RequestEstimate
    work: Callable[[SummaryJob], SummaryResult]
    pacer: Pacer
    router: SummaryRouter

    def __post_init__(self) -> None:
        self.items: dict[str, Presummary] = {}
        self._lock = threading.Lock()
        # Its threads start with the first pre-summary submitted.
        self._threads = ThreadPoolExecutor(
            PRESUMMARY_THREADS, thread_name_prefix="hango-presummary"
        )

    def dispatch(self, call: ModelCall, tokens: int, boundary: Callable[[int], int | None]) -> None:
        """Dispatch, without waiting, what a compaction at the trigger will need.

        The range is the one the trigger's boundary is projected to evict (tool groups
        kept whole, anchored by sequence numbers, the messages still to come counted in
        its keep share: ``boundary(ahead)``); at the trigger more messages exist, so the
        trigger's range starts with this one. When a ready one is extended instead: see the
        module docstring, :meth:`_outgrown` and :meth:`_short_of`.
        """
        with self._lock:
            current = self.items.get(call.session_id)
        extended = current if current is not None and self.still_valid(call, current) else None
        fits = None
        if extended is not None:
            outgrown = self._outgrown_when_due(call, extended, tokens)
            if outgrown is None:
                return
            fits = None if outgrown else extended
        ahead = self.pacer.messages_ahead(call.session_id, tokens, self.profile.trigger_tokens)
        # Not outgrown, a ready one is extended only for coverage, judged at the cut. Finding
        # the cut walks the whole history, and this is asked on every call in the band: the
        # cut lies at or before where the raw keep window starts (it moves back to a group
        # start), so one not short of that start is not short of the cut.
        kept_from = self.profile.kept_from(len(call.request.messages), call.first_real, ahead)
        if fits is not None and not self._short_of(call, fits, tokens, kept_from):
            return
        at = boundary(ahead)
        evicted = () if at is None else stored_before(call, seq_at(call, at))
        if at is None or not evicted or (extended and evicted[-1].seq <= extended.pending.to_seq):
            return  # nothing, or nothing more than the pre-summary it would replace covers
        if fits is not None and not self._short_of(call, fits, tokens, at):
            return
        self._start(call, evicted, extended, at)

    def _start(
        self,
        call: ModelCall,
        evicted: tuple[StoredMessage, ...],
        extended: Presummary | None,
        at: int,
    ) -> None:
        previous = call.run_state.latest
        pending = PendingSummary(
            turn=call.turn,
            from_seq=evicted[0].seq,
            to_seq=evicted[-1].seq,
            fingerprint=range_fingerprint(evicted),
            basis=previous.kept_from_seq if previous else None,
        )
        before = self.estimate.split(call.request, at)[1]
        # The briefing's budget is a share of what it replaces, capped by the least room a
        # compaction at the trigger leaves its summary (compacting.py).
        budget = briefing_budget(before, self.profile.target_tokens // 4)
        job = summary_job(call, evicted, self.profile, budget, extended)
        # Routed now, on the turn's thread; an extension's range is priced as it is built.
        reads = None if extended is not None else before
        routed = self.router.begin(call, at, job, self.work, reads, PRESUMMARY_OPENING)
        # The dispatching turn's context (its trace span) goes along to the pool's thread.
        context = contextvars.copy_context()
        started = self.pacer.clock()
        carried = None if extended is None else extended.work.result()[0]
        frame = self._frame(call, evicted, pending.to_seq + 1)
        work = self._threads.submit(
            context.run, self._summary, routed, job, started, carried, frame
        )
        fallback = None if extended is None else dataclasses.replace(extended, fallback=None)
        presummary = Presummary(
            pending, work, evicted[0], evicted[-1], len(evicted), started, fallback, job.ref()
        )
        with self._lock:
            self.items[call.session_id] = presummary
        call.state.presummarize(pending)
        log.info(
            "session %s turn %d: pre-summarizing messages %d-%d",
            call.session_id,
            call.turn,
            job.from_seq,
            job.to_seq,
        )

    def _frame(self, call: ModelCall, evicted: Sequence[StoredMessage], kept_from_seq: int) -> int:
        """Tokens of the head that installs this pre-summary, all but the summary's own (its
        frame, the artifact index, a quoted user request): what it keeps is judged with it."""
        path = conversation_history_path(call.session_id)
        record = summary_record(
            call, "threshold", 0, kept_from_seq, evicted, path, MEASURED_SUMMARY
        )
        return self.estimator.estimate(head_message(record).text())

    def _summary(
        self,
        routed: RoutedSummary,
        job: SummaryJob,
        started: float,
        carried: SummaryResult | None,
        frame: int,
    ) -> tuple[SummaryResult, float, int]:
        """The summary, with the usage and cost of the pre-summaries it extends
        (``carried``): the record of the compaction that installs it accounts for the whole
        chain. Its estimate (with ``frame``, the head around it) is made here, once, off the
        turn: every call in the band weighs it."""
        began = time.monotonic()
        result = routed.finish(routed.ask(job))
        if result.route is not None and result.route.name == "prefix":
            # The range route times itself (``pacing.Timed``); the prefix one is timed here,
            # under the job's model: the next start is paced on what summaries take.
            self.pacer.took(job.model, time.monotonic() - began)
        if carried is not None:
            result = _carrying(result, carried)
        return result, self.pacer.ready_at(started), frame + self.estimator.estimate(result.text)

    def _outgrown_when_due(self, call: ModelCall, ready: Presummary, tokens: int) -> bool | None:
        """``None`` while no extension of ``ready`` is due; once one is, whether ``ready`` is
        outgrown (:meth:`_outgrown`). Due when it is ready and the trigger may come within
        the growth of an extension's latency: before that, a later call extends it in time
        and covers more. With the pace off or not yet known (no such horizon), due only
        when it outgrows: the cut is then computed only when an extension is sure to be
        made, as before."""
        if not self.pacer.is_ready(ready.started, ready.work):
            return None
        within = self._within(call)
        unbounded = math.isinf(within)
        if not unbounded and tokens + within <= self.profile.trigger_tokens:
            return None
        outgrown = self._outgrown(call, ready, tokens, within)
        return None if unbounded and not outgrown else outgrown

    def _within(self, call: ModelCall) -> float:
        summarizer = self.profile.summarizer_model or call.request.model
        return self.pacer.growth_within_horizon(call.session_id, summarizer)

    def _short_of(self, call: ModelCall, ready: Presummary, tokens: int, at: int) -> bool:
        """Whether ``ready`` leaves a third of the target or more before ``at`` verbatim
        (``COVERAGE_SHARE``): then it is extended up to ``at`` although it fits.

        One dispatched right after a compaction (its request over the floor, the pace
        saying start now) may cover a few messages, fit under the target at the trigger,
        and leave a kept context so large that the next compaction comes sooner
        (``docs/benchmarks.md``). Only with the pace on (see :meth:`_outgrown_when_due`): with
        it off a pre-summary starts at the fixed floor and is extended only to fit.
        """
        index = call.index_of(ready.pending.to_seq + 1)
        if index is None:
            return False
        short = tokens_between(call, self.estimate, tokens, index, at)
        return short >= self.profile.target_tokens / COVERAGE_SHARE

    def _outgrown(self, call: ModelCall, current: Presummary, tokens: int, within: float) -> bool:
        """Whether a ready pre-summary could no longer bring the request under the target
        at a trigger that comes before an extension started at the next call is ready
        (the request grows by at most ``within`` until then): installed then, it would
        fail its fit check and the turn would wait after all."""
        _, _, summary = current.work.result()
        index = call.index_of(current.pending.to_seq + 1)
        if index is None:
            return True
        # The request from ``index`` on is estimated as the whole minus what lies before:
        # the running per-message figures answer both without a walk over the messages.
        whole, before = self.estimate.split(call.request, index)
        scale = tokens / whole if whole > 0 else 1.0
        kept_tokens = round((whole - before + summary) * scale)
        trigger, target = self.profile.trigger_tokens, self.profile.target_tokens
        growth = self.pacer.growth(call.session_id)
        return outgrows(kept_tokens, tokens, trigger, target, growth, within)

    def still_valid(self, call: ModelCall, ready: Presummary) -> bool:
        """The pre-summary covers these very messages on top of the same previous summary.

        In O(1), whatever the range's length: the loop's stored messages are the very
        objects it read or appended, in a list it only ever appends to, so the range's
        first and last objects at the same distance are the same range. Other objects (the
        loop read the session back from the store) are compared with the fingerprint made
        at dispatch, once: a match pins them.
        """
        pending = ready.pending
        previous = call.run_state.latest
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

    def settle(self) -> None:
        """Wait for every pre-summary in flight: a report made after a run then counts
        what each one cost, whatever the pool's threads were doing when the run ended."""
        with self._lock:
            works = [item.work for item in self.items.values()]
        for work in works:
            work.exception()  # waits; a failure is the caller's to report, not this one's

    def take(self, call: ModelCall) -> tuple[Presummary, ...]:
        """The session's pre-summaries to try at the trigger, in order (none pending after):
        what is ready first, then what is not."""
        with self._lock:
            newest = self.items.pop(call.session_id, None)
        if newest is None:
            return ()
        call.state.presummarize(None)
        if newest.fallback is None or self.pacer.is_ready(newest.started, newest.work):
            return (newest,)
        return (newest.fallback, newest)

    def index_to_install(self, call: ModelCall, ready: Presummary, boundary: int) -> int | None:
        """The index ``ready`` keeps from, if it can be installed at a compaction that
        keeps from ``boundary`` (a cut after the call's head message, if any)."""
        pending, first_real = ready.pending, call.first_real
        index = call.index_of(pending.to_seq + 1)
        if index is not None and first_real < index <= boundary and self.still_valid(call, ready):
            return index
        log.info(
            "session %s turn %d: the pre-summary of messages %d-%d no longer matches; "
            "summarizing now",
            call.session_id,
            call.turn,
            pending.from_seq,
            pending.to_seq,
        )
        return None


def _carrying(result: SummaryResult, carried: SummaryResult) -> SummaryResult:
    """``result`` with ``carried``'s usage added, and its route's cost."""
    usage = summed_usage(carried.usage, result.usage)
    route = result.route
    earlier = carried.route.cost_usd if carried.route is not None else None
    if route is not None and earlier is not None:
        route = route.model_copy(update={"cost_usd": (route.cost_usd or 0.0) + earlier})
    return result.model_copy(update={"usage": usage, "route": route})


def summary_job(
    call: ModelCall,
    evicted: tuple[StoredMessage, ...],
    profile: ModelProfile,
    budget: int,
    extended: Presummary | None = None,
) -> SummaryJob:
    """The job of a summary: its whole range on top of the last record's summary, or,
    extending a ready pre-summary, only the messages past it on top of that one's text; its
    length budget asked for in its prompt."""
    previous = call.run_state.latest
    base = previous.summary if previous else None
    builds_on = None
    if extended is not None:
        base = extended.work.result()[0].text
        builds_on = extended.ref
        evicted = tuple(m for m in evicted if m.seq > extended.pending.to_seq)
    return SummaryJob(
        session_id=call.session_id,
        turn=call.turn,
        from_seq=evicted[0].seq,
        to_seq=evicted[-1].seq,
        previous_summary=base,
        evicted=evicted,
        model=profile.summarizer_model or call.request.model,
        builds_on=builds_on,
        budget=budget,
    )
