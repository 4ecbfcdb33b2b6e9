"""A summary is checked against the room it has before it is installed.

A summary larger than its room used to be installed as it was; the request then failed to
fit and the error blamed the newest tool group. Now the rungs are: the summary as it
came; a shorter one, asked for with that room as its ``max_tokens``; the extractive
briefing; that briefing cut to the room with a note. The reason is recorded in
``fallback_reason``. The caller measures the rooms (``Compacting._summary_rooms``).
"""

from __future__ import annotations

from collections.abc import Callable

from hango.compaction.extractive import ExtractiveSummarizer, cut_to_tokens
from hango.compaction.jobs import SummaryJob, SummaryResult
from hango.core.messages import Usage, summed_usage
from hango.tokens.base import Estimator

# The room a summary always has, however large the kept part (it may then be truncated).
MIN_SUMMARY_TOKENS = 64
# A briefing's length budget is this fraction of what it replaces, at least the floor.
BRIEFING_SHARE = 8
MIN_BRIEFING_TOKENS = 512


def briefing_budget(replaced: int, room: int) -> int:
    """The briefing's length budget, in tokens: 1/``BRIEFING_SHARE`` of the ``replaced``
    tokens it stands for (the range as the summarizer reads it, a previous summary
    included), at least ``MIN_BRIEFING_TOKENS``, at most its ``room``.

    The prompt asks for it and the request's ``max_tokens`` is twice it
    (:meth:`SummaryJob.reply_cap`), so a reply is charged for little more. Without it every
    summary was a whole briefing of about the same size whatever it replaced, and the
    output was most of a summary's cost."""
    return max(MIN_SUMMARY_TOKENS, min(room, max(MIN_BRIEFING_TOKENS, replaced // BRIEFING_SHARE)))


def fit_summary(
    job: SummaryJob,
    *,
    room: int,
    hard_room: int,
    estimator: Estimator,
    ask: Callable[[SummaryJob], SummaryResult],
) -> SummaryResult:
    """``ask(job)`` when it fits in ``room`` tokens (under the target), else the first rung
    that does; failing that, the first that fits ``hard_room`` (under the window); the
    briefing cut to ``hard_room`` as the last resort."""
    result = ask(job)
    room, hard_room = max(room, MIN_SUMMARY_TOKENS), max(hard_room, MIN_SUMMARY_TOKENS)
    size = estimator.estimate(result.text)
    if size <= room:
        return result
    why = f"summary of about {size} tokens over the {room} tokens left for it under the target"
    candidates = [("it", result)]
    if result.fallback_reason is None:  # a model's summary: ask once for a shorter one
        candidates.append(("a shorter one", ask(job.model_copy(update={"max_tokens": room}))))
    candidates.append(("the extractive briefing", ExtractiveSummarizer().summarize(job)))
    # Whichever is installed, the record accounts for every summarizer call made for it.
    spent = summed_usage(*(candidate.usage for _, candidate in candidates))
    for limit, where in ((room, "the target"), (hard_room, "the window")):
        for label, candidate in candidates:
            if estimator.estimate(candidate.text) <= limit:
                reason = f"{why}; installed {label}, which fits {where}"
                return _because(candidate, reason, spent)
    briefing = candidates[-1][1]
    cut = briefing.model_copy(update={"text": cut_to_tokens(briefing.text, hard_room)})
    reason = f"{why}; installed the extractive briefing cut to {hard_room} tokens"
    return _because(cut, reason, spent)


def _because(result: SummaryResult, reason: str, usage: Usage | None) -> SummaryResult:
    reasons = "; ".join(r for r in (result.fallback_reason, reason) if r)
    return result.model_copy(update={"fallback_reason": reasons, "usage": usage})
