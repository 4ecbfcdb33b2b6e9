"""Per-object memoization for the frozen wire types.

Wire objects are frozen, so anything derived from one (its token estimate, its API JSON,
its validation facts) stays true for as long as the object lives. The loop reuses the
same stored message objects call after call, which is what lets each call pay only for
what was appended.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
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


# --- where a new sequence differs from the previous one ----------------------------------
#
# Call after call, the outgoing messages are the previous call's objects plus what was
# appended, with now and then a few replaced (a truncated tool block, a marked summary
# message). What is derived per message is remembered for the previous copy and redone
# only at the positions ``changed_positions`` returns. Tuple equality compares identical
# objects without calling ``__eq__``, so comparing two copies that share their objects
# costs a pointer walk; halves that differ are split until the differing positions are
# found. Objects that differ but are equal in content count as unchanged: everything
# derived from a wire object depends on its content only.

# Below this length a slice is checked element by element.
_LEAF = 16


def changed_positions(old: Sequence[Any], new: Sequence[Any]) -> list[int]:
    """Positions of ``new`` whose element is not the one at that position in ``old``.

    Every position past the end of ``old`` is changed. Sorted, without repeats.
    """
    old_t, new_t = tuple(old), tuple(new)
    common = min(len(old_t), len(new_t))
    changed: list[int] = []
    _walk(old_t, new_t, 0, common, changed)
    changed.extend(range(common, len(new_t)))
    return changed


def _walk(old: tuple[Any, ...], new: tuple[Any, ...], lo: int, hi: int, out: list[int]) -> None:
    if lo >= hi or old[lo:hi] == new[lo:hi]:
        return
    if hi - lo <= _LEAF:
        out.extend(i for i in range(lo, hi) if not (old[i] is new[i] or old[i] == new[i]))
        return
    middle = (lo + hi) // 2
    _walk(old, new, lo, middle, out)
    _walk(old, new, middle, hi, out)


class RecentlyUsed(Generic[V]):
    """Per-key state for the ``limit`` most recently used keys (sessions, in practice).

    One middleware instance serves many sessions; what it remembers per session must not
    grow with the number of sessions a long-lived worker has ever seen.
    """

    def __init__(self, limit: int = 256) -> None:
        self._limit = limit
        self._items: OrderedDict[str, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str, make: Callable[[], V]) -> V:
        with self._lock:
            value = self._items.pop(key, None)
            if value is None:
                value = make()
            self._items[key] = value
            while len(self._items) > self._limit:
                self._items.popitem(last=False)
            return value
