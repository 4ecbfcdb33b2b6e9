"""Per-object memoization for the frozen wire types.

Wire objects are frozen, so anything derived from one (its token estimate, its API JSON,
its validation facts) stays true for as long as the object lives. The loop reuses the
same stored message objects call after call, which is what lets each call pay only for
what was appended.
"""

from __future__ import annotations

import functools
import itertools
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from typing import Any, Generic, TypeVar, overload

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
# The sequences the pipeline builds say how they were made: a :class:`Derived` sequence
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


# A :class:`Derived` keeps its elements in chunks of ``_CHUNK`` (all full but the last), so
# a copy that replaces a few positions or appends a few elements shares every other chunk
# with the sequence it was made from: making it costs the chunks it touches plus one copy
# of the list of chunks, not a copy of a long session's whole history.
_SHIFT = 6
_CHUNK = 1 << _SHIFT
_MASK = _CHUNK - 1


class Derived(Sequence[Any]):
    """An immutable sequence that remembers the one it was made from and where it differs.

    ``changed`` lists the positions below ``len(parent)`` whose element may not be the
    parent's; every other position below that length holds the parent's very object (or
    one equal to it: what is derived from a wire object depends on its content only).
    Positions past the parent's end are new. ``family`` is shared along the lineage: what
    is derived per position of its latest member is kept there (:func:`per_position`).

    Behaves as the tuple of its elements: equal to it and hashed like it, sliced and
    concatenated into tuples, and pickled (and copied) as one (the lineage is a memo,
    not data).
    """

    __slots__ = ("_chunks", "_length", "changed", "family", "parent")

    parent: Sequence[Any] | None
    changed: tuple[int, ...]
    family: dict[Hashable, Any]

    def __init__(self, chunks: tuple[tuple[Any, ...], ...], length: int) -> None:
        self._chunks = chunks
        self._length = length

    @classmethod
    def of(cls, items: Sequence[Any]) -> Derived:
        """``items`` chunked, in a lineage of their own."""
        flat = items if isinstance(items, tuple) else tuple(items)
        made = cls(tuple(flat[i : i + _CHUNK] for i in range(0, len(flat), _CHUNK)), len(flat))
        made.parent, made.changed, made.family = None, (), {}
        return made

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> Any: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[Any, ...]: ...

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return self._slice(index)
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise IndexError("Derived index out of range")
        return self._chunks[index >> _SHIFT][index & _MASK]

    def _slice(self, index: slice) -> tuple[Any, ...]:
        start, stop, stride = index.indices(self._length)
        if stride != 1:
            return tuple(self)[index]
        if start >= stop:
            return ()
        first, last = start >> _SHIFT, (stop - 1) >> _SHIFT
        chunks = self._chunks
        if first == last:
            return chunks[first][start & _MASK : ((stop - 1) & _MASK) + 1]
        return tuple(
            itertools.chain(
                chunks[first][start & _MASK :],
                itertools.chain.from_iterable(chunks[first + 1 : last]),
                chunks[last][: ((stop - 1) & _MASK) + 1],
            )
        )

    def __iter__(self) -> Iterator[Any]:
        return itertools.chain.from_iterable(self._chunks)

    def __reversed__(self) -> Iterator[Any]:
        return iter(tuple(self)[::-1])

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Derived):
            # One layout per content (full chunks but the last): shared chunks compare at once.
            return self._length == other._length and self._chunks == other._chunks
        if isinstance(other, tuple):
            return self._length == len(other) and tuple(self) == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __add__(self, other: object) -> tuple[Any, ...]:
        if isinstance(other, Derived | tuple):
            return (*self, *other)
        return NotImplemented

    def __radd__(self, other: object) -> tuple[Any, ...]:
        if isinstance(other, tuple):
            return (*other, *self)
        return NotImplemented

    def __repr__(self) -> str:
        return repr(tuple(self))

    def __reduce__(self) -> tuple[Any, ...]:
        return (tuple, (tuple(self),))

    def _with_edits(
        self, replacements: Mapping[int, Any], keep: int, tail: Sequence[Any]
    ) -> Derived:
        """``self[:keep]`` with ``replacements`` made in it, then ``tail`` (no lineage yet)."""
        chunks = list(self._chunks[: (keep + _MASK) >> _SHIFT])
        if keep & _MASK:
            chunks[-1] = chunks[-1][: keep & _MASK]
        by_chunk: dict[int, list[tuple[int, Any]]] = {}
        for index, item in replacements.items():
            if not 0 <= index < keep:
                raise IndexError(f"replacement position {index} outside 0..{keep - 1}")
            by_chunk.setdefault(index >> _SHIFT, []).append((index & _MASK, item))
        for number, items in by_chunk.items():
            chunk = list(chunks[number])
            for offset, item in items:
                chunk[offset] = item
            chunks[number] = tuple(chunk)
        added = tail if isinstance(tail, tuple) else tuple(tail)
        if added and chunks and len(chunks[-1]) < _CHUNK:
            room = _CHUNK - len(chunks[-1])
            chunks[-1] += added[:room]
            added = added[room:]
        chunks.extend(added[i : i + _CHUNK] for i in range(0, len(added), _CHUNK))
        return Derived(tuple(chunks), keep + len(tail))


def derived(
    items: Sequence[Any], parent: Sequence[Any] | None, changed: Sequence[int] = ()
) -> Derived:
    """``items`` as a :class:`Derived` of ``parent``, differing at most at ``changed``.

    With ``parent`` ``None`` the sequence starts a lineage of its own. Costs a copy of
    ``items``; :func:`edited` makes a copy from its parent in what changed.
    """
    made = Derived.of(items)
    if parent is not None:
        _link(made, parent, tuple(changed))
    return made


def edited(
    parent: Sequence[Any],
    replacements: Mapping[int, Any],
    keep: int | None = None,
    tail: Sequence[Any] = (),
) -> Derived:
    """``parent[:keep]`` (all of it by default) with the elements at some positions
    replaced, then ``tail``: a :class:`Derived` of ``parent``, made in what changed."""
    keep = len(parent) if keep is None else keep
    if not 0 <= keep <= len(parent):
        raise IndexError(f"keep {keep} outside 0..{len(parent)}")
    length = keep + len(tail)
    changed = sorted(
        {i for i in replacements if i < keep} | set(range(keep, min(len(parent), length)))
    )
    # Any other parent is chunked first: a copy of it, which building the result costs anyway.
    base = parent if isinstance(parent, Derived) else Derived.of(parent[:keep])
    made = base._with_edits(replacements, keep, tail)
    _link(made, parent, tuple(changed))
    return made


def replaced(parent: Sequence[Any], replacements: Mapping[int, Any]) -> Derived:
    """``parent`` with the elements at some positions replaced, as a :class:`Derived`."""
    return edited(parent, replacements)


def _link(made: Derived, parent: Sequence[Any], changed: tuple[int, ...]) -> None:
    made.changed = changed
    made.parent = _indexable(parent)
    made.family = parent.family if isinstance(parent, Derived) else {}
    _cut_beyond(made)


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
    old_t, new_t = _indexable(old), _indexable(new)
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


def _indexable(items: Sequence[Any]) -> Sequence[Any]:
    """``items`` as a sequence that keeps its elements (a list may change later)."""
    return items if isinstance(items, tuple | Derived) else tuple(items)


def _lineage_candidates(old: Sequence[Any], new: Sequence[Any]) -> set[int] | None:
    """The positions where ``new`` may differ from ``old``, if they share a lineage.

    Both are followed up to a common ancestor; positions changed along either path, and
    positions at or past the shortest length on the way, are the candidates.
    """
    if isinstance(new, Derived) and new.parent is old:
        return set(new.changed)  # the common case: one derivation apart
    new_line = _lineage(new)
    # Keyed by identity: hashing a tuple would hash every element. Both lines hold their
    # nodes, so two of them never share an id.
    depth_of = {id(node): depth for depth, node in enumerate(new_line)}
    old_line = _lineage(old)
    for old_depth, node in enumerate(old_line):
        new_depth = depth_of.get(id(node))
        if new_depth is None:
            continue
        candidates: set[int] = set()
        floor = len(node)
        for step in (*new_line[:new_depth], *old_line[:old_depth]):
            candidates.update(step.changed)
            floor = min(floor, len(step))
        candidates.update(range(floor, min(len(old), len(new))))
        return candidates
    return None


def _lineage(start: Sequence[Any]) -> list[Any]:
    """``start`` and its remembered ancestors, nearest first (every one but the last is a
    :class:`Derived`)."""
    line = [start]
    node = start
    while len(line) <= MAX_HOPS and isinstance(node, Derived) and node.parent is not None:
        node = node.parent
        line.append(node)
    return line


def _walk(old: Sequence[Any], new: Sequence[Any], lo: int, hi: int, out: list[int]) -> None:
    if lo >= hi or old[lo:hi] == new[lo:hi]:
        return
    if hi - lo <= _LEAF:
        out.extend(i for i in range(lo, hi) if not (old[i] is new[i] or old[i] == new[i]))
        return
    middle = (lo + hi) // 2
    _walk(old, new, lo, middle, out)
    _walk(old, new, middle, hi, out)


def per_position(sequence: Sequence[T], key: Hashable, compute: Callable[[T], V]) -> list[V]:
    """``[compute(x) for x in sequence]``, paying only for what changed along a lineage.

    The values of the lineage's latest sequence asked about under ``key`` are kept in its
    family; for a later member of the lineage they are brought up to date at the changed
    positions, in place. The caller gets a copy of the list (one pointer per position),
    its own to keep or change; the values in it are ``compute``'s, shared with later calls
    (the API body's are bytes).
    """
    family = sequence.family if isinstance(sequence, Derived) else None
    if family is None:
        return [compute(item) for item in sequence]
    with _family_lock(family):
        values: list[V] = _follow(family, key, sequence, compute)[0]
        return values.copy()


def position_total(sequence: Sequence[T], key: Hashable, compute: Callable[[T], int]) -> int:
    """``sum(compute(x) for x in sequence)``, paying only for what changed along a lineage.

    Like :func:`per_position`, with the running total kept beside the values.
    """
    family = sequence.family if isinstance(sequence, Derived) else None
    if family is None:
        return sum(compute(item) for item in sequence)
    with _family_lock(family):
        total: int = _follow(family, key, sequence, compute, totals=True)[1]
        return total


def position_sums(
    sequence: Sequence[T], key: Hashable, compute: Callable[[T], int], split: int
) -> tuple[int, int]:
    """``position_total`` and the same total over the first ``split`` positions only.

    The second figure is a sum over the kept values (C speed), not a call per position.
    """
    family = sequence.family if isinstance(sequence, Derived) else None
    if family is None:
        values = [compute(item) for item in sequence]
        return sum(values), sum(values[:split])
    with _family_lock(family):
        kept, total = _follow(family, key, sequence, compute, totals=True)
        return total, sum(kept[:split])


_FAMILY_LOCK = "lock"
_NEW_LOCK = threading.Lock()


def _family_lock(family: dict[Hashable, Any]) -> threading.Lock:
    """The family's lock: its memos are updated in place, and a request of the session may
    be serialized on another thread (a ``count_tokens`` under a deadline) meanwhile."""
    lock: threading.Lock | None = family.get(_FAMILY_LOCK)
    if lock is None:
        with _NEW_LOCK:
            lock = family.setdefault(_FAMILY_LOCK, threading.Lock())
    return lock


def _follow(
    family: dict[Hashable, Any],
    key: Hashable,
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

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: str, make: Callable[[], V]) -> V:
        with self._lock:
            value = self._items.pop(key, None)
            if value is None:
                value = make()
            self._items[key] = value
            while len(self._items) > self._limit:
                self._items.popitem(last=False)
            return value
