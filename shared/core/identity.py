"""Per-object memoization for the frozen wire types.

Wire objects are frozen, so anything derived from one (its token estimate, its API JSON,
its validation facts) stays true for as long as the object lives. The loop reuses the
same stored message objects call after call, which is what lets each call pay only for
what was appended.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")
V = TypeVar("V")


class IdentityCache(Generic[T, V]):
    """Memoizes a value per object, by identity, for as long as the object lives.

    Entries hold a weak reference and vanish when the object dies, so the cache never
    keeps messages alive and an id reused by a new object can never hit a stale entry.
    """

    def __init__(self) -> None:
        self._entries: dict[int, tuple[weakref.ref[Any], V]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def peek(self, obj: T) -> V | None:
        """The remembered value, or ``None`` when there is none."""
        entry = self._entries.get(id(obj))
        if entry is not None and entry[0]() is obj:
            return entry[1]
        return None

    def get(self, obj: T, compute: Callable[[T], V]) -> V:
        entry = self._entries.get(id(obj))
        if entry is not None and entry[0]() is obj:
            return entry[1]
        value = compute(obj)
        self.put(obj, value)
        return value

    def put(self, obj: T, value: V) -> None:
        """Remember ``value`` for ``obj`` (not weak-referenceable: not remembered)."""
        key = id(obj)
        try:
            ref = weakref.ref(obj, functools.partial(_forget, self._entries, key))
        except TypeError:
            return
        self._entries[key] = (ref, value)


def _forget(entries: dict[int, tuple[weakref.ref[Any], Any]], key: int, ref: Any) -> None:
    entry = entries.get(key)
    if entry is not None and entry[0] is ref:
        entries.pop(key, None)
