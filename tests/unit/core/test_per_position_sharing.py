"""``per_position`` hands out the family's own list, copied on write.

The API body's message list is that list: a caller that keeps a body must never see it
change, and a caller that drops it must not pay for a copy of the history on the next call.
"""

from __future__ import annotations

import gc

from hango.core.identity import derived, edited, per_position


def form(item: int) -> dict[str, int]:
    return {"item": item}


def test_a_list_still_held_is_never_changed_by_the_next_update() -> None:
    first = derived(tuple(range(200)), None)
    held = per_position(first, "form", form)
    before = list(held)
    second = edited(first, {3: 1000}, tail=(200, 201))
    values = per_position(second, "form", form)
    assert held == before  # the caller's list is as it was
    assert values == [form(item) for item in second]
    assert values is not held


def test_a_dropped_list_is_brought_up_to_date_in_place() -> None:
    first = derived(tuple(range(200)), None)
    identity = id(per_position(first, "form", form))  # the caller keeps no reference
    gc.collect()
    second = edited(first, {3: 1000}, tail=(200, 201))
    values = per_position(second, "form", form)
    assert id(values) == identity  # no copy of the history was made
    assert values == [form(item) for item in second]


def test_the_same_sequence_asked_again_gets_the_same_list() -> None:
    first = derived(tuple(range(10)), None)
    assert per_position(first, "form", form) is per_position(first, "form", form)


def test_the_unshared_count_is_never_set_above_what_a_held_list_shows() -> None:
    from hango.core import identity

    held = [1]
    keeper = [held]  # a second holder
    assert identity._references(held) > identity._UNSHARED
    assert keeper
