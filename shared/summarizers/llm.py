"""The LLM summarizer: one implementation, used in the agent's process and on a worker.

``LLMSummarizer`` asks a provider for the summary. An invalid summary request, a provider
error, or a reply that is no summary (empty, a few characters, a tool call, a refusal)
falls back to the extractive summary, and the result says why: a summarizer never fails
the turn. The one difference between the two places it runs is a transient provider error
(429, 5xx, timeout): in the agent's process it falls back like any other, on a worker
(``retry_transient=True``) it is raised so the Celery task retries it with backoff.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable

from shared.compaction.extractive import ExtractiveSummarizer
from shared.compaction.jobs import Summarizer, SummaryJob, SummaryResult
from shared.compaction.summary_prompt import build_summary_request
from shared.compaction.validate import format_violations, validate_request
from shared.core.errors import HangoError, TransientProviderError
from shared.core.messages import Response, TextBlock, Usage
from shared.providers.base import Provider

logger = logging.getLogger(__name__)

SUMMARIZER_NAME = "llm"
DEFAULT_SUMMARY_MAX_TOKENS = 8_192
# A real briefing has seven headed sections; anything this short is an error or a refusal.
MIN_SUMMARY_CHARS = 40

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
    ) -> None:
        self.provider = provider
        self.max_tokens = max_tokens
        self.fallback: Summarizer = fallback or ExtractiveSummarizer()
        self.on_usage = on_usage
        self.min_chars = min_chars
        self.retry_transient = retry_transient

    def summarize(self, job: SummaryJob) -> SummaryResult:
        request = build_summary_request(job, model=job.model, max_tokens=self.max_tokens)
        violations = validate_request(request)
        if violations:
            shown = format_violations(violations[:3])
            return self._fall_back(job, f"invalid summary request: {shown}")
        try:
            response = self.provider.complete(request)
        except TransientProviderError as error:
            if self.retry_transient:
                raise
            return self._fall_back(job, f"provider error: {_describe(error)}")
        except Exception as error:  # the turn must complete whatever the summarizer does
            if not isinstance(error, HangoError | TimeoutError | OSError):
                logger.exception("unexpected error from the summarizer's provider")
            return self._fall_back(job, f"provider error: {_describe(error)}")
        if self.on_usage is not None:
            self.on_usage(response.usage)
        text, problem = summary_text(response, min_chars=self.min_chars)
        if problem is not None:
            return self._fall_back(job, problem, usage=response.usage)
        return SummaryResult(text=text, summarizer=SUMMARIZER_NAME, usage=response.usage)

    def _fall_back(self, job: SummaryJob, reason: str, usage: Usage | None = None) -> SummaryResult:
        logger.warning(
            "summarizer fell back for session %s turn %s: %s", job.session_id, job.turn, reason
        )
        result = self.fallback.summarize(job)
        return result.model_copy(update={"fallback_reason": reason, "usage": usage})


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
