"""The truncation middleware on the session's outgoing copy decides exactly as the full
recomputation does.

``FullRecomputation`` below is the middleware without the copy: every call it truncates
every message below the keep window and estimates the whole request. Random sessions
(tool rounds appended, steps, compactions that replace the prefix by a summary message,
joined messages rebuilt as new objects) go through both, the middleware on an
:class:`OutgoingCopy` fed the stored messages as the loop feeds it, each with its own run
state, and every call must leave the same truncation point, send the same messages and
report the same ``changed_from``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hango.compaction.outgoing import OutgoingCopy, Sums
from hango.compaction.tool_args import truncate_tool_args
from hango.core.collection import Prefix
from hango.core.messages import Message, Request, Response, StoredMessage
from hango.core.profiles import ModelProfile
from hango.middleware.base import Handler, ModelCall, PassThrough, StateHolder
from hango.middleware.tool_args import (
    STEP_ABOVE_TRIGGER_FRAC,
    ToolArgTruncationMiddleware,
)
from hango.providers.scripted import text_reply
from tests.histories import (
    CharEstimator,
    call,
    calls,
    head_message,
    payload,
    result,
    results,
    user,
)

MAX_TOKENS = 40
CLEAR_AT_LEAST = 150


class FullRecomputation(PassThrough):
    """The reference: the same rules, recomputed over the whole history on every call."""

    def __init__(self, profile: ModelProfile, estimator: CharEstimator) -> None:
        self.profile = profile
        self.estimator = estimator

    def wrap(self, model_call: ModelCall, call_next: Handler) -> Response:
        previous = model_call.state.state.truncated_before_seq
        before_seq = self._step(model_call)
        cut = _linear_index_of_seq(model_call, before_seq)
        outcome = truncate_tool_args(
            model_call.request.messages,
            protect_from=cut,
            max_tokens=MAX_TOKENS,
            estimator=self.estimator,
        )
        if outcome.truncated == 0:
            return call_next(model_call)
        request = model_call.request.model_copy(update={"messages": outcome.messages})
        changed = (
            _linear_index_of_seq(model_call, previous)
            if before_seq > previous
            else model_call.changed_from
        )
        return call_next(model_call.evolve(request=request, changed_from=changed))

    def _step(self, model_call: ModelCall) -> int:
        current = model_call.state.state.truncated_before_seq
        messages = model_call.request.messages
        first_real = model_call.first_real
        protect_from = len(messages) - self.profile.keep_count(len(messages) - first_real)
        end = max(first_real, protect_from)
        target = next((s for s in model_call.seqs[end:] if s is not None), None)
        if target is None or target <= current:
            return current
        pending = messages[_linear_index_of_seq(model_call, current) : end]
        cut = truncate_tool_args(
            pending,
            protect_from=len(pending),
            max_tokens=MAX_TOKENS,
            estimator=self.estimator,
        )
        if not cut.truncated:
            return current
        estimate = self.estimator.estimate_message
        saved = sum(estimate(a) - estimate(b) for a, b in zip(pending, cut.messages, strict=True))
        trigger = self.profile.trigger_tokens
        if saved < min(CLEAR_AT_LEAST, trigger // 10):
            return current
        if self.estimator.estimate_request(model_call.request) <= trigger * STEP_ABOVE_TRIGGER_FRAC:
            return current
        model_call.state.truncate_before(target)
        return target


def _linear_index_of_seq(model_call: ModelCall, seq: int) -> int:
    seqs = model_call.seqs
    return next((n for n, s in enumerate(seqs) if s is not None and s >= seq), len(seqs))


@dataclass
class Sent:
    messages: tuple[Message, ...]
    changed_from: int | None
    truncated_before_seq: int


def run(
    middleware: PassThrough,
    holder: StateHolder,
    messages: tuple[Message, ...],
    seqs: tuple[int | None, ...],
    copy: OutgoingCopy | None = None,
) -> Sent:
    """One call through ``middleware``: over the plain ``messages``, or, given a ``copy``,
    over what the copy makes of the same stored messages (as the loop calls it)."""
    if copy is not None:
        pairs = zip(seqs, messages, strict=True)
        stored = [StoredMessage(seq=n, turn=1, message=m) for n, m in pairs if n is not None]
        head = messages[0] if seqs and seqs[0] is None else None
        messages, seqs = copy.update(stored, head)  # type: ignore[assignment]
    request = Request(model="m", max_tokens=10, messages=messages, system="You are an agent.")
    model_call = ModelCall(
        session_id="s", turn=1, request=request, seqs=seqs, state=holder, copy=copy
    )
    reached: list[ModelCall] = []

    def terminal(c: ModelCall) -> Response:
        reached.append(c)
        return text_reply("ok")

    middleware.wrap(model_call, terminal)
    return Sent(
        reached[0].request.messages, reached[0].changed_from, holder.state.truncated_before_seq
    )


# One session event: ("round", result size) appends a tool round, ("compact", share) puts a
# summary message in front of the newest share of the history, ("rebuild",) makes new
# objects of the same messages (a restart, a joined message redone).
events = st.lists(
    st.one_of(
        st.tuples(st.just("round"), st.integers(min_value=0, max_value=600)),
        st.tuples(st.just("compact"), st.floats(min_value=0.2, max_value=0.9)),
        st.tuples(st.just("rebuild")),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(
    events=events,
    window=st.sampled_from([2_000, 6_000, 20_000]),
    keep=st.sampled_from([0.1, 0.3, 0.5]),
)
def test_incremental_decisions_equal_the_full_recomputation(
    events: list[tuple[object, ...]], window: int, keep: float
) -> None:
    profile = ModelProfile(
        model="m",
        max_input_tokens=window,
        trigger_frac=0.85,
        keep_frac=keep,
        summarizer_model="m",
        known=True,
    )
    estimator = CharEstimator()
    incremental = ToolArgTruncationMiddleware(
        profile=profile, estimator=estimator, max_tokens=MAX_TOKENS, clear_at_least=CLEAR_AT_LEAST
    )
    reference = FullRecomputation(profile, estimator)
    fast, slow = StateHolder(), StateHolder()
    copy = OutgoingCopy(estimator)
    stored: list[tuple[int, Message]] = []
    head: Message | None = None
    kept_from = 0
    for number, event in enumerate(events):
        if event[0] == "round":
            size = int(event[1])  # type: ignore[call-overload]
            tool_id = f"t{number}"
            big = {"path": "/a.py", "content": payload(size, tool_id)}
            stored.append((len(stored) + 1, calls(call(tool_id, "write_file", **big))))
            stored.append((len(stored) + 1, results(result(tool_id, payload(size, "r")))))
        elif event[0] == "compact" and stored:
            share = float(event[1])  # type: ignore[arg-type]
            candidates = [seq for seq, m in stored if seq >= kept_from and m.role == "assistant"]
            if candidates:
                kept_from = candidates[int(len(candidates) * share) % len(candidates)]
                head = head_message(f"Summary up to {kept_from}.")
        elif event[0] == "rebuild":
            stored = [(seq, Message.model_validate(m.to_api())) for seq, m in stored]
        kept = [(seq, m) for seq, m in stored if seq >= kept_from]
        messages = tuple(m for _, m in kept)
        seqs: tuple[int | None, ...] = tuple(seq for seq, _ in kept)
        if head is not None:
            messages, seqs = (head, *messages), (None, *seqs)
        if not messages:
            continue
        assert run(incremental, fast, messages, seqs, copy) == run(reference, slow, messages, seqs)


def test_the_sums_follow_updates_truncation_and_growth() -> None:
    values = [5, 0, 3, 9, 1, 7, 2, 8, 6, 4]
    sums = Sums()
    for index, value in enumerate(values):
        sums.put(index, value)
    assert sums.upto(5) == sum(values[:5])
    sums.put(3, 1)
    values[3] = 1
    sums.cut(7)
    del values[7:]
    sums.put(7, 11)
    values.append(11)
    for start in range(len(values) + 1):
        for end in range(start, len(values) + 1):
            assert sums.between(start, end) == sum(values[start:end])


def test_truncation_refuses_a_negative_protection_point() -> None:
    with pytest.raises(ValueError, match="protect_from"):
        truncate_tool_args((), protect_from=-1, max_tokens=MAX_TOKENS, estimator=CharEstimator())


def test_a_growing_session_takes_steps_and_both_agree_on_each() -> None:
    """The property above is not vacuous: this session truncates, in more than one step."""
    profile = ModelProfile(
        model="m",
        max_input_tokens=20_000,
        trigger_frac=0.85,
        keep_frac=0.3,
        summarizer_model="m",
        known=True,
    )
    estimator = CharEstimator()
    incremental = ToolArgTruncationMiddleware(
        profile=profile, estimator=estimator, max_tokens=MAX_TOKENS, clear_at_least=CLEAR_AT_LEAST
    )
    reference = FullRecomputation(profile, estimator)
    fast, slow = StateHolder(), StateHolder()
    copy = OutgoingCopy(estimator)
    messages: tuple[Message, ...] = ()
    points = set()
    for number in range(80):
        tool_id = f"t{number}"
        messages += (
            calls(call(tool_id, "write_file", content=payload(300, tool_id))),
            results(result(tool_id, payload(300, "r"))),
        )
        seqs = tuple(range(1, len(messages) + 1))
        sent = run(incremental, fast, messages, seqs, copy)
        assert sent == run(reference, slow, messages, seqs)
        points.add(sent.truncated_before_seq)
    assert len(points - {0}) >= 2, points


@settings(max_examples=100, deadline=None)
@given(
    gaps=st.lists(st.integers(min_value=1, max_value=3), min_size=0, max_size=40),
    head=st.booleans(),
    seq=st.integers(min_value=0, max_value=130),
    extra=st.integers(min_value=0, max_value=5),
)
def test_the_cut_is_found_alike_in_a_view_and_in_a_tuple(
    gaps: list[int], head: bool, seq: int, extra: int
) -> None:
    """The loop's sequence numbers are a view of a longer list (what a later call appends);
    the search over it answers as the linear scan over the plain tuple."""
    stored = list(itertools.accumulate(gaps))
    numbers: list[int | None] = [None, *stored] if head else list(stored)
    later = (stored[-1] if stored else 0) + 1  # what a later call appended: past the view
    seqs = Prefix(numbers + [later + n for n in range(extra)], len(numbers))
    messages = tuple(head_message("h") if n is None else user("m") for n in numbers)
    request = Request(model="m", max_tokens=10, messages=messages or (user("m"),))
    model_call = ModelCall(session_id="s", turn=1, request=request, seqs=seqs, state=StateHolder())
    plain = ModelCall(
        session_id="s", turn=1, request=request, seqs=tuple(numbers), state=StateHolder()
    )
    assert model_call.index_of_seq(seq) == _linear_index_of_seq(plain, seq)
    assert plain.index_of_seq(seq) == _linear_index_of_seq(plain, seq)
