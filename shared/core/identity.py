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
from collections.abc import Callable, Iterator, Mapping, Sequence
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
# only at the positions ``changed_positions`` returns.
#
# The sequences the pipeline builds say how they were made: a :class:`Derived` tuple
# names the sequence it was made from and the positions where it may differ from it. Two
# sequences of one lineage are then compared at those positions only, in O(changed),
# whatever the length of the history. Any other pair is compared by a walk: tuple
# equality compares identical objects without calling ``__eq__``, so comparing two copies
# that share their objects costs a pointer walk, and halves that differ are split until
# the differing positions are found. Objects that differ but are equal in content count
# as unchanged: everything derived from a wire object depends on its content only.

# Below this length a slice is checked element by element.
_LEAF = 16

# How many derivations a lineage remembers: enough for one call's stages (the copy, a
# truncation, the breakpoints) and the call before it; older links are cut, so a lineage
# never keeps a long session's past requests alive.
MAX_HOPS = 6


class Derived(tuple):  # type: ignore[type-arg]
    """A tuple that remembers the tuple it was made from and where it may differ from it.

    ``changed`` lists the positions below ``len(parent)`` whose element may not be the
    parent's; every other position below that length holds the parent's very object (or
    one equal to it: what is derived from a wire object depends on its content only).
    Positions past the parent's end are new. ``family`` is shared along the lineage: what
    is derived per position of its latest member is kept there (:func:`per_position`).
    Pickles as a plain tuple (the lineage is a memo, not data).
    """

    parent: tuple[Any, ...] | None
    changed: tuple[int, ...]
    family: dict[str, Any]

    def __reduce__(self) -> tuple[Any, ...]:
        return (tuple, (tuple(self),))


def derived(
    items: Sequence[Any], parent: Sequence[Any] | None, changed: Sequence[int] = ()
) -> Derived:
    """``items`` as a :class:`Derived` of ``parent``, differing at most at ``changed``.

    With ``parent`` ``None`` the tuple starts a lineage of its own.
    """
    # From an exact tuple the subclass copies once; from a list it would copy twice.
    made = Derived(_as_tuple(items))
    made.changed = tuple(changed)
    if parent is None:
        made.parent, made.family = None, {}
        return made
    made.parent = _as_tuple(parent)
    made.family = parent.family if isinstance(parent, Derived) else {}
    _cut_beyond(made)
    return made


def replaced(parent: Sequence[Any], replacements: Mapping[int, Any]) -> Derived:
    """``parent`` with the elements at some positions replaced, as a :class:`Derived`."""
    items = list(parent)
    for index, item in replacements.items():
        items[index] = item
    return derived(items, parent, sorted(replacements))


def _cut_beyond(node: Derived) -> None:
    for _ in range(MAX_HOPS):
        parent = node.parent
        if not isinstance(parent, Derived):
            return
        node = parent
    node.parent = None


def changed_positions(old: Sequence[Any], new: Sequence[Any]) -> list[int]:
    """Positions of ``new`` whose element is not the one at that position in ``old``.

    Every position past the end of ``old`` is changed. Sorted, without repeats.
    """
    if old is new:
        return []
    old_t, new_t = _as_tuple(old), _as_tuple(new)
    common = min(len(old_t), len(new_t))
    candidates = _lineage_candidates(old_t, new_t)
    if candidates is None:
        changed: list[int] = []
        _walk(old_t, new_t, 0, common, changed)
    else:
        changed = sorted(
            i
            for i in candidates
            if i < common and not (old_t[i] is new_t[i] or old_t[i] == new_t[i])
        )
    changed.extend(range(common, len(new_t)))
    return changed


def _as_tuple(items: Sequence[Any]) -> tuple[Any, ...]:
    return items if isinstance(items, tuple) else tuple(items)  # a Derived stays itself


def _lineage_candidates(old: tuple[Any, ...], new: tuple[Any, ...]) -> set[int] | None:
    """The positions where ``new`` may differ from ``old``, if they share a lineage.

    Both are followed up to a common ancestor; positions changed along either path, and
    positions at or past the shortest length on the way, are the candidates.
    """
    if isinstance(new, Derived) and new.parent is old:
        return set(new.changed)  # the common case: one derivation apart
    # Keyed by identity: hashing a tuple would hash every element.
    reached = {id(node): (changes, floor, node) for node, (changes, floor) in _ancestors(new)}
    for node, (changes, floor) in _ancestors(old):
        found = reached.get(id(node))
        if found is None or found[2] is not node:
            continue
        new_changes, new_floor, _ = found
        limit = min(len(old), len(new))
        return changes | new_changes | set(range(min(floor, new_floor), limit))
    return None


def _ancestors(
    start: tuple[Any, ...],
) -> Iterator[tuple[tuple[Any, ...], tuple[set[int], int]]]:
    """``start`` and its ancestors, each with the changes and the floor on the way there."""
    node: tuple[Any, ...] | None = start
    changes: set[int] = set()
    floor = len(start)
    for _ in range(MAX_HOPS + 1):
        if node is None:
            return
        floor = min(floor, len(node))
        yield node, (set(changes), floor)
        if not isinstance(node, Derived):
            return
        changes.update(node.changed)
        node = node.parent


def _walk(old: tuple[Any, ...], new: tuple[Any, ...], lo: int, hi: int, out: list[int]) -> None:
    if lo >= hi or old[lo:hi] == new[lo:hi]:
        return
    if hi - lo <= _LEAF:
        out.extend(i for i in range(lo, hi) if not (old[i] is new[i] or old[i] == new[i]))
        return
    middle = (lo + hi) // 2
    _walk(old, new, lo, middle, out)
    _walk(old, new, middle, hi, out)


def per_position(sequence: Sequence[T], key: str, compute: Callable[[T], V]) -> list[V]:
    """``[compute(x) for x in sequence]``, paying only for what changed along a lineage.

    The values of the lineage's latest sequence asked about under ``key`` are kept in its
    family; for a later member of the lineage they are brought up to date in place, at
    the changed positions, and a copy is returned (one list copy: the caller owns it).
    """
    family = sequence.family if isinstance(sequence, Derived) else None
    if family is None:
        return [compute(item) for item in sequence]
    with _family_lock(family):
        values: list[V] = _follow(family, key, sequence, compute)[0]
        return values.copy()


def position_total(sequence: Sequence[T], key: str, compute: Callable[[T], int]) -> int:
    """``sum(compute(x) for x in sequence)``, paying only for what changed along a lineage.

    Like :func:`per_position`, with the running total kept beside the values.
    """
    family = sequence.family if isinstance(sequence, Derived) else None
    if family is None:
        return sum(compute(item) for item in sequence)
    with _family_lock(family):
        total: int = _follow(family, key, sequence, compute, totals=True)[1]
        return total


_FAMILY_LOCK = "lock"
_NEW_LOCK = threading.Lock()


def _family_lock(family: dict[str, Any]) -> threading.Lock:
    """The family's lock: its memos are updated in place, and a request of the session may
    be serialized on another thread (a ``count_tokens`` under a deadline) meanwhile."""
    lock: threading.Lock | None = family.get(_FAMILY_LOCK)
    if lock is None:
        with _NEW_LOCK:
            lock = family.setdefault(_FAMILY_LOCK, threading.Lock())
    return lock


def _follow(
    family: dict[str, Any],
    key: str,
    sequence: Sequence[Any],
    compute: Callable[[Any], Any],
    *,
    totals: bool = False,
) -> tuple[list[Any], Any]:
    """The family's values (and total) under ``key``, brought to ``sequence``."""
    last = family.get(key)
    if last is not None and last[0] is sequence:
        return last[1], last[2]
    if last is None:
        values = [compute(item) for item in sequence]
        total = sum(values) if totals else None
    else:
        # Out of the family while it is brought up to date in place: should ``compute``
        # raise half-way, the next call starts afresh instead of reading a half-edited list.
        del family[key]
        previous, values, total = last
        changed = changed_positions(previous, sequence)
        if totals:
            total -= sum(values[len(sequence) :])
        del values[len(sequence) :]
        for index in changed:
            value = compute(sequence[index])
            if index < len(values):
                if totals:
                    total += value - values[index]
                values[index] = value
            else:
                if totals:
                    total += value
                values.append(value)
    family[key] = (sequence, values, total)
    return values, total


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

    def get(self, key: str, make: Callable[[], V]) -> V:
        with self._lock:
            value = self._items.pop(key, None)
            if value is None:
                value = make()
            self._items[key] = value
            while len(self._items) > self._limit:
                self._items.popitem(last=False)
            return value
