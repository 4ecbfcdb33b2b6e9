"""Collections for long sessions: a read-only view of an append-only list, and pausing
the cyclic garbage collector around bulk builds of acyclic objects.

Reading a long session back (a restarted process) creates hundreds of thousands of small
objects at once: messages, blocks, their dicts, what is derived from them. CPython's
cyclic collector runs on allocation counts, and each of its older-generation passes walks
every live object again, so it ran many times during one such read and took more than
half of a 10,000-message cold start (docs/benchmarks.md), although nothing built there
forms a reference cycle. Reference counting frees everything as usual while it is paused.
"""

from __future__ import annotations

import bisect
import contextlib
import gc
import itertools
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, TypeVar, overload

T = TypeVar("T")


def collection_paused(bulk: bool = True) -> AbstractContextManager[None]:
    """The collector off for the block, back to what it was afterwards.

    Only for ``bulk`` work (pass whether it is): a build of hundreds of thousands of
    acyclic objects is where the collector's passes cost more than the work. A block of a
    handful of objects gets a context that does nothing, for less than pausing costs.
    """
    return CollectorPaused() if bulk else _NOTHING


_NOTHING: AbstractContextManager[None] = contextlib.nullcontext()


class CollectorPaused:
    """The context :func:`collection_paused` returns (a class: the loop enters one per call,
    and a generator-based context manager costs several times as much to enter)."""

    __slots__ = ("_was_enabled",)

    def __enter__(self) -> None:
        self._was_enabled = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc_info: object) -> None:
        if self._was_enabled:
            gc.enable()


class Prefix(Sequence[T]):
    """The first ``length`` items of a list its owner only ever appends to.

    As fixed as a tuple of them, without copying a long session's history on every call:
    what is appended later lies past ``length`` and is not part of the view. Compares
    equal to a sequence of the same items.
    """

    __slots__ = ("_items", "_length")

    def __init__(self, items: list[T], length: int | None = None) -> None:
        self._items = items
        self._length = len(items) if length is None else length

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[T, ...]: ...

    def __getitem__(self, index: int | slice) -> T | tuple[T, ...]:
        if isinstance(index, slice):
            return tuple(self._items[: self._length][index])
        if not -self._length <= index < self._length:
            raise IndexError("Prefix index out of range")
        return self._items[index % self._length]

    def __iter__(self) -> Iterator[T]:
        return itertools.islice(self._items, self._length)

    def bisect_left(self, item: Any, lo: int = 0) -> int:
        """``bisect.bisect_left(self, item, lo)`` over the underlying list, at C speed."""
        return bisect.bisect_left(self._items, item, lo, self._length)

    def __eq__(self, other: Any) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return len(other) == self._length and tuple(self) == tuple(other)

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"Prefix({list(self)!r})"
