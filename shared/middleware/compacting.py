"""The summary rungs that change the outgoing copy: a pre-summary ready beforehand, or the
summary made now, each validated and recorded before the request moves on (the last rung,
mechanical truncation, and the offload and commit every rung ends with: truncating.py).

Mixed into :class:`~hango.middleware.summarization.SummarizationMiddleware`, which decides
when a rung runs; the attributes below are what the rungs use of it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hango.compaction.extractive import ExtractiveSummarizer
from hango.compaction.jobs import Summarizer, SummaryJob, SummaryResult
from hango.compaction.record import CompactionReason, CompactionRecord
from hango.compaction.summary_fit import briefing_budget, fit_summary
from hango.compaction.validate import Violation
from hango.core.messages import Message
from hango.history.paths import conversation_history_path
from hango.middleware.base import ModelCall
from hango.middleware.evicted import (
    MEASURED_SUMMARY,
    apply_record,
    seq_at,
    stored_before,
    summary_record,
    tokens_between,
    window_of,
)
from hango.middleware.pacing import Pacer
from hango.middleware.presummary import Presummaries, Presummary, summary_job
from hango.middleware.summary_route import SummaryRouter
from hango.middleware.truncating import Truncating

# The middleware's own logger: one name for everything it logs.
log = logging.getLogger("hango.middleware.summarization")


@dataclass(frozen=True)
class Plan:
    """Where a compaction cuts: the keep boundary, after the head message if any."""

    boundary: int
    # The last index a boundary could fall on in the whole request (the newest group's
    # start), found with the boundary: the summary's room is measured against it.
    newest_start: int


class Compacting(Truncating):
    summarizer: Summarizer
    validator: Callable[[Sequence[Message]], list[Violation]]
    presummaries: Presummaries
    pacer: Pacer
    router: SummaryRouter

    def _install_one(
        self,
        call: ModelCall,
        reason: CompactionReason,
        tokens: int,
        plan: Plan,
        ready: Presummary,
    ) -> tuple[ModelCall | None, float]:
        """``ready`` installed: ``None`` when it does not match, fails validation, does not
        fit (see _fits), or its range's offload fails (offloaded only now: see presummary.py)."""
        index = self.presummaries.index_to_install(call, ready, plan.boundary)
        if index is None:
            return None, 0.0
        waiting_since = time.monotonic()
        result, ready_at, _ = ready.work.result()
        waited = self.pacer.waited(time.monotonic() - waiting_since, ready_at)
        kept_from_seq = ready.pending.to_seq + 1
        evicted = stored_before(call, kept_from_seq)
        path = conversation_history_path(call.session_id)
        record = summary_record(call, reason, tokens, kept_from_seq, evicted, path, result)
        compacted = apply_record(call, record, index)
        if self.validator(compacted.request.messages):
            log.warning("session %s turn %d: pre-summary invalid here", call.session_id, call.turn)
            return None, waited
        after = self.figure.measure(compacted, record)
        if not self._fits(call, tokens, after, index, plan) or self._offload(call, evicted) is None:
            return None, waited
        return self._commit(compacted, record, after), waited

    def _fits(self, call: ModelCall, tokens: int, after: int, index: int, plan: Plan) -> bool:
        """Under the target; or over it but under the trigger, when summarizing the rest of
        the trigger's range now would not bring it under the target either (a large newest
        round): that would only make the turn wait."""
        target = self.profile.target_tokens
        if after <= target:
            return True
        # What the pre-summary leaves verbatim that the trigger's plan would summarize.
        left = tokens_between(call, self.figure.estimate, tokens, index, plan.boundary)
        if after <= self.profile.trigger_tokens and after - round(left) > target:
            return True
        log.info(
            "session %s turn %d: with the pre-summary the request is %d tokens, over the "
            "target %d; summarizing further now",
            call.session_id,
            call.turn,
            after,
            target,
        )
        return False

    def _summarize(
        self, call: ModelCall, reason: CompactionReason, tokens: int, plan: Plan
    ) -> ModelCall:
        """A pre-summary installed (the ready one first while the one extending it is still
        in flight, then that one), else the summary made now."""
        waited = 0.0
        for candidate in self.presummaries.take(call):
            installed, waited_for = self._install_one(call, reason, tokens, plan, candidate)
            waited += waited_for
            if installed is None:
                continue
            if reason == "threshold":
                self.observer.summary_waited(call.session_id, call.turn, waited, presummarized=True)
            return installed
        return self._summarize_now(call, reason, tokens, plan, waited)

    def _summarize_now(
        self,
        call: ModelCall,
        reason: CompactionReason,
        tokens: int,
        plan: Plan,
        already_waited: float,
    ) -> ModelCall:
        kept_from_seq = seq_at(call, plan.boundary)
        evicted = stored_before(call, kept_from_seq)
        waiting_since = time.monotonic() - already_waited
        offload_path = self._offload(call, evicted)
        if offload_path is None:
            return self._truncate(call, tokens) if reason == "overflow" else call
        measured = summary_record(
            call, reason, tokens, kept_from_seq, evicted, offload_path, MEASURED_SUMMARY
        )
        room, hard_room = self._summary_rooms(call, measured, plan, tokens)
        replaced = self.figure.estimate.split(call.request, plan.boundary)[1]
        budget = briefing_budget(replaced, room)
        job = summary_job(call, evicted, self.profile, budget)
        routed = self.router.begin(call, plan.boundary, job, self._summary, replaced)
        fitted = fit_summary(
            job, room=room, hard_room=hard_room, estimator=self.estimator, ask=routed.ask
        )
        result = routed.finish(fitted)
        if reason == "threshold":
            # What the user's turn paid for the slow steps at the trigger.
            waited = self.pacer.waited(time.monotonic() - waiting_since, before=already_waited)
            self.observer.summary_waited(call.session_id, call.turn, waited)
        record = summary_record(
            call, reason, tokens, kept_from_seq, evicted, offload_path, result, measured.artifacts
        )
        compacted = apply_record(call, record, plan.boundary)
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

    def _summary_rooms(
        self, call: ModelCall, measured: CompactionRecord, plan: Plan, tokens: int
    ) -> tuple[int, int]:
        """The summary's room under the target and under the window, in estimator tokens:
        measured against what no truncation can remove (the fixed part, the head's frame,
        the newest group), in the units that decided to compact."""
        estimate = self.figure.estimate(call.request)
        scale = tokens / estimate if tokens > 0 and estimate > 0 else 1.0
        newest = max(plan.boundary, plan.newest_start)
        head_and_newest = apply_record(call, measured, newest).request
        fixed = self.estimator.estimate_request(head_and_newest) * scale
        target = self.profile.target_tokens
        hard = (window_of(call, self.profile) - fixed) / scale
        room = max((target - fixed) / 2, target / 4) / scale
        return int(min(room, hard)), int(hard)

    def _summary(self, job: SummaryJob) -> SummaryResult:
        """The port's summary; a port that fails outright still leaves a usable briefing."""
        try:
            return self.summarizer.summarize(job)
        except Exception as exc:
            log.exception("session %s turn %d: summarizer failed", job.session_id, job.turn)
            fallback = ExtractiveSummarizer().summarize(job)
            reason = f"summarizer error: {type(exc).__name__}: {exc}"
            return fallback.model_copy(update={"fallback_reason": reason})
