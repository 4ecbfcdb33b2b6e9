"""What a compaction evicts and keeps, as the summarization middleware's rungs need it.

Pure functions of the call: the stored messages before a cut, the record of a summary,
the outgoing copy with a record applied, and the window an overflow revealed.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from operator import attrgetter

from hango.compaction.head import head_message
from hango.compaction.jobs import SummaryResult
from hango.compaction.record import CompactionReason, CompactionRecord
from hango.compaction.summary_prompt import artifact_index
from hango.core.messages import StoredMessage
from hango.core.profiles import ModelProfile
from hango.middleware.base import ModelCall
from hango.tokens.measure import RequestEstimate

# Identifiers carried in the head message's artifact index, newest last.
MAX_ARTIFACTS = 200


def seq_at(call: ModelCall, index: int) -> int:
    seq = call.seqs[index]
    if seq is None:  # pragma: no cover - a boundary never lands on the summary message
        raise ValueError("a keep boundary landed on the summary message")
    return seq


def kept_from(call: ModelCall, index: int) -> int:
    """The sequence number a cut at ``index`` keeps from (past the end: the next one)."""
    if index < len(call.seqs):
        return seq_at(call, index)
    return max((m.seq for m in call.stored), default=0) + 1


def evicted_request(call: ModelCall, kept_from_seq: int) -> str | None:
    """The text of the user message that started this turn, when a cut at ``kept_from_seq``
    leaves it out (``None``: the kept messages hold it). A turn of one user message and
    dozens of tool rounds loses it on its first compaction: the head quotes it from then on
    (after an earlier cut of this turn, from that cut's record).
    """
    stored = call.stored
    first = bisect.bisect_left(stored, call.turn, key=attrgetter("turn"))  # turns grow with the seq
    opening = stored[first] if first < len(stored) and stored[first].turn == call.turn else None
    # What the user said to start the turn: a user message that is not tool results.
    if opening is None or opening.message.role != "user" or any(opening.message.tool_results()):
        previous = call.run_state.latest
        return previous.user_request if previous and previous.at_turn == call.turn else None
    if opening.seq >= kept_from_seq:
        return None
    text = opening.message.text()
    return text if text.strip() else None


# Stands in for the summary while the head around it is measured. Not empty: a head with an
# empty summary is the short notice, without the summary's frame and artifact index.
MEASURED_SUMMARY = SummaryResult(text=".", summarizer="none")


def summary_record(
    call: ModelCall,
    reason: CompactionReason,
    tokens: int,
    kept_from_seq: int,
    evicted: Sequence[StoredMessage],
    offload_path: str,
    result: SummaryResult,
    artifacts: tuple[str, ...] | None = None,
) -> CompactionRecord:
    """The record of a summary that replaces ``evicted`` (made now, or ready beforehand);
    ``artifacts``: the range's merged artifact index when it is known already."""
    if artifacts is None:
        artifacts = _merged(call.run_state.latest, [artifact_index(evicted)])
    return CompactionRecord(
        user_request=evicted_request(call, kept_from_seq),
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
        route=result.route,
        artifacts=artifacts,
    )


def stored_before(call: ModelCall, kept_from_seq: int) -> tuple[StoredMessage, ...]:
    return tuple(call.stored[: _index_of(call.stored, kept_from_seq)])


def _index_of(stored: Sequence[StoredMessage], seq: int) -> int:
    """The index in ``stored`` (in sequence order) of the first message at or after
    ``seq``: a binary search, so a cut tried many times costs no walk of the history."""
    return bisect.bisect_left(stored, seq, key=attrgetter("seq"))


class ArtifactPrefixes:
    """The artifacts of ``previous`` merged with any prefix of ``stored``, each message's
    artifacts found once: mechanical truncation weighs many cuts of the same range."""

    def __init__(self, previous: CompactionRecord | None, stored: Sequence[StoredMessage]):
        self.previous = previous
        self.stored = stored
        self._found: list[list[str]] = []

    def before(self, kept_from_seq: int) -> tuple[str, ...]:
        count = _index_of(self.stored, kept_from_seq)
        for stored in self.stored[len(self._found) : count]:
            self._found.append(artifact_index((stored,)))
        return _merged(self.previous, self._found[:count])


def _merged(previous: CompactionRecord | None, found: Sequence[list[str]]) -> tuple[str, ...]:
    """The previous record's artifacts, then each newly found one, in order, once."""
    known = dict.fromkeys(previous.artifacts if previous else ())
    for artifacts in found:
        known.update(dict.fromkeys(artifacts))
    # The newest ones matter most, and the index must not grow without bound.
    return tuple(known)[-MAX_ARTIFACTS:]


def apply_record(call: ModelCall, record: CompactionRecord, boundary: int) -> ModelCall:
    """``[head] + kept``: the outgoing copy with the record applied."""
    messages = (head_message(record), *call.request.messages[boundary:])
    seqs = (None, *call.seqs[boundary:])
    stored = tuple(call.stored[_index_of(call.stored, record.kept_from_seq) :])
    request = call.request.model_copy(update={"messages": messages})
    return call.evolve(request=request, seqs=seqs, stored=stored)


def tokens_between(
    call: ModelCall, estimate: RequestEstimate, tokens: int, start: int, end: int
) -> float:
    """Tokens of the messages from ``start`` up to ``end``, in the units of ``tokens`` (the
    whole request's figure), from the running per-message figures: no walk over them."""
    whole, before_start = estimate.split(call.request, start)
    scale = tokens / whole if whole > 0 else 1.0
    return (estimate.split(call.request, end)[1] - before_start) * scale


def undercount_scale(call: ModelCall) -> float:
    """How much the pipeline's measure undercounts: the provider's "prompt is too long: N
    tokens" against what the pipeline measured for that refused request. A refusal without
    a figure (stop reason ``model_context_window_exceeded``) says nothing about the input
    alone (the output may have run out of room), so the measure stands.
    """
    overflow = call.overflow
    if overflow is None or overflow.measured <= 0 or overflow.tokens is None:
        return 1.0
    return max(1.0, overflow.tokens / overflow.measured)


def window_of(call: ModelCall, profile: ModelProfile) -> int:
    """The profile's window, or the smaller one an overflow error revealed."""
    revealed = call.overflow.maximum if call.overflow is not None else None
    if revealed is not None and 0 < revealed < profile.max_input_tokens:
        return revealed
    return profile.max_input_tokens
