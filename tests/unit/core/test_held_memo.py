"""HeldMemo: values by the identity of objects that cannot be weakly referenced."""

from __future__ import annotations

from hango.core.identity import HeldMemo


def test_the_same_objects_get_the_value_made_once_and_equal_new_ones_a_new_one() -> None:
    memo: HeldMemo[list[int]] = HeldMemo(limit=2)
    made: list[str] = []
    system = ("a", "b")

    def make(label: str) -> list[int]:
        made.append(label)
        return [len(made)]

    first = memo.get((system, None), ("k",), lambda: make("first"))
    assert memo.get((system, None), ("k",), lambda: make("again")) is first
    assert memo.get((system, None), ("other key",), lambda: make("key")) == [2]
    equal = tuple(list(system))
    assert equal == system and equal is not system
    assert memo.get((equal, None), ("k",), lambda: make("equal")) == [3]
    assert made == ["first", "key", "equal"]  # the third entry started the memo afresh
