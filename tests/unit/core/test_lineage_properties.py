"""Property: what a lineage answers equals the full recomputation.

Sequences are derived from one another the ways the pipeline derives its outgoing copies
(grown at the end with the last element redone, a few positions replaced, cut shorter,
siblings made from one parent, and plain tuples that break the lineage), with elements
that are sometimes new objects equal to the old ones. For any two sequences of the run,
``changed_positions`` must give what the element-by-element comparison gives, and the
per-position memos must give what computing every position gives.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hango.core.identity import (
    MAX_HOPS,
    Derived,
    changed_positions,
    derived,
    edited,
    per_position,
    position_total,
    replaced,
)
from tests.properties import examples


@dataclass(frozen=True, eq=True)
class Item:
    """An element compared by value, like the frozen wire types."""

    value: int


def by_hand(old: tuple[Item, ...], new: tuple[Item, ...]) -> list[int]:
    common = min(len(old), len(new))
    return [i for i in range(common) if old[i] != new[i]] + list(range(common, len(new)))


operations = st.lists(
    st.tuples(
        st.sampled_from(
            ["grow", "grow", "extend", "replace", "replace", "cut", "edit", "sibling", "plain"]
        ),
        st.integers(min_value=0, max_value=1_000),
        st.integers(min_value=0, max_value=5),
    ),
    min_size=1,
    max_size=30,
)


def step(history: list[tuple[Item, ...]], action: str, pick: int, size: int) -> tuple[Item, ...]:
    latest = history[-1]
    fresh = [Item(pick % 7 + n) for n in range(size)]
    if action == "grow":
        keep = max(0, len(latest) - 1)
        return derived((*latest[:keep], *fresh, Item(pick % 5)), latest, range(keep, len(latest)))
    if action == "extend":  # as the outgoing copy grows: made from its parent's chunks
        keep = max(0, len(latest) - 1)
        return edited(latest, {}, keep=keep, tail=[*fresh, Item(pick % 5)])
    if action == "edit" and latest:  # cut, a position replaced and grown at once
        keep = pick % (len(latest) + 1)
        changes = {pick % keep: Item(-pick)} if keep else {}
        return edited(latest, changes, keep=keep, tail=fresh)
    if action == "replace" and latest:
        positions = {(pick + 3 * n) % len(latest) for n in range(size + 1)}
        # Sometimes an equal object in place of the old one: it counts as unchanged.
        return replaced(latest, {p: Item(latest[p].value + (pick % 2)) for p in positions})
    if action == "cut":
        end = pick % (len(latest) + 1)
        return derived(latest[:end], latest, ())
    if action == "sibling" and len(history) > 1:
        parent = history[-2]
        position = pick % len(parent) if parent else None
        changes = {} if position is None else {position: Item(-pick)}
        return replaced(parent, changes)
    return tuple(latest) + tuple(fresh)  # a plain tuple: no lineage


def run(start: list[int], plan: list[tuple[str, int, int]]) -> Iterator[tuple[Item, ...]]:
    """The first sequence, then each one the plan derives, in order."""
    history: list[tuple[Item, ...]] = [derived(tuple(Item(v) for v in start), None)]
    yield history[0]
    for action, pick, size in plan:
        history.append(step(history, action, pick, size))
        yield history[-1]


@settings(deadline=None, max_examples=examples(300))
@given(st.lists(st.integers(0, 9), max_size=12), operations)
def test_changed_positions_along_a_lineage_equals_the_comparison(
    start: list[int], plan: list[tuple[str, int, int]]
) -> None:
    history = list(run(start, plan))
    for old in history[-(MAX_HOPS + 3) :]:
        for new in history[-(MAX_HOPS + 3) :]:
            assert changed_positions(old, new) == by_hand(tuple(old), tuple(new))


@settings(deadline=None, max_examples=examples(300))
@given(st.lists(st.integers(0, 9), max_size=12), operations)
def test_per_position_memos_equal_the_full_computation(
    start: list[int], plan: list[tuple[str, int, int]]
) -> None:
    history: list[tuple[Item, ...]] = []
    picks = [0, *(pick for _, pick, _ in plan)]
    for latest, pick in zip(run(start, plan), picks, strict=True):
        history.append(latest)
        # Asked in an order that also goes back to an earlier sequence now and then.
        for sequence in (latest, history[-1 - pick % min(3, len(history))]):
            assert per_position(sequence, "doubled", lambda i: i.value * 2) == [
                i.value * 2 for i in sequence
            ]
            assert position_total(sequence, "total", lambda i: i.value) == sum(
                i.value for i in sequence
            )


def test_one_derivation_is_compared_at_its_changes_only() -> None:
    """Long sequences one step apart: the answer comes from the changes, not a walk."""

    compared: list[int] = []

    class Counted(Item):
        def __eq__(self, other: object) -> bool:
            compared.append(self.value)
            return isinstance(other, Item) and other.value == self.value

        __hash__ = Item.__hash__

    base = derived(tuple(Counted(n) for n in range(10_000)), None)
    grown = derived((*base, Counted(-1)), base, ())
    marked = replaced(grown, {9_999: Counted(-2), 5_000: base[5_000]})
    assert changed_positions(base, marked) == [9_999, 10_000]
    assert compared == [9_999]  # the one changed position below the old length


def test_a_lineage_does_not_keep_its_whole_past() -> None:
    """Links older than MAX_HOPS are cut, so old requests can be freed."""
    first = derived((Item(0),), None)
    latest: tuple[Item, ...] = first
    for n in range(MAX_HOPS + 5):
        latest = derived((*latest, Item(n)), latest, ())
    depth, node = 0, latest
    while isinstance(node, Derived) and node.parent is not None:
        depth, node = depth + 1, node.parent
    assert depth <= MAX_HOPS + 1
    assert first.parent is None


def test_a_derived_tuple_pickles_as_a_plain_one() -> None:
    import pickle

    made = derived((Item(1), Item(2)), derived((Item(1),), None), ())
    again = pickle.loads(pickle.dumps(made))
    assert type(again) is tuple
    assert again == (Item(1), Item(2))


def test_a_compute_that_fails_half_way_leaves_no_half_edited_memo() -> None:
    """A memo updated in place must not survive an exception in the middle of it."""
    first = derived(tuple(Item(n) for n in range(5)), None)
    assert per_position(first, "ten", lambda i: i.value * 10) == [0, 10, 20, 30, 40]
    assert position_total(first, "sum", lambda i: i.value) == 10
    shorter = replaced(derived(first[:3], first, ()), {0: Item(7), 1: Item(8)})

    def failing(item: Item) -> int:
        if item.value == 8:
            raise MemoryError("half-way")
        return item.value

    with pytest.raises(MemoryError):
        per_position(shorter, "ten", failing)
    with pytest.raises(MemoryError):
        position_total(shorter, "sum", failing)
    longer = derived((*first, Item(5)), first, ())
    assert per_position(longer, "ten", lambda i: i.value * 10) == [0, 10, 20, 30, 40, 50]
    assert position_total(longer, "sum", lambda i: i.value) == 15
