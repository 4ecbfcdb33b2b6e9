"""Property: a Derived sequence behaves as the tuple of its elements, however it was edited.

A :class:`Derived` keeps its elements in chunks shared with the sequence it was made from;
the edits here (replacements, cuts, appends, all at once) cross chunk boundaries, and
after each one the sequence must read, slice, compare, hash, concatenate and pickle
exactly as the plain tuple made by the same edit.
"""

from __future__ import annotations

import copy
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hango.core.identity import Derived, changed_positions, derived, edited, replaced
from tests.properties import examples

edits = st.lists(
    st.tuples(
        st.dictionaries(st.integers(0, 400), st.integers(-50, 50), max_size=6),
        st.one_of(st.none(), st.integers(0, 400)),
        st.integers(0, 140),  # the length of what is appended
    ),
    min_size=1,
    max_size=8,
)


def by_tuple(model: tuple[int, ...], changes: dict[int, int], keep: int, tail: list[int]):
    items = list(model[:keep])
    for index, value in changes.items():
        items[index] = value
    return (*items, *tail)


def assert_reads_as(made: Derived, model: tuple[int, ...], probe: int) -> None:
    assert len(made) == len(model)
    assert tuple(made) == model
    assert list(reversed(made)) == list(reversed(model))
    assert made == model and model == made and made == Derived.of(model)
    assert (made != model) is False
    assert hash(made) == hash(model)
    for index in {0, probe, len(model) // 2, len(model) - 1, -1, -probe - 1}:
        if -len(model) <= index < len(model):
            assert made[index] == model[index]
    with pytest.raises(IndexError):
        made[len(model)]
    for start, stop, stride in [
        (None, None, None),
        (probe, None, None),
        (None, probe, None),
        (probe // 2, probe + 70, None),
        (-probe, None, None),
        (probe, 3, None),
        (None, None, 3),
        (None, None, -1),
    ]:
        part = slice(start, stop, stride)
        assert made[part] == model[part]
        assert type(made[part]) is tuple
    # Concatenation is what is under test here, not a style choice.
    assert made + (7,) == (*model, 7)  # noqa: RUF005
    assert (7,) + made == (7, *model)  # noqa: RUF005
    assert made + made == model + model
    again = pickle.loads(pickle.dumps(made))
    assert type(again) is tuple and again == model
    assert copy.copy(made) == model and copy.deepcopy(made) == model
    if model:
        other = list(model)
        other[probe % len(model)] = -(10**6)  # no element of the model
        assert made != Derived.of(other) and made != tuple(other)
        assert made != Derived.of(model[:-1])
        value = model[probe % len(model)]
        assert value in made
        assert made.index(value) == model.index(value)
        assert made.count(value) == model.count(value)


@settings(deadline=None, max_examples=examples(200))
@given(st.integers(0, 300), edits, st.integers(0, 500))
def test_an_edited_sequence_reads_as_the_tuple(
    size: int, plan: list[tuple[dict[int, int], int | None, int]], probe: int
) -> None:
    # Lengths drawn as numbers, not as lists: Hypothesis keeps lists short, and the edits
    # must cross chunk boundaries.
    start = [n % 13 for n in range(size)]
    made, model = derived(start, None), tuple(start)
    assert_reads_as(made, model, probe)
    for changes, keep_at, added in plan:
        tail = [probe + n for n in range(added)]
        keep = len(model) if keep_at is None else keep_at % (len(model) + 1)
        inside = {i % keep: v for i, v in changes.items()} if keep else {}
        previous, previous_model = made, model
        made, model = (
            edited(made, inside, keep=keep, tail=tail),
            by_tuple(model, inside, keep, tail),
        )
        assert_reads_as(made, model, probe)
        # The lineage names every position that may differ from the parent, no fewer.
        common = min(len(previous_model), len(model))
        differing = {i for i in range(common) if previous_model[i] != model[i]}
        assert differing <= set(made.changed)
        assert made.parent is previous
        assert changed_positions(previous, made) == [
            i for i in range(len(model)) if i >= common or i in differing
        ]


def test_an_edit_shares_the_chunks_it_does_not_touch() -> None:
    """What makes a copy cost what changed: untouched chunks are the parent's objects."""
    base = derived(range(1_000), None)
    marked = replaced(base, {500: -1})
    shared = [a is b for a, b in zip(base._chunks, marked._chunks, strict=True)]
    assert shared.count(False) == 1
    grown = edited(marked, {}, keep=1_000, tail=[1_000, 1_001])
    assert all(a is b for a, b in zip(marked._chunks[:-1], grown._chunks, strict=False))


def test_edits_outside_the_sequence_are_refused_and_change_nothing() -> None:
    base = derived((1, 2, 3), None)
    with pytest.raises(IndexError, match="replacement position 3"):
        replaced(base, {3: 9})
    with pytest.raises(IndexError, match="replacement position 2"):
        edited(base, {2: 9}, keep=2)
    with pytest.raises(IndexError, match="keep 4"):
        edited(base, {}, keep=4)
    with pytest.raises(IndexError, match="replacement position -1"):
        edited((1, 2, 3), {-1: 9})
    assert base == (1, 2, 3)


def test_a_request_holding_a_derived_sequence_dumps_and_compares_as_one_holding_a_tuple() -> None:
    from hango.core.messages import Message, Request

    messages = (Message(role="user", content="hi"), Message(role="assistant", content="yo"))
    plain = Request(model="m", max_tokens=5, messages=messages)
    held = plain.model_copy(update={"messages": derived(messages, None)})
    assert held == plain
    assert held.to_api() == plain.to_api()
    assert held.model_dump_json() == plain.model_dump_json()
    assert held.api_body() == plain.to_api()
    assert Request.model_validate(held.to_api()) == plain
    assert type(Request(model="m", max_tokens=5, messages=held.messages).messages) is tuple
