"""Pausing the cyclic garbage collector around bulk builds of acyclic objects.

Reading a long session back (a restarted process) creates hundreds of thousands of small
objects at once: messages, blocks, their dicts, what is derived from them. CPython's
cyclic collector runs on allocation counts, and each of its older-generation passes walks
every live object again, so it ran many times during one such read and took more than
half of a 10,000-message cold start (docs/benchmarks.md), although nothing built there
forms a reference cycle. Reference counting frees everything as usual while it is paused.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collection_paused() -> Iterator[None]:
    """The collector off for the block, back to what it was afterwards."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
