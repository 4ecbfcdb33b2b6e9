"""Waiting for a call no longer than a deadline: the call runs on, abandoned, past it.

A call that blocks in a socket (a Redis that hangs instead of refusing, a summarizer's
model call) cannot be interrupted from Python; the caller can only stop waiting. The call
runs on a daemon thread and finishes on its own, at the latest when its socket times
out; its outcome is then dropped.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from concurrent.futures import Future, wait
from typing import TypeVar

T = TypeVar("T")


class CallAbandoned(Exception):
    """The call did not return within its seconds; it was left running."""


def call_within(seconds: float, call: Callable[[], T], *, name: str) -> T:
    """``call()``'s result or exception, or :class:`CallAbandoned` after ``seconds``."""
    outcome: Future[T] = Future()

    def run() -> None:
        try:
            outcome.set_result(call())
        except BaseException as exc:
            outcome.set_exception(exc)

    # The caller's context goes along: a span the call opens stays a child of the caller's.
    context = contextvars.copy_context()
    threading.Thread(target=context.run, args=(run,), name=name, daemon=True).start()
    if not wait([outcome], max(0.0, seconds)).done:
        raise CallAbandoned(f"{name}: no answer within {seconds:g} s")
    return outcome.result()
