"""The input-token figure that decides the trigger: counted if possible, else estimated.

A provider that can count (one that is a ``TokenCounter``) is asked
first, under a real deadline: the count runs on a small shared thread pool and the
caller waits at most ``timeout`` seconds, so a hung counter cannot stall the agent loop.
Any failure (error, timeout, nonsense answer) falls back to the estimate, with a warning
naming the reason; the :class:`Measurement` says which source was used and why.
"""

from __future__ import annotations

import logging
import math
import os
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Literal, TypeGuard

from hango.core.messages import Request
from hango.core.sent import live_view
from hango.tokens.base import Estimator, TokenCounter

log = logging.getLogger(__name__)

# Counts are short network calls; a few workers cover concurrent sessions. A hung count
# keeps its worker until the provider's own timeout (passed through) ends it; calls
# queued behind hung workers still return on the caller's deadline.
_COUNT_WORKERS = 4


def _new_pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=_COUNT_WORKERS, thread_name_prefix="hango-count-tokens")


def _reset_pool_in_child() -> None:
    # A forked child (Celery prefork) inherits the pool's bookkeeping but not its threads;
    # without a fresh pool every count would queue behind workers that do not exist.
    global _pool
    _pool = _new_pool()


_pool = _new_pool()
os.register_at_fork(after_in_child=_reset_pool_in_child)

MeasurementSource = Literal["count_tokens", "estimate"]


@dataclass(frozen=True)
class Measurement:
    """Input tokens of a request and where the figure came from.

    ``fallback_reason`` is set only when counting was possible but failed; a provider
    that cannot count gives ``source="estimate"`` with no reason.
    """

    tokens: int
    source: MeasurementSource
    fallback_reason: str | None = None


def measure_input_tokens(
    request: Request, *, estimator: Estimator, provider: object, timeout: float
) -> Measurement:
    """Tokens of the whole request: the provider's count within ``timeout``, else the estimate."""
    if not (math.isfinite(timeout) and timeout > 0):
        raise ValueError(f"count timeout must be a positive number of seconds, got {timeout!r}")
    if not can_count_tokens(provider):
        return Measurement(estimator.estimate_request(request), "estimate")
    counted, reason = _count_within(provider, request, timeout)
    if counted is not None:
        return Measurement(counted, "count_tokens")
    log.warning(
        "input tokens of a %s request: using the %s estimate because %s",
        request.model,
        estimator.name,
        reason,
    )
    return Measurement(estimator.estimate_request(request), "estimate", reason)


def can_count_tokens(provider: object) -> TypeGuard[TokenCounter]:
    """Whether ``provider`` counts tokens: it has ``count_tokens`` (the one way to say so).

    What ``isinstance(provider, TokenCounter)`` answers, without the protocol machinery:
    about 30 µs a call, asked on every call near the trigger."""
    return callable(getattr(provider, "count_tokens", None))


def _count_within(
    counter: TokenCounter, request: Request, timeout: float
) -> tuple[int | None, str]:
    future: Future[int] = _pool.submit(counter.count_tokens, request, timeout=timeout)
    done, _ = wait((future,), timeout=timeout)
    if not done:
        future.cancel()  # drops it if it never started; a running count is abandoned
        return None, f"count_tokens gave no answer within {timeout:g}s"
    try:
        counted = future.result()
    except Exception as exc:
        return None, f"count_tokens failed ({type(exc).__name__}: {exc})"
    if isinstance(counted, bool) or not isinstance(counted, int) or counted < 0:
        return None, f"count_tokens returned {counted!r}, not a token count"
    return counted, ""


class FixedEstimate:
    """The estimate of a request's fixed part (system, tools, framing), remembered.

    The loop sends the same system and tool objects on every call of every session, so
    the figure is worked out once and answered by identity after that.
    """

    def __init__(self, estimator: Estimator) -> None:
        self.estimator = estimator
        self._known: tuple[object, object, int] | None = None

    def __call__(self, request: Request) -> int:
        known = self._known
        if known is not None and known[0] is request.system and known[1] is request.tools:
            return known[2]
        tokens = self.estimator.estimate_request(request.model_copy(update={"messages": ()}))
        self._known = (request.system, request.tools, tokens)
        return tokens


class RequestEstimate:
    """The estimate of a request: its fixed part (system, tools, framing) plus the sum of
    its messages' estimates.

    For messages a session's copy still answers for, the sum is the copy's running total
    (when it keeps this estimator's figures); any other messages are estimated one by one.
    """

    def __init__(self, estimator: Estimator) -> None:
        self.estimator = estimator
        self.fixed = FixedEstimate(estimator)

    def __call__(self, request: Request) -> int:
        return self.split(request, 0)[0]

    def split(self, request: Request, index: int) -> tuple[int, int]:
        """The request's estimate, and what its messages before ``index`` add to it.

        The request without those messages is estimated at the difference: the estimate
        of a request is additive over its messages.
        """
        messages, estimate = request.messages, self.estimator.estimate_message
        view = live_view(messages)
        sums = None if view is None else view.source.token_sums(self.estimator, index, view.version)
        if sums is None:
            values = [estimate(message) for message in request.sent_messages()]
            return self.fixed(request) + sum(values), sum(values[:index])
        whole, before = sums
        for position, marked in request.marks.items():  # what a mark changes, if anything
            change = estimate(marked) - estimate(messages[position])
            whole += change
            before += change if position < index else 0
        return self.fixed(request) + whole, before


@dataclass(frozen=True)
class Anchor:
    """A request whose real size is known: the provider's usage or count for it.

    ``estimate`` is what the estimator said of that same request; ``context`` names what
    the next request must share with it for the anchor to hold (model, compaction, fixed
    part): a request in another context is measured afresh.
    """

    context: tuple[object, ...]
    estimate: int
    real: int

    def figure(self, estimate: int, correction: float) -> int:
        """The size of a request estimated at ``estimate``: real + corrected difference."""
        return self.real + round(correction * (estimate - self.estimate))


def learned_correction(previous: float | None, estimate: int, real: int) -> float:
    """Real tokens per estimated token, learned from one more (estimate, real) pair.

    The latest pair weighs half, so the figure follows a tokenizer that counts more than
    the estimator thinks (newer models count ~30% more) within a couple of calls, while
    one odd request cannot swing it alone.
    """
    ratio = real / estimate if estimate > 0 else 1.0
    return ratio if previous is None else (previous + ratio) / 2
