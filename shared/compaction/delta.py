"""Where a new outgoing copy differs from the previous one, found at C speed.

Call after call, the outgoing messages are the previous call's objects plus what was
appended, with now and then a few replaced (a truncated tool block, a marked summary
message). Everything derived per message (estimate, breakpoint count, validation facts)
is remembered for the previous copy and redone only at the positions this returns.

Tuple equality compares identical objects without calling ``__eq__``, so comparing two
copies that share their objects costs a pointer walk; halves that differ are split until
the differing positions are found. Positions whose objects differ but are equal in
content count as unchanged: everything derived from a wire object depends on its content
only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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
