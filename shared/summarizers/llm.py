"""The LLM summarizer: one implementation, used in the agent's process and on a worker.

``LLMSummarizer`` asks a provider for the summary. An invalid summary request, a provider
error, or a reply that is no summary (empty, a few characters, a tool call, a refusal)
falls back to the extractive summary, and the result says why: a summarizer never fails
the turn. A summary cut off at ``max_tokens`` is asked for once more with twice the room
(a briefing missing its last sections loses the current state and the next step); cut
off again, it falls back too. The usage of every call is reported and added up.

The one difference between the two places it runs is a transient provider error
(429, 5xx, timeout): in the agent's process it falls back like any other, on a worker
(``retry_transient=True``) it is raised so the Celery task retries it with backoff.

``timeout`` is one wall-clock deadline for the whole summary, every attempt and the
provider's own retries included (``HANGO_SUMMARIZER_TIMEOUT`` in the agent's process):
each call runs on a daemon thread that is given up on when the deadline passes, so a
hanging endpoint holds the turn no longer than the deadline. The abandoned call ends on
its own at the provider's timeout; its reply is dropped.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable

from hango.compaction.extractive import ExtractiveSummarizer
from hango.compaction.jobs import Summarizer, SummaryJob, SummaryResult
from hango.compaction.summary_prompt import build_summary_request
from hango.compaction.validate import format_violations, validate_request
from hango.core.deadline import CallAbandoned, call_within
from hango.core.errors import HangoError, TransientProviderError
from hango.core.messages import Request, Response, TextBlock, Usage, summed_usage
from hango.providers.base import Provider

logger = logging.getLogger(__name__)

SUMMARIZER_NAME = "llm"
DEFAULT_SUMMARY_MAX_TOKENS = 8_192
# A real briefing has seven headed sections; anything this short is an error or a refusal.
MIN_SUMMARY_CHARS = 40

SUMMARIZER_DEADLINE = "HANGO_SUMMARIZER_TIMEOUT"

_WRAPPED = re.compile(r"<summary>\s*(.*)\s*</summary>", re.DOTALL)


class LLMSummarizer:
    """``Summarizer`` that asks ``provider`` for the summary, falling back on failure."""

    def __init__(
        self,
        provider: Provider,
        *,
        max_tokens: int = DEFAULT_SUMMARY_MAX_TOKENS,
        fallback: Summarizer | None = None,
        on_usage: Callable[[Usage], None] | None = None,
        min_chars: int = MIN_SUMMARY_CHARS,
        retry_transient: bool = False,
        timeout: float | None = None,
    ) -> None:
        self.provider = provider
        self.max_tokens = max_tokens
        self.fallback: Summarizer = fallback or ExtractiveSummarizer()
        self.on_usage = on_usage
        self.min_chars = min_chars
        self.retry_transient = retry_transient
        # None: no deadline of its own (a worker, where the task's time limits apply).
        self.timeout = timeout

    def summarize(self, job: SummaryJob) -> SummaryResult:
        until = None if self.timeout is None else time.monotonic() + self.timeout
        return self.summarize_by(job, until)

    def summarize_by(self, job: SummaryJob, until: float | None) -> SummaryResult:
        """The summary, falling back when the monotonic clock reaches ``until``."""
        cap = min(self.max_tokens, job.reply_cap(self.max_tokens))
        request = build_summary_request(job, model=job.model, max_tokens=cap)
        violations = validate_request(request)
        if violations:
            shown = format_violations(violations[:3])
            return self._fall_back(job, f"invalid summary request: {shown}")
        usage: Usage | None = None
        # A capped job has no room for a second, longer attempt.
        attempts = (cap,) if job.max_tokens else (cap, cap * 2)
        for max_tokens in attempts:
            try:
                attempt = request.model_copy(update={"max_tokens": max_tokens})
                response = self._complete(attempt, until)
            except _FellBack as failed:
                return self._fall_back(job, failed.reason, usage=usage)
            usage = summed_usage(usage, response.usage)
            if response.stop_reason != "max_tokens":
                break
        else:
            cut = (
                f"summary cut off at its cap of {cap} tokens"
                if job.max_tokens
                else f"summary cut off at max_tokens twice ({cap}, then {max_tokens})"
            )
            return self._fall_back(job, cut, usage=usage)
        text, problem = summary_text(response, min_chars=self.min_chars)
        if problem is not None:
            return self._fall_back(job, problem, usage=usage)
        return SummaryResult(text=text, summarizer=SUMMARIZER_NAME, usage=usage)

    def _complete(self, request: Request, until: float | None) -> Response:
        """One summary call, its usage reported; a failure to fall back on is ``_FellBack``."""
        try:
            response = self._within(until, lambda: self.provider.complete(request))
        except _FellBack:
            raise
        except TransientProviderError as error:
            if self.retry_transient:
                raise
            raise _FellBack(f"provider error: {_describe(error)}") from None
        except Exception as error:  # the turn must complete whatever the summarizer does
            if not isinstance(error, HangoError | TimeoutError | OSError):
                logger.exception("unexpected error from the summarizer's provider")
            raise _FellBack(f"provider error: {_describe(error)}") from None
        if self.on_usage is not None:
            self.on_usage(response.usage)
        return response

    def _within(self, until: float | None, call: Callable[[], Response]) -> Response:
        """``call()``, or ``_FellBack`` once the deadline passes (the call is abandoned)."""
        if until is None:
            return call()
        try:
            return call_within(until - time.monotonic(), call, name="hango-summary")
        except CallAbandoned:
            late = f"no summary within {SUMMARIZER_DEADLINE} ({self.timeout:g} s)"
            raise _FellBack(late) from None

    def _fall_back(self, job: SummaryJob, reason: str, usage: Usage | None = None) -> SummaryResult:
        logger.warning(
            "summarizer fell back for session %s turn %s: %s", job.session_id, job.turn, reason
        )
        result = self.fallback.summarize(job)
        return result.model_copy(update={"fallback_reason": reason, "usage": usage})


class _FellBack(Exception):
    """The summary call failed in a way the extractive summary stands in for."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def summary_text(
    response: Response, *, min_chars: int = MIN_SUMMARY_CHARS
) -> tuple[str, str | None]:
    """The summary in a reply and, when the reply is not a usable summary, why not."""
    text = "\n".join(b.text for b in response.content if isinstance(b, TextBlock)).strip()
    wrapped = _WRAPPED.search(text)
    if wrapped:
        text = wrapped.group(1).strip()
    if not text:
        if response.tool_uses():
            return "", "tool call instead of a summary"
        return "", "empty summary"
    if response.stop_reason == "refusal":
        return text, "summarizer refused"
    if len(text) < min_chars:
        return text, f"summary too short ({len(text)} characters)"
    return text, None


def _describe(error: Exception) -> str:
    if isinstance(error, HangoError):
        return f"{type(error).__name__}: {error.message}"
    return f"{type(error).__name__}: {error}"
