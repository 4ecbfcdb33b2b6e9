"""The last rung, mechanical truncation, and the steps every rung ends with: the offload
of what leaves the request (before it leaves) and the commit of the record.

Mixed into :class:`~hango.middleware.compacting.Compacting` (the summary rungs); the
attributes below are what these steps use of the middleware.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from hango.compaction.groups import group_starts
from hango.compaction.head import head_message
from hango.compaction.jobs import HistoryOffloader, OffloadJob
from hango.compaction.mechanical import Measure, drop_oldest_groups
from hango.compaction.record import CompactionRecord
from hango.core.errors import CannotFitError
from hango.core.messages import Message, StoredMessage
from hango.core.profiles import ModelProfile
from hango.history.paths import conversation_history_path
from hango.middleware.base import ModelCall
from hango.middleware.evicted import (
    ArtifactPrefixes,
    apply_record,
    evicted_request,
    kept_from,
    stored_before,
    undercount_scale,
    window_of,
)
from hango.middleware.observer import LoopObserver
from hango.middleware.oversized import shrinking, tool_blocks_cut
from hango.middleware.token_figure import TokenFigure
from hango.tokens.base import Estimator

# The middleware's own logger: one name for everything it logs.
log = logging.getLogger("hango.middleware.summarization")


class Truncating:
    profile: ModelProfile
    estimator: Estimator
    offloader: HistoryOffloader
    observer: LoopObserver
    figure: TokenFigure

    def _truncate(self, call: ModelCall, tokens: int) -> ModelCall:
        """Drop whole oldest groups until the request fits (the last rung of the ladder)."""
        previous = call.run_state.latest
        first_real = call.first_real
        body = call.request.messages[first_real:]
        scale = self._truncation_scale(call, tokens)
        saved_before = previous.saved_to_seq if previous else None
        artifacts = ArtifactPrefixes(previous, call.stored)

        def record_for(cut: int, offload_path: str | None) -> CompactionRecord:
            kept_from_seq = kept_from(call, first_real + cut)
            evicted = stored_before(call, kept_from_seq)
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
                artifacts=artifacts.before(kept_from_seq),
                offloaded_to_seq=kept_from_seq - 1 if offloaded else saved_before,
                user_request=evicted_request(call, kept_from_seq) if quote_request else None,
            )

        def measure(messages: Sequence[Message]) -> int:
            # The head lists the artifacts of what this cut evicts, so it grows with the
            # cut: measure each candidate with its own head, not the previous one.
            cut = len(body) - (len(messages) - 1)
            head = head_message(record_for(cut, conversation_history_path(call.session_id)))
            request = call.request.model_copy(update={"messages": (head, *messages[1:])})
            return int(self.estimator.estimate_request(request) * scale)

        # A request the provider refused must lose at least one group: the same request
        # again would only be refused again.
        at_least = 1 if call.force in ("overflow", "truncate") else 0
        # The user's request is quoted unless it alone cannot fit: then the newest group
        # goes out without it (the summary and the history file still hold it).
        for quote_request in (True, False):
            try:
                cut = self._fitting_cut(call, body, measure, at_least)
                break
            except CannotFitError:
                if not quote_request or record_for(len(body), None).user_request is None:
                    return self._shortened(call, body, record_for, first_real, scale)
                log.warning(
                    "session %s turn %d: the user's request does not fit beside the newest "
                    "tool group; sending without quoting it",
                    call.session_id,
                    call.turn,
                )
        evicted = stored_before(call, kept_from(call, first_real + cut))
        record = record_for(cut, self._offload(call, evicted) if evicted else None)
        return self._commit(apply_record(call, record, first_real + cut), record)

    def _shortened(
        self,
        call: ModelCall,
        body: Sequence[Message],
        record_for: Callable[[int, str | None], CompactionRecord],
        first_real: int,
        scale: float,
    ) -> ModelCall:
        """The last rung (``oversized.py``): only the newest group is kept, its tool blocks
        cut to previews. A tool group is never split, so one larger than the window by
        itself would fail every later call."""
        starts = group_starts(body)
        if not starts:
            raise self._cannot_fit(call, body, scale)
        evicted = stored_before(call, kept_from(call, first_real + starts[-1]))
        record = record_for(starts[-1], self._offload(call, evicted) if evicted else None)
        kept = apply_record(call, record, first_real + starts[-1])
        window = window_of(call, self.profile)
        for per_block in shrinking(window):
            request = tool_blocks_cut(kept.request, per_block, self.estimator)
            if int(self.estimator.estimate_request(request) * scale) <= window:
                log.warning(
                    "session %s turn %d: the newest tool group alone is over the window; "
                    "its tool inputs and results are sent as previews of %d tokens at most",
                    call.session_id,
                    call.turn,
                    per_block,
                )
                return self._commit(kept.evolve(request=request), record)
        raise self._cannot_fit(call, body, scale)

    def _cannot_fit(self, call: ModelCall, body: Sequence[Message], scale: float) -> CannotFitError:
        """The error naming what does not fit, with the request's true size."""
        window = window_of(call, self.profile)
        tokens = int(self.estimator.estimate_request(call.request) * scale)
        if tokens <= window:
            why = (
                f"the provider refused the request as too long, but it measures about {tokens} "
                f"tokens here, under the profile's window of {window}, and nothing more can be "
                "evicted; the model's window is probably smaller than its profile says "
                "(HANGO_MODEL_PROFILES)"
            )
        else:
            fixed = call.request.model_copy(update={"messages": ()})
            fixed_tokens = int(self.estimator.estimate_request(fixed) * scale)
            count = f"{len(body)} message" + ("" if len(body) == 1 else "s")
            why = (
                f"the request needs about {tokens:,} tokens ({count}, and {fixed_tokens:,} for "
                "the system prompt and tool definitions) and nothing more can be evicted or "
                f"shortened to fit the model's window of {window:,}; give the model a larger "
                "window (HANGO_MODEL_PROFILES) or a shorter system prompt"
            )
        where = f"session {call.session_id} turn {call.turn}"
        return CannotFitError(f"{where}: {why}", tokens=tokens, limit=window)

    def _truncation_scale(self, call: ModelCall, tokens: int) -> float:
        """Estimates times this scale are in the units of the window.

        After an overflow the provider's own figure calibrates (see ``undercount_scale``).
        Otherwise ``tokens`` is what decided to truncate (the provider's count when it has
        one): the estimate of that same request against it, so a cut is judged in the
        units that found the request too long, not in a second, disagreeing measure.
        """
        if call.overflow is not None:
            return undercount_scale(call)
        estimate = self.estimator.estimate_request(call.request)
        return tokens / estimate if tokens > 0 and estimate > 0 else 1.0

    def _fitting_cut(
        self, call: ModelCall, body: Sequence[Message], measure: Measure, at_least: int
    ) -> int:
        """The smallest cut under the post-compaction target, else the trigger, else the window.

        Headroom is a preference (it keeps the next turns from truncating again); the
        window is the law, and only failing that fails the run. The window is the
        profile's, or the smaller one the provider revealed ("... > M maximum"). A cut of
        at least ``at_least`` is preferred; when only the last group is left, it is all
        there is to send.
        """
        window = window_of(call, self.profile)
        target = min(int(window * self.profile.target_frac), self.profile.trigger_tokens)
        head = head_message(call.run_state.latest)
        for limit in (target, self.profile.trigger_tokens, window):
            for minimum in dict.fromkeys((at_least, 0)):
                try:
                    return drop_oldest_groups(
                        body, head=head, measure=measure, limit=limit, min_keep_from=minimum
                    )
                except CannotFitError as exc:
                    tokens = exc.tokens  # the last try's: the window, from any group
        raise CannotFitError(
            f"session {call.session_id} turn {call.turn}: even the newest tool group "
            f"alone needs about {tokens} tokens, over the model's window of {window}; "
            "give the model a larger window (HANGO_MODEL_PROFILES) or shorten large tool "
            "results when they are produced (HANGO_TOOL_RESULT_OFFLOAD_TOKENS)",
            tokens=tokens,
            limit=window,
        )

    def _commit(
        self, call: ModelCall, record: CompactionRecord, after: int | None = None
    ) -> ModelCall:
        if after is None:
            after = self.figure.measure(call, record)
        record = record.model_copy(update={"tokens_after": after})
        call.state.record(record)
        call.state.input_tokens = after
        # Its one log line comes from the telemetry observer (logger ``hango.compaction``),
        # which every agent built by the factory has.
        self.observer.compacted(call.session_id, record)
        return call

    def _offload(self, call: ModelCall, evicted: tuple[StoredMessage, ...]) -> str | None:
        first, last = evicted[0].seq, evicted[-1].seq
        job = OffloadJob(
            session_id=call.session_id, turn=call.turn, from_seq=first, to_seq=last, evicted=evicted
        )
        try:
            return self.offloader.offload(job)
        except Exception:
            # Invariant: nothing leaves the request that was not offloaded.
            log.exception(
                "session %s turn %d: history offload failed; keeping the messages",
                call.session_id,
                call.turn,
            )
            return None
