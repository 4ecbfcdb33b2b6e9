"""Observers fans each hook out to the observers that override it, nested ones included."""

from __future__ import annotations

from hango.middleware.observer import NullObserver, Observers


class Counting(NullObserver):
    def __init__(self) -> None:
        self.truncations: list[int] = []

    def tool_args_truncated(self, session_id: str, turn: int, count: int) -> None:
        self.truncations.append(count)


def test_a_hook_reaches_every_observer_that_overrides_it_also_through_nested_observers() -> None:
    direct, inner = Counting(), Counting()
    observers = Observers([direct, Observers([inner, NullObserver()]), NullObserver()])

    observers.tool_args_truncated("s", 1, 3)

    assert direct.truncations == [3]
    assert inner.truncations == [3]
