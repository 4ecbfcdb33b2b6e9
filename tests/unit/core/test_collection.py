"""The collector pause around bulk builds, and the views of append-only lists."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from hango.core.collection import Prefix, collection_paused


@pytest.fixture
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_a_bulk_build_runs_with_the_collector_paused_and_restored(collector_on: None) -> None:
    with collection_paused(bulk=True):
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), collection_paused():
        raise RuntimeError("the build failed")
    assert gc.isenabled()


def test_a_small_step_leaves_the_collector_alone(collector_on: None) -> None:
    with collection_paused(bulk=False):
        assert gc.isenabled()
    assert gc.isenabled()


def test_a_pause_inside_a_pause_keeps_the_collector_off_until_the_outer_one_ends(
    collector_on: None,
) -> None:
    with collection_paused():
        with collection_paused():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()


def test_the_view_searches_only_its_own_prefix() -> None:
    items = [1, 3, 5, 7, 9]
    view = Prefix(items, 3)
    assert [view.bisect_left(x) for x in (0, 1, 2, 5, 6, 8, 10)] == [0, 0, 1, 2, 3, 3, 3]
    assert view.bisect_left(4, lo=2) == 2
