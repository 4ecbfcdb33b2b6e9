"""Properties of the pure pipeline over random valid histories with parallel tool batches."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hango.compaction.boundary import keep_boundary
from hango.compaction.groups import group_starts
from hango.compaction.mechanical import drop_oldest_groups
from hango.compaction.tool_args import truncate_tool_args
from hango.compaction.validate import validate_messages
from hango.core.errors import CannotFitError
from hango.core.messages import Message
from tests.histories import (
    CharEstimator,
    MessagesMeasure,
    boundaries_from,
    head_message,
    histories,
    shape,
    tool_groups,
    tool_ids,
)
from tests.properties import examples

ESTIMATOR = CharEstimator()
HEAD = head_message()
PROPERTY = settings(deadline=None, max_examples=examples(200))


def pairs_intact(kept: tuple[Message, ...]) -> bool:
    """Every tool_use in ``kept`` has its result in ``kept`` and vice versa."""
    used = {use.id for m in kept for use in m.tool_uses()}
    answered = {res.tool_use_id for m in kept for res in m.tool_results()}
    return used == answered


@PROPERTY
@given(histories(), st.data())
def test_keep_boundary_output_always_validates(
    messages: tuple[Message, ...], data: st.DataObject
) -> None:
    assert validate_messages(messages) == []
    keep = data.draw(st.integers(0, len(messages) + 2), label="keep_count")
    raw = len(messages) - keep
    boundary = keep_boundary(messages, keep)
    starts = group_starts(messages)
    if boundary is None:
        assert not [s for s in starts if 1 <= s <= raw]
        return
    kept = messages[boundary:]
    assert 1 <= boundary <= raw
    assert messages[boundary].role == "assistant"
    assert not [s for s in starts if boundary < s <= raw]  # moved back no further than needed
    assert pairs_intact(kept)
    assert validate_messages((HEAD, *kept)) == []


@PROPERTY
@given(histories(min_steps=1))
def test_groups_partition_and_every_start_is_a_clean_cut(messages: tuple[Message, ...]) -> None:
    groups = tool_groups(messages)
    assert [i for g in groups for i in g] == list(range(len(messages)))
    for start in group_starts(messages):
        assert pairs_intact(messages[start:])
        assert pairs_intact(messages[:start])
    for group in groups:
        # Inside a group, no cut keeps the pairs whole.
        assert all(messages[i].role == "user" for i in group if i != group.start)


@PROPERTY
@given(histories(min_steps=1), st.data())
def test_every_candidate_boundary_from_a_start_is_a_valid_cut(
    messages: tuple[Message, ...], data: st.DataObject
) -> None:
    start = data.draw(st.integers(0, len(messages)), label="start")
    candidates = boundaries_from(messages, start)
    assert candidates == [s for s in group_starts(messages) if s >= start]
    for boundary in candidates:
        assert validate_messages((HEAD, *messages[boundary:])) == []


@PROPERTY
@given(histories(), st.data())
def test_truncation_keeps_requests_valid_ids_intact_and_is_idempotent(
    messages: tuple[Message, ...], data: st.DataObject
) -> None:
    protect_from = data.draw(st.integers(0, len(messages)), label="protect_from")
    max_tokens = data.draw(st.sampled_from([0, 20, 200, 1_000, 5_000]), label="max_tokens")
    truncated = truncate_tool_args(
        messages, protect_from=protect_from, max_tokens=max_tokens, estimator=ESTIMATOR
    )
    out = truncated.messages
    assert validate_messages(out) == []
    assert shape(out) == shape(messages)
    assert tool_ids(out) == tool_ids(messages)
    assert all(a is b for a, b in zip(out[protect_from:], messages[protect_from:], strict=True))
    assert ESTIMATOR.estimate_messages(out) <= ESTIMATOR.estimate_messages(messages)
    assert (truncated.truncated == 0) == (out is messages)
    again = truncate_tool_args(
        out, protect_from=protect_from, max_tokens=max_tokens, estimator=ESTIMATOR
    )
    assert again.messages is out


@PROPERTY
@given(histories(min_steps=1), st.data())
def test_mechanical_truncation_output_validates_and_fits(
    messages: tuple[Message, ...], data: st.DataObject
) -> None:
    measure = MessagesMeasure(ESTIMATOR)
    limit = data.draw(st.integers(0, measure((HEAD, *messages)) + 10), label="limit")
    try:
        boundary = drop_oldest_groups(messages, head=HEAD, measure=measure, limit=limit)
    except CannotFitError as error:
        starts = group_starts(messages)
        if starts:
            assert measure((HEAD, *messages[starts[-1] :])) > limit
            assert error.tokens > limit
        return
    kept = (HEAD, *messages[boundary:])
    assert measure(kept) <= limit
    assert validate_messages(kept) == []
    earlier = [s for s in group_starts(messages) if s < boundary]
    assert not earlier or measure((HEAD, *messages[earlier[-1] :])) > limit
