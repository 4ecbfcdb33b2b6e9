"""Mechanical truncation: drop whole oldest tool groups until the request fits.

The last resort, used when summarization failed, produced an invalid request, or the
retried request overflowed again; no model call. A boundary is always a group start (see
:mod:`hango.compaction.groups`), so no tool batch is split and the result keeps strict
alternation after the user-role ``head``. The caller's ``measure`` (rather than a yes/no
predicate) lets :class:`~hango.core.errors.CannotFitError` report how far over the
smallest possible request still is.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Sequence

from hango.compaction.groups import group_starts
from hango.core.errors import CannotFitError
from hango.core.messages import Message

# Tokens of the whole request built from these messages (system and tools included).
Measure = Callable[[Sequence[Message]], int]


def drop_oldest_groups(
    messages: Sequence[Message],
    *,
    head: Message,
    measure: Measure,
    limit: int,
    min_keep_from: int = 0,
) -> int:
    """The smallest group start ``b`` at or after ``min_keep_from`` (a previous compaction's
    boundary: truncation only moves forward) with ``measure((head,) + messages[b:]) <= limit``.

    A binary search: dropping messages never makes a request bigger. :class:`CannotFitError`
    when even the last group does not fit, or there is no group start to cut at.
    """
    if min_keep_from < 0:
        raise ValueError(f"min_keep_from must be >= 0, got {min_keep_from}")
    starts = group_starts(messages)
    candidates = starts[bisect_left(starts, min_keep_from) :]
    if not candidates:
        tokens = measure(messages)
        raise CannotFitError(
            f"no assistant message at or after index {min_keep_from} to cut at "
            f"({len(messages)} messages, {tokens} tokens, limit {limit})",
            tokens=tokens,
            limit=limit,
        )

    def size_from(boundary: int) -> int:
        return measure((head, *messages[boundary:]))

    smallest = size_from(candidates[-1])
    if smallest > limit:
        raise CannotFitError(
            f"even the last tool group (from message {candidates[-1]}) with the head message "
            f"measures {smallest} tokens, over the limit of {limit}",
            tokens=smallest,
            limit=limit,
        )
    # The last candidate fits; the first one that fits, by halving.
    last = len(candidates) - 1
    return candidates[bisect_left(candidates, True, hi=last, key=lambda b: size_from(b) <= limit)]
