"""The views of append-only lists."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hango.core.collection import Prefix


def test_the_view_searches_only_its_own_prefix() -> None:
    items = [1, 3, 5, 7, 9]
    view = Prefix(items, 3)
    assert [view.bisect_left(x) for x in (0, 1, 2, 5, 6, 8, 10)] == [0, 0, 1, 2, 3, 3, 3]
    assert view.bisect_left(4, lo=2) == 2


@given(st.lists(st.integers(), max_size=30), st.integers(0, 30), st.slices(40))
def test_a_view_slices_as_the_tuple_of_its_items(
    items: list[int], length: int, index: slice
) -> None:
    length = min(length, len(items))
    assert Prefix(items, length)[index] == tuple(items[:length])[index]
