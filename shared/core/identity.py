"""Per-object memoization for the frozen wire types, and per-session state.

Wire objects are frozen, so what is derived from one (its token estimate) stays true for
as long as the object lives. What is derived per position of a session's outgoing copy
is kept by the copy itself (``compaction/outgoing.py``), not here.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")
V = TypeVar("V")


class _Entry(weakref.ref):  # type: ignore[type-arg]
    """A weak reference to an object that carries the object's id and the value for it.

    One object per entry, where a reference with a callback bound to its key plus a
    (reference, value) pair made three or four: each object that lives on is one more for
    the cyclic collector to count towards its next full pass and to walk in every one.
    """

    __slots__ = ("key", "value")

    key: int
    value: Any


class IdentityCache(Generic[T, V]):
    """Memoizes a value per object, by identity, for as long as the object lives.

    Entries hold a weak reference and vanish when the object dies, so the cache never
    keeps messages alive and an id reused by a new object can never hit a stale entry.
    """

    def __init__(self) -> None:
        self._entries: dict[int, _Entry] = {}
        entries = self._entries

        # One callback for every entry, holding the dict, not the cache: a reference
        # cycle through the cache would wait for the collector to be freed.
        def forget(entry: _Entry) -> None:
            if entries.get(entry.key) is entry:
                del entries[entry.key]

        self._forget = forget

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, obj: T, compute: Callable[[T], V]) -> V:
        entry = self._entries.get(id(obj))
        if entry is not None and entry() is obj:
            value: V = entry.value
            return value
        value = compute(obj)
        try:
            entry = _Entry(obj, self._forget)
        except TypeError:  # not weak-referenceable: not remembered
            return value
        entry.key, entry.value = id(obj), value
        self._entries[entry.key] = entry
        return value


class HeldMemo(Generic[V]):
    """Values made from objects that need not be weak-referenceable (tuples), by identity.

    Each entry holds its objects, so their ids cannot be reused while it lives; an entry
    counts only when the very same objects are asked about again. At ``limit`` entries
    the memo starts afresh: it serves the few fixed parts a process sends on every call.
    """

    def __init__(self, limit: int = 64) -> None:
        self._limit = limit
        self._entries: dict[tuple[object, ...], tuple[tuple[object, ...], V]] = {}

    def get(self, objects: tuple[object, ...], key: tuple[object, ...], make: Callable[[], V]) -> V:
        """The value for these very ``objects`` under ``key``, made once."""
        ids = (*map(id, objects), *key)
        entry = self._entries.get(ids)
        if entry is not None and all(a is b for a, b in zip(entry[0], objects, strict=True)):
            return entry[1]
        value = make()
        if len(self._entries) >= self._limit:
            self._entries.clear()
        self._entries[ids] = (objects, value)
        return value


class RecentlyUsed(Generic[V]):
    """Per-key state for the ``limit`` most recently used keys (sessions, in practice).

    One middleware instance serves many sessions; what it remembers per session must not
    grow with the number of sessions a long-lived worker has ever seen.
    """

    def __init__(self, limit: int = 256) -> None:
        self._limit = limit
        self._items: OrderedDict[str, V] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def discard(self, key: str) -> None:
        """Forget ``key``: its next ``get`` makes it afresh."""
        with self._lock:
            self._items.pop(key, None)

    def get(self, key: str, make: Callable[[], V]) -> V:
        with self._lock:
            value = self._items.pop(key, None)
            if value is None:
                value = make()
            self._items[key] = value
            while len(self._items) > self._limit:
                self._items.popitem(last=False)
            return value
