"""The input-token figure that decides the trigger: counted if possible, else estimated.

A provider that can count (``TokenCounter`` and ``capabilities.token_counting``) is asked
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

from shared.core.messages import Request
from shared.tokens.base import Estimator, TokenCounter

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
    capabilities = getattr(provider, "capabilities", None)
    return isinstance(provider, TokenCounter) and bool(
        getattr(capabilities, "token_counting", False)
    )


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
