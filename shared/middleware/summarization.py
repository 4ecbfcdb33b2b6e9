"""The summarization middleware: keeps the outgoing request under the trigger.

It counts the whole outgoing request (the provider's counter under a deadline, else the
estimate). Over the trigger, or when forced (overflow, the ``compact_conversation`` tool),
it evicts the oldest atomic tool groups: first offloads them to the history file
(nothing leaves the request that was not offloaded), then obtains the summary, builds
``[summary message] + kept``, validates it and records the compaction in the run's
private state. A request that fails validation is never sent: the compaction is abandoned
and mechanical truncation is used instead.

Ahead of the trigger, past the watermark (``presummarize_frac`` of the window), the summary
and the offload of the range a compaction at the trigger would evict are dispatched on a
background thread without waiting (one per session). At the trigger, a pre-summary whose
range is still a prefix of what must be evicted, over the very same messages and the same
previous summary, is installed at once: the messages appended since stay verbatim when the
result fits under the post-compaction target; otherwise the normal path runs.

The stored messages are never touched; only the copy on its way to the provider changes.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from hango.compaction.boundary import keep_boundary
from hango.compaction.extractive import ExtractiveSummarizer
from hango.compaction.head import head_message
from hango.compaction.jobs import (
    HistoryOffloader,
    OffloadJob,
    Summarizer,
    SummaryJob,
    SummaryResult,
    range_fingerprint,
)
from hango.compaction.mechanical import drop_oldest_groups
from hango.compaction.record import CompactionReason, CompactionRecord, PendingSummary
from hango.compaction.summary_prompt import artifact_index
from hango.compaction.validate import Violation, validate_messages
from hango.core.errors import CannotFitError
from hango.core.identity import RecentlyUsed
from hango.core.messages import Message, Response, StoredMessage
from hango.core.profiles import ModelProfile
from hango.history.paths import conversation_history_path
from hango.middleware.base import Handler, ModelCall, PassThrough
from hango.middleware.observer import LoopObserver, NullObserver
from hango.providers.base import Provider
from hango.tokens.base import Estimator
from hango.tokens.measure import (
    Anchor,
    RequestEstimate,
    can_count_tokens,
    learned_correction,
    measure_input_tokens,
    near,
)

log = logging.getLogger(__name__)

# Identifiers carried in the head message's artifact index, newest last.
MAX_ARTIFACTS = 200


class _Figures:
    """What the middleware remembers of one session: the anchor of its token figure."""

    def __init__(self) -> None:
        self.anchor: Anchor | None = None


@dataclass(frozen=True)
class _Plan:
    boundary: int
    first_real: int


# Pre-summaries of all sessions share these threads; each session has at most one in flight.
PRESUMMARY_THREADS = 4
# A ready pre-summary is replaced once what it keeps reaches this share of the target: the
# trigger's request would be larger still by the time it comes.
OUTGROWN_AT = 0.75


@dataclass(frozen=True)
class _Presummary:
    """A pre-summary in flight in this process: what it covers and its two results."""

    pending: PendingSummary
    # (offload path, summary): the offload first, as at the trigger; no summary without it.
    work: Future[tuple[str | None, SummaryResult | None]]
    # The first and last stored messages of the range, the very objects it was made from,
    # and how many it holds: what makes its validity an O(1) check (see _still_valid).
    first: StoredMessage
    last: StoredMessage
    count: int


class SummarizationMiddleware(PassThrough):
    def __init__(
        self,
        *,
        profile: ModelProfile,
        estimator: Estimator,
        counter: Provider,
        count_timeout: float,
        summarizer: Summarizer,
        offloader: HistoryOffloader,
        observer: LoopObserver | None = None,
        validator: Callable[[Sequence[Message]], list[Violation]] = validate_messages,
        count_band: float = 0.10,
        presummarize_frac: float | None = None,
    ) -> None:
        self.profile = profile
        self.estimator = estimator
        self.estimate = RequestEstimate(estimator)
        self.counter = counter
        self.count_timeout = count_timeout
        self.summarizer = summarizer
        self.offloader = offloader
        self.observer = observer or NullObserver()
        self.validator = validator
        self.count_band = count_band
        self._figures: RecentlyUsed[_Figures] = RecentlyUsed()
        self.watermark = _watermark(profile, presummarize_frac)
        self._presummaries: dict[str, _Presummary] = {}
        self._presummaries_lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None

    def wrap(self, call: ModelCall, call_next: Handler) -> Response:
        tokens = self._measure(call)
        call.state.measured(tokens)
        reason = self._reason(call, tokens)
        if reason is None and self.watermark is not None and tokens > self.watermark:
            self._presummarize(call, tokens)
        outgoing = call if reason is None else self._compacted(call, reason, tokens)
        response = call_next(outgoing)
        self._learn(outgoing, response)
        return response

    def _compacted(self, call: ModelCall, reason: CompactionReason, tokens: int) -> ModelCall:
        compacted = self._compact(call, reason, tokens)
        if reason != "truncate" and compacted.state.input_tokens > self.profile.max_input_tokens:
            # A summary that still leaves the request over the window would only earn a
            # refusal: truncate now instead of after a wasted round trip.
            compacted = self._truncate(compacted, compacted.state.input_tokens)
        return compacted

    def _measure(self, call: ModelCall, record: CompactionRecord | None = None) -> int:
        """The whole request's input tokens, in the provider's units.

        Anchored when possible: the real size of the last request sent in the same context
        (its usage) plus the corrected estimate of what changed since. The provider counts
        only when there is no anchor (first call, after a compaction, after a restart) or
        the anchored figure is close enough to the trigger for its error to matter; else
        the corrected estimate. Before and after a compaction are measured the same way,
        so the two figures of a compaction record are in the same units. ``record`` is
        the compaction the request was just built from, before it is in the state.
        """
        figures = self._figures.get(call.session_id, _Figures)
        estimate = self.estimate(call.request)
        learned = call.state.correction(call.request.model)
        correction = 1.0 if learned is None else learned
        context = self._context(call, record)
        anchor = figures.anchor if figures.anchor and figures.anchor.context == context else None
        figure = anchor.figure(estimate, correction) if anchor else round(estimate * correction)
        source = "anchored" if anchor else "estimate"
        trigger = self.profile.trigger_tokens
        settled = anchor is not None and not near(figure, trigger, self.count_band)
        if not settled and can_count_tokens(self.counter):
            measured = measure_input_tokens(
                call.request,
                estimator=self.estimator,
                provider=self.counter,
                timeout=self.count_timeout,
            )
            if measured.source == "count_tokens":
                figures.anchor = Anchor(context, estimate, measured.tokens)
                figure, source = measured.tokens, "count_tokens"
        self.observer.token_figure(call.session_id, call.turn, source, correction)
        return figure

    def _context(
        self, call: ModelCall, record: CompactionRecord | None = None
    ) -> tuple[object, ...]:
        """What an anchor must share with a request: model, compaction and fixed part."""
        latest = record or call.state.state.latest
        kept_from = latest.kept_from_seq if latest is not None else None
        return (call.request.model, kept_from, self.estimate.fixed(call.request))

    def _learn(self, call: ModelCall, response: Response) -> None:
        """The response's usage is the exact size of the request sent: anchor on it and
        learn how far the estimate was off."""
        real = response.usage.total_input_tokens()
        if real <= 0:
            return
        figures = self._figures.get(call.session_id, _Figures)
        estimate = self.estimate(call.request)
        model = call.request.model
        previous = call.state.correction(model)
        call.state.calibrate(model, learned_correction(previous, estimate, real))
        figures.anchor = Anchor(self._context(call), estimate, real)

    def _reason(self, call: ModelCall, tokens: int) -> CompactionReason | None:
        summarized_this_turn = any(
            record.at_turn == call.turn and record.reason != "truncate"
            for record in call.state.state.compactions
        )
        if call.force == "truncate":
            return "truncate"
        if call.force == "overflow":
            # One summary per (session, turn): a second overflow in a turn that already
            # summarized goes straight to mechanical truncation.
            return "truncate" if summarized_this_turn else "overflow"
        if summarized_this_turn:
            # The turn's one summary is spent; a request measured over the window would
            # only be refused, so it goes straight to mechanical truncation.
            return "truncate" if tokens > self.profile.max_input_tokens else None
        if call.force == "tool":
            return "tool"
        return "threshold" if tokens > self.profile.trigger_tokens else None

    def _compact(self, call: ModelCall, reason: CompactionReason, tokens: int) -> ModelCall:
        if reason == "truncate":
            return self._truncate(call, tokens)
        plan = self._plan(call)
        if plan is None and reason == "tool":
            # The model asked for it, but everything left is kept verbatim: the request is
            # void, not pending (its tool result already said so when the loop could tell).
            call.state.force(None)
            log.info("session %s turn %d: nothing to compact yet", call.session_id, call.turn)
            return call
        if plan is None:
            log.warning(
                "session %s turn %d: over the trigger but nothing can be evicted",
                call.session_id,
                call.turn,
            )
            return self._truncate(call, tokens) if reason == "overflow" else call
        return self._summarize(call, reason, tokens, plan)

    def _plan(self, call: ModelCall) -> _Plan | None:
        """The keep boundary: the raw keep window moved back to a group start.

        The summary keeps at least ``keep_frac`` of the messages, as documented; it never
        moves the boundary forward to reach a token target. A kept part that is still over
        the window after the summary is mechanically truncated (``wrap``), which is the
        rung that aims at the post-compaction target.
        """
        first_real = 1 if call.summary_message_present else 0
        boundary = self._boundary(call.request.messages, first_real)
        if boundary is None:
            return None
        return _Plan(boundary=boundary, first_real=first_real)

    def _boundary(self, messages: Sequence[Message], first_real: int) -> int | None:
        keep = self.profile.keep_count(len(messages) - first_real)
        return keep_boundary(messages, keep, min_index=first_real + 1)

    def can_evict(self, messages: Sequence[Message], *, head_present: bool) -> bool:
        """Whether a compaction of these outgoing messages would evict anything at all.

        The ``compact_conversation`` tool asks this before promising a compaction, so a
        request that cannot be honoured is answered in its result, not left pending.
        """
        return self._boundary(messages, 1 if head_present else 0) is not None

    # -- pre-summarization -----------------------------------------------------------------

    def _presummarize(self, call: ModelCall, tokens: int) -> None:
        """Dispatch, without waiting, what a compaction at the trigger will need.

        The range is the one the trigger's boundary would evict now (tool groups kept
        whole, anchored by sequence numbers); at the trigger more messages exist, so the
        trigger's range starts with this one. Nothing is dispatched while a pre-summary of
        the session is still usable.
        """
        with self._presummaries_lock:
            current = self._presummaries.get(call.session_id)
        usable = current is not None and self._still_valid(call, current)
        if usable and current is not None and not self._outgrown(call, current, tokens):
            return
        plan = self._plan(call)
        if plan is None:
            return
        evicted = _stored_before(call, _seq_at(call, plan.boundary))
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
        work = self._threads().submit(
            context.run, self._offload_then_summarize, offload_job, summary_job
        )
        started = _Presummary(
            pending=pending, work=work, first=evicted[0], last=evicted[-1], count=len(evicted)
        )
        with self._presummaries_lock:
            self._presummaries[call.session_id] = started
        call.state.presummarize(pending)
        log.info(
            "session %s turn %d: pre-summarizing messages %d-%d",
            call.session_id,
            call.turn,
            pending.from_seq,
            pending.to_seq,
        )

    def _outgrown(self, call: ModelCall, current: _Presummary, tokens: int) -> bool:
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

    def _offload_then_summarize(
        self, offload: OffloadJob, summary: SummaryJob
    ) -> tuple[str | None, SummaryResult | None]:
        path = self._offload_job(offload)
        return (path, None) if path is None else (path, self._summary(summary))

    def _threads(self) -> ThreadPoolExecutor:
        with self._presummaries_lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    PRESUMMARY_THREADS, thread_name_prefix="hango-presummary"
                )
            return self._executor

    def _still_valid(self, call: ModelCall, ready: _Presummary) -> bool:
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
        covered = _stored_before(call, pending.to_seq + 1)
        if not covered or covered[0].seq != pending.from_seq:
            return False
        if range_fingerprint(covered) != pending.fingerprint:
            return False
        self._pin(call.session_id, ready, covered)
        return True

    def _pin(self, session_id: str, ready: _Presummary, covered: Sequence[StoredMessage]) -> None:
        pinned = dataclasses.replace(ready, first=covered[0], last=covered[-1], count=len(covered))
        with self._presummaries_lock:
            if self._presummaries.get(session_id) is ready:
                self._presummaries[session_id] = pinned

    def _take_presummary(self, call: ModelCall, plan: _Plan) -> tuple[_Presummary, int] | None:
        """The session's pre-summary and the index it keeps from, if it can be installed."""
        with self._presummaries_lock:
            ready = self._presummaries.pop(call.session_id, None)
        if ready is None:
            return None
        pending = ready.pending
        call.state.presummarize(None)
        index = call.index_of(pending.to_seq + 1)
        usable = (
            index is not None
            and plan.first_real < index <= plan.boundary
            and self._still_valid(call, ready)
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

    def _install_presummary(
        self, call: ModelCall, reason: CompactionReason, tokens: int, plan: _Plan
    ) -> tuple[ModelCall | None, float]:
        """The request with the pre-summary installed, and the seconds waited for it.

        ``None`` when there is none, it does not match, its offload failed (nothing leaves
        the request that was not offloaded), it fails validation, or the result does not
        fit under the post-compaction target: the normal path then runs.
        """
        taken = self._take_presummary(call, plan)
        if taken is None:
            return None, 0.0
        ready, index = taken
        waiting_since = time.monotonic()
        offload_path, result = ready.work.result()
        waited = time.monotonic() - waiting_since
        if offload_path is None or result is None:
            return None, waited
        previous = call.state.state.latest
        kept_from_seq = ready.pending.to_seq + 1
        evicted = _stored_before(call, kept_from_seq)
        record = _summary_record(
            call, reason, tokens, kept_from_seq, evicted, previous, offload_path, result
        )
        compacted = _apply(call, record, index)
        if self.validator(compacted.request.messages):
            log.warning("session %s turn %d: pre-summary invalid here", call.session_id, call.turn)
            return None, waited
        after = self._measure(compacted, record)
        if after > self.profile.target_tokens:
            log.info(
                "session %s turn %d: with the pre-summary the request is %d tokens, over the "
                "target %d; summarizing further now",
                call.session_id,
                call.turn,
                after,
                self.profile.target_tokens,
            )
            return None, waited
        return self._commit(compacted, record, after), waited

    # -- at the trigger ---------------------------------------------------------------------

    def _summarize(
        self, call: ModelCall, reason: CompactionReason, tokens: int, plan: _Plan
    ) -> ModelCall:
        installed, waited = self._install_presummary(call, reason, tokens, plan)
        if installed is not None:
            if reason == "threshold":
                self.observer.summary_waited(call.session_id, call.turn, waited, presummarized=True)
            return installed
        return self._summarize_now(call, reason, tokens, plan, waited)

    def _summarize_now(
        self,
        call: ModelCall,
        reason: CompactionReason,
        tokens: int,
        plan: _Plan,
        already_waited: float = 0.0,
    ) -> ModelCall:
        kept_from_seq = _seq_at(call, plan.boundary)
        evicted = _stored_before(call, kept_from_seq)
        waiting_since = time.monotonic() - already_waited
        offload_path = self._offload(call, evicted)
        if offload_path is None:
            return self._truncate(call, tokens) if reason == "overflow" else call
        previous = call.state.state.latest
        result = self._summary(
            SummaryJob(
                session_id=call.session_id,
                turn=call.turn,
                from_seq=evicted[0].seq,
                to_seq=evicted[-1].seq,
                previous_summary=previous.summary if previous else None,
                evicted=evicted,
                model=self.profile.summarizer_model or call.request.model,
            )
        )
        if reason == "threshold":
            # What the user's turn paid for the slow steps at the trigger.
            waited = time.monotonic() - waiting_since
            self.observer.summary_waited(call.session_id, call.turn, waited)
        record = _summary_record(
            call, reason, tokens, kept_from_seq, evicted, previous, offload_path, result
        )
        compacted = _apply(call, record, plan.boundary)
        violations = self.validator(compacted.request.messages)
        if violations:
            details = [v.detail for v in violations]
            log.error(
                "session %s turn %d: compacted request is invalid, falling back to "
                "mechanical truncation: %s",
                call.session_id,
                call.turn,
                "; ".join(details),
            )
            self.observer.invalid_request_blocked(call.session_id, call.turn, details)
            return self._truncate(call, tokens)
        return self._commit(compacted, record)

    def _summary(self, job: SummaryJob) -> SummaryResult:
        """The port's summary; a port that fails outright still leaves a usable briefing."""
        try:
            return self.summarizer.summarize(job)
        except Exception as exc:
            log.exception("session %s turn %d: summarizer failed", job.session_id, job.turn)
            fallback = ExtractiveSummarizer().summarize(job)
            reason = f"summarizer error: {type(exc).__name__}: {exc}"
            return fallback.model_copy(update={"fallback_reason": reason})

    def _truncate(self, call: ModelCall, tokens: int) -> ModelCall:
        """Drop whole oldest groups until the request fits (the last rung of the ladder)."""
        previous = call.state.state.latest
        first_real = 1 if call.summary_message_present else 0
        body = call.request.messages[first_real:]
        overflowed = call.force in ("overflow", "truncate")
        scale = self._truncation_scale(call, tokens)
        saved_before = previous.saved_to_seq if previous else None
        quote_request = True

        def record_for(cut: int, offload_path: str | None) -> CompactionRecord:
            kept_from_seq = _kept_from(call, first_real + cut)
            evicted = _stored_before(call, kept_from_seq)
            offloaded = offload_path is not None or not evicted
            return CompactionRecord(
                at_turn=call.turn,
                reason="truncate",
                kept_from_seq=kept_from_seq,
                summary=previous.summary if previous else None,
                offload_path=offload_path or (previous.offload_path if previous else None),
                tokens_before=tokens,
                tokens_after=0,
                evicted_messages=len(evicted),
                summarizer="none",
                artifacts=_merge_artifacts(previous, evicted),
                offloaded_to_seq=kept_from_seq - 1 if offloaded else saved_before,
                user_request=_evicted_request(call, kept_from_seq) if quote_request else None,
            )

        def measure(messages: tuple[Message, ...]) -> int:
            # The head lists the artifacts of what this cut evicts, so it grows with the
            # cut: measure each candidate with its own head, not the previous one.
            cut = len(body) - (len(messages) - 1)
            head = head_message(record_for(cut, conversation_history_path(call.session_id)))
            request = call.request.model_copy(update={"messages": (head, *messages[1:])})
            return int(self.estimator.estimate_request(request) * scale)

        # A request the provider refused must lose at least one group: the same request
        # again would only be refused again.
        at_least = 1 if overflowed else 0
        try:
            cut = self._fitting_cut(call, body, head_message(previous), measure, at_least)
        except CannotFitError:
            if record_for(len(body), None).user_request is None:
                raise
            # The user's request is quoted unless it alone cannot fit: then the newest
            # group goes out without it (the summary and the history file still hold it).
            log.warning(
                "session %s turn %d: the user's request does not fit beside the newest "
                "tool group; sending without quoting it",
                call.session_id,
                call.turn,
            )
            quote_request = False
            cut = self._fitting_cut(call, body, head_message(previous), measure, at_least)
        evicted = _stored_before(call, _kept_from(call, first_real + cut))
        record = record_for(cut, self._offload(call, evicted) if evicted else None)
        return self._commit(_apply(call, record, first_real + cut), record)

    def _truncation_scale(self, call: ModelCall, tokens: int) -> float:
        """Estimates times this scale are in the units of the window.

        After an overflow the provider's own figure calibrates (see _undercount_scale).
        Otherwise ``tokens`` is what decided to truncate (the provider's count when it has
        one): the estimate of that same request against it, so a cut is judged in the
        units that found the request too long, not in a second, disagreeing measure.
        """
        if call.overflow is not None:
            return _undercount_scale(call)
        estimate = self.estimator.estimate_request(call.request)
        return tokens / estimate if tokens > 0 and estimate > 0 else 1.0

    def _fitting_cut(
        self,
        call: ModelCall,
        body: tuple[Message, ...],
        head: Message,
        measure: Callable[[tuple[Message, ...]], int],
        at_least: int,
    ) -> int:
        """The smallest cut under the post-compaction target, else the trigger, else the window.

        Headroom is a preference (it keeps the next turns from truncating again); the
        window is the law, and only failing that fails the run. The window is the
        profile's, or the smaller one the provider revealed ("... > M maximum"). A cut of
        at least ``at_least`` is preferred; when only the last group is left, it is all
        there is to send.
        """
        window = _window(call, self.profile)
        target = min(int(window * self.profile.target_frac), self.profile.trigger_tokens)
        for limit in (target, self.profile.trigger_tokens, window):
            for minimum in dict.fromkeys((at_least, 0)):
                with contextlib.suppress(CannotFitError):
                    return drop_oldest_groups(
                        body, head=head, measure=measure, limit=limit, min_keep_from=minimum
                    )
        try:
            return drop_oldest_groups(body, head=head, measure=measure, limit=window)
        except CannotFitError as exc:
            raise CannotFitError(
                f"session {call.session_id} turn {call.turn}: even the newest tool group "
                f"alone needs about {exc.tokens} tokens, over the model's window of {window}; "
                "give the model a larger window (HANGO_MODEL_PROFILES) or shorten large tool "
                "results when they are produced (HANGO_TOOL_RESULT_OFFLOAD_TOKENS)",
                tokens=exc.tokens,
                limit=window,
            ) from None

    def _commit(
        self, call: ModelCall, record: CompactionRecord, after: int | None = None
    ) -> ModelCall:
        if after is None:
            after = self._measure(call, record)
        record = record.model_copy(update={"tokens_after": after})
        call.state.record(record)
        call.state.measured(after)
        # The one structured INFO line per compaction comes from the telemetry observer
        # (logger ``hango.compaction``), which every agent built by the factory has.
        log.debug(
            "compacted session=%s turn=%d reason=%s tokens_before=%d tokens_after=%d "
            "messages_evicted=%d offload_path=%s",
            call.session_id,
            call.turn,
            record.reason,
            record.tokens_before,
            record.tokens_after,
            record.evicted_messages,
            record.offload_path,
        )
        self.observer.compacted(call.session_id, record)
        return call

    def _offload(self, call: ModelCall, evicted: tuple[StoredMessage, ...]) -> str | None:
        return self._offload_job(
            OffloadJob(
                session_id=call.session_id,
                turn=call.turn,
                from_seq=evicted[0].seq,
                to_seq=evicted[-1].seq,
                evicted=evicted,
            )
        )

    def _offload_job(self, job: OffloadJob) -> str | None:
        try:
            return self.offloader.offload(job)
        except Exception:
            # Invariant: nothing leaves the request that was not offloaded.
            log.exception(
                "session %s turn %d: history offload failed; keeping the messages",
                job.session_id,
                job.turn,
            )
            return None


def _watermark(profile: ModelProfile, frac: float | None) -> int | None:
    """Input tokens past which pre-summaries are dispatched; ``None`` when off."""
    if frac is None or frac >= profile.trigger_frac:
        return None
    return int(profile.max_input_tokens * frac + 1e-6)


def _seq_at(call: ModelCall, index: int) -> int:
    seq = call.seqs[index]
    if seq is None:  # pragma: no cover - a boundary never lands on the summary message
        raise ValueError("a keep boundary landed on the summary message")
    return seq


def _kept_from(call: ModelCall, index: int) -> int:
    """The sequence number a cut at ``index`` keeps from (past the end: the next one)."""
    if index < len(call.seqs):
        return _seq_at(call, index)
    return max((m.seq for m in call.stored), default=0) + 1


def _evicted_request(call: ModelCall, kept_from_seq: int) -> str | None:
    """The text of the user message that started this turn, when a cut at ``kept_from_seq``
    leaves it out of the request; ``None`` when the kept messages still hold it.

    A cut falls on an assistant message, so a turn that is one user message followed by
    dozens of tool rounds (SWE-agent, OpenHands, long Claude Code turns) loses that message
    on its first compaction: the head quotes it from then on. An earlier cut of this turn
    already took it out of ``call.stored``; the record of that cut carries it.
    """
    opening = next((m for m in call.stored if m.turn == call.turn), None)
    if opening is None or not _opens_a_turn(opening.message):
        previous = call.state.state.latest
        same_turn = previous is not None and previous.at_turn == call.turn
        return previous.user_request if same_turn and previous is not None else None
    if opening.seq >= kept_from_seq:
        return None
    text = opening.message.text()
    return text if text.strip() else None


def _opens_a_turn(message: Message) -> bool:
    """A user message that is not tool results: what the user said to start a turn."""
    return message.role == "user" and not any(message.tool_results())


def _summary_record(
    call: ModelCall,
    reason: CompactionReason,
    tokens: int,
    kept_from_seq: int,
    evicted: Sequence[StoredMessage],
    previous: CompactionRecord | None,
    offload_path: str,
    result: SummaryResult,
) -> CompactionRecord:
    """The record of a summary that replaces ``evicted`` (made now, or ready beforehand)."""
    return CompactionRecord(
        user_request=_evicted_request(call, kept_from_seq),
        at_turn=call.turn,
        reason=reason,
        kept_from_seq=kept_from_seq,
        summary=result.text,
        offload_path=offload_path,
        tokens_before=tokens,
        tokens_after=0,
        evicted_messages=len(evicted),
        summarizer=result.summarizer,
        fallback_reason=result.fallback_reason,
        summary_usage=result.usage,
        artifacts=_merge_artifacts(previous, evicted),
    )


def _stored_before(call: ModelCall, kept_from_seq: int) -> tuple[StoredMessage, ...]:
    return tuple(m for m in call.stored if m.seq < kept_from_seq)


def _merge_artifacts(
    previous: CompactionRecord | None, evicted: Sequence[StoredMessage]
) -> tuple[str, ...]:
    known = dict.fromkeys(previous.artifacts if previous else ())
    known.update(dict.fromkeys(artifact_index(evicted)))
    # The newest ones matter most, and the index must not grow without bound.
    return tuple(known)[-MAX_ARTIFACTS:]


def _apply(call: ModelCall, record: CompactionRecord, boundary: int) -> ModelCall:
    """``[head] + kept``: the outgoing copy with the record applied."""
    head = head_message(record)
    messages = (head, *call.request.messages[boundary:])
    seqs = (None, *call.seqs[boundary:])
    stored = tuple(m for m in call.stored if m.seq >= record.kept_from_seq)
    request = call.request.model_copy(update={"messages": messages})
    return call.evolve(request=request, seqs=seqs, stored=stored)


def _undercount_scale(call: ModelCall) -> float:
    """How much the pipeline's measure undercounts, from what the provider said.

    When the provider reported "prompt is too long: N tokens", N against what the pipeline
    measured for that same refused request is the undercount; truncation then aims at real
    tokens. A refusal without a figure (stop reason ``model_context_window_exceeded``) says
    nothing about the input alone (the output may have run out of room), so the measure
    stands; the rung still drops at least one group.
    """
    overflow = call.overflow
    if overflow is None or overflow.measured <= 0 or overflow.tokens is None:
        return 1.0
    return max(1.0, overflow.tokens / overflow.measured)


def _window(call: ModelCall, profile: ModelProfile) -> int:
    """The profile's window, or the smaller one an overflow error revealed."""
    revealed = call.overflow.maximum if call.overflow is not None else None
    if revealed is not None and 0 < revealed < profile.max_input_tokens:
        return revealed
    return profile.max_input_tokens
