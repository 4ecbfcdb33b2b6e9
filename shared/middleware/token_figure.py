"""The input-token figure a summarization decision is taken on, anchored on real usage.

After each response, its usage is the exact size of the request just sent; the next
request's figure is that plus the corrected estimate of what changed. The provider counts
only when there is no anchor (first call, after a compaction, after a restart) or the
figure is close enough to the trigger for its error to matter.
"""

from __future__ import annotations

from dataclasses import dataclass

from hango.compaction.record import CompactionRecord
from hango.core.identity import RecentlyUsed
from hango.core.messages import Response
from hango.core.profiles import ModelProfile
from hango.middleware.base import ModelCall
from hango.middleware.observer import LoopObserver
from hango.providers.base import Provider
from hango.tokens.base import Estimator
from hango.tokens.measure import (
    Anchor,
    RequestEstimate,
    can_count_tokens,
    learned_correction,
    measure_input_tokens,
)


@dataclass
class _Figures:
    """What is remembered of one session: the anchor of its token figure."""

    anchor: Anchor | None = None


@dataclass(kw_only=True, eq=False)
class TokenFigure:
    """Measures a session's successive requests; one per summarization middleware."""

    profile: ModelProfile
    estimator: Estimator
    counter: Provider
    count_timeout: float
    observer: LoopObserver
    count_band: float

    def __post_init__(self) -> None:
        self.estimate = RequestEstimate(self.estimator)
        self._figures: RecentlyUsed[_Figures] = RecentlyUsed()

    def measure(self, call: ModelCall, record: CompactionRecord | None = None) -> int:
        """The whole request's input tokens, in the provider's units (see the module).

        Before and after a compaction are measured the same way, so the two figures of a
        compaction record are in the same units. ``record`` is the compaction the request
        was just built from, before it is in the state.
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
        # Within the band of the trigger, either way, the figure's error matters.
        settled = anchor is not None and abs(figure - trigger) > self.count_band * trigger
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
        latest = record or call.run_state.latest
        kept_from = latest.kept_from_seq if latest is not None else None
        return (call.request.model, kept_from, self.estimate.fixed(call.request))

    def learn(self, call: ModelCall, response: Response) -> None:
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
