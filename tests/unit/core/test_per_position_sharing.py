"""``per_position`` hands out a copy of the family's list: a caller that keeps it never
sees it change, and one that changes it changes nothing the family keeps."""

from __future__ import annotations

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


def test_the_list_handed_out_is_the_callers_own() -> None:
    first = derived(tuple(range(200)), None)
    mine = per_position(first, "form", form)
    mine.clear()
    again = per_position(first, "form", form)
    assert len(again) == 200 and again is not mine
    second = edited(first, {5: 1000}, tail=(200,))
    assert per_position(second, "form", form)[4:7] == [{"item": 4}, {"item": 1000}, {"item": 6}]
