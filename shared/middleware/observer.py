"""What the loop tells the outside world while it runs.

Telemetry (spans, events, metrics) and the CLI's live progress display are both
observers; the loop calls every hook of every observer it was given, in order. Hooks
must not raise: an observer that fails is a bug in the observer, never a failed turn.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from functools import partial
from typing import Any

from hango.compaction.record import CompactionRecord
from hango.core.messages import Request, Response


class LoopObserver:
    """The loop's hooks, each doing nothing here: an observer overrides the ones it needs."""

    @contextmanager
    def turn(self, session_id: str, turn: int) -> Iterator[None]:
        """Wraps the whole turn (the turn span lives here)."""
        yield

    def request_sent(self, session_id: str, turn: int, request: Request, input_tokens: int) -> None:
        """A request passed validation and is about to go to the provider."""

    def response_received(self, session_id: str, turn: int, response: Response) -> None:
        pass

    def compacted(self, session_id: str, record: CompactionRecord) -> None:
        pass

    def overflow_retry(self, session_id: str, turn: int, rung: str) -> None:
        """The provider overflowed; the loop retries with ``rung`` (overflow|truncate)."""

    def tool_args_truncated(self, session_id: str, turn: int, count: int) -> None:
        pass

    def token_figure(self, session_id: str, turn: int, source: str, correction: float) -> None:
        """How the request's size was known (count_tokens, anchored, estimate) and the
        learned real-per-estimated-token correction."""

    def invalid_request_blocked(self, session_id: str, turn: int, violations: list[str]) -> None:
        """A compacted request failed validation and was replaced by mechanical truncation."""

    def summary_waited(
        self, session_id: str, turn: int, seconds: float, *, presummarized: bool = False
    ) -> None:
        """How long a compaction at the trigger held the turn for its offload and summary;
        ``presummarized`` when it installed a summary dispatched at the watermark."""


class NullObserver(LoopObserver):
    """Observes nothing; subclass it and override the hooks you need."""


def _call_each(methods: list[Callable[..., None]], *args: Any, **kwargs: Any) -> None:
    for method in methods:
        method(*args, **kwargs)


class Observers(LoopObserver):
    """Fans every hook out to several observers."""

    def __init__(self, observers: list[LoopObserver]) -> None:
        self._observers = observers
        # Each hook calls the observers that override it, found once (one left as
        # LoopObserver's does nothing): the loop calls three hooks per model call.
        for hook in [name for name in vars(LoopObserver) if name[0] != "_" and name != "turn"]:
            own = getattr(LoopObserver, hook)
            # Judged on the method each observer answers with, not its class: another
            # Observers sets its hooks on the instance, and they must be called too.
            bound = [getattr(observer, hook) for observer in observers]
            methods = [m for m in bound if getattr(m, "__func__", None) is not own]
            setattr(self, hook, partial(_call_each, methods))

    @contextmanager
    def turn(self, session_id: str, turn: int) -> Iterator[None]:
        with ExitStack() as stack:
            for observer in self._observers:
                stack.enter_context(observer.turn(session_id, turn))
            yield
