"""A read-only view of a list its owner never changes under it: a history, not copied."""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar, overload

T = TypeVar("T")


class Positions(Sequence[T]):
    """A read-only sequence of ``_length`` items read by position, sliced into a tuple as a
    tuple is."""

    __slots__ = ()
    _length: int

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[T, ...]: ...

    def __getitem__(self, index: int | slice) -> T | tuple[T, ...]:
        if isinstance(index, slice):
            return self._span(index)
        if not -self._length <= index < self._length:
            raise IndexError(f"{type(self).__name__} index out of range")
        return self._at(index % self._length)

    def _at(self, position: int) -> T:
        raise NotImplementedError

    def _span(self, index: slice) -> tuple[T, ...]:
        return tuple(map(self._at, range(self._length)[index]))


class Prefix(Positions[T]):
    """The first ``length`` items of a list its owner never changes below ``length`` (it
    appends, or changes a copy): as fixed as a tuple of them (compares equal to one),
    without copying a long session's history."""

    __slots__ = ("_items", "_length")

    def __init__(self, items: list[T], length: int | None = None) -> None:
        self._items = items
        self._length = len(items) if length is None else length

    def _at(self, position: int) -> T:
        return self._items[position]

    def _span(self, index: slice) -> tuple[T, ...]:
        start, stop, step = index.indices(self._length)  # the slice alone is copied
        if step > 0:
            return tuple(self._items[start:stop:step])
        return tuple(map(self._items.__getitem__, range(start, stop, step)))

    def __iter__(self) -> Iterator[T]:
        return itertools.islice(self._items, self._length)

    def bisect_left(self, item: Any, lo: int = 0) -> int:
        """``bisect.bisect_left(self, item, lo)`` over the underlying list, at C speed."""
        return bisect.bisect_left(self._items, item, lo, self._length)

    def __eq__(self, other: Any) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        if isinstance(other, Prefix) and other._items is self._items:
            return other._length == self._length
        return len(other) == self._length and tuple(self) == tuple(other)

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"Prefix({list(self)!r})"
