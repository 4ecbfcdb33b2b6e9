"""The summarizer a worker runs, chosen by ``HANGO_WORKER_SUMMARIZER``.

- ``anthropic`` (default): the LLM summary through the Anthropic provider, with the
  summarizer's own timeout and no SDK retries (Celery retries with backoff instead, and
  a timeout times the SDK's attempts would overrun the task's soft time limit);
- ``extractive``: no model at all;
- ``package.module:factory``: ``factory(settings)`` returns the :class:`Provider` the LLM
  summary uses (a local model gateway, or a deterministic provider in tests).

Unlike the in-process summarizer, a transient provider error is *raised* here: the task
retries it with backoff. Everything a retry cannot fix (an invalid summary request, a
permanent provider error, a reply that is no summary) falls back to the extractive
summary at once, with the reason recorded, exactly as the in-process path does.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from typing import cast

from shared.compaction.extractive import ExtractiveSummarizer
from shared.compaction.jobs import Summarizer, SummaryJob, SummaryResult
from shared.compaction.summary_prompt import build_summary_request
from shared.compaction.validate import format_violations, validate_request
from shared.core.errors import ConfigError, ProviderError, TransientProviderError
from shared.core.messages import Usage
from shared.core.settings import Settings, env_name
from shared.providers.base import Provider
from shared.summarizers.inline import DEFAULT_SUMMARY_MAX_TOKENS, SUMMARIZER_NAME, summary_text

log = logging.getLogger(__name__)

ProviderFactory = Callable[[Settings], Provider]


class TaskSummarizer:
    """The LLM summary for a task: transient errors propagate, the rest falls back."""

    def __init__(self, provider: Provider, *, max_tokens: int = DEFAULT_SUMMARY_MAX_TOKENS) -> None:
        self.provider = provider
        self.max_tokens = max_tokens
        self.fallback = ExtractiveSummarizer()

    def summarize(self, job: SummaryJob) -> SummaryResult:
        request = build_summary_request(job, model=job.model, max_tokens=self.max_tokens)
        violations = validate_request(request)
        if violations:
            return self._fall_back(job, f"invalid summary request: {format_violations(violations)}")
        try:
            response = self.provider.complete(request)
        except TransientProviderError:
            raise
        except ProviderError as error:
            return self._fall_back(job, f"provider error: {type(error).__name__}: {error}")
        text, problem = summary_text(response)
        if problem is not None:
            return self._fall_back(job, problem, usage=response.usage)
        return SummaryResult(text=text, summarizer=SUMMARIZER_NAME, usage=response.usage)

    def _fall_back(self, job: SummaryJob, reason: str, usage: Usage | None = None) -> SummaryResult:
        log.warning(
            "worker summarizer fell back for session %s turn %d: %s",
            job.session_id,
            job.turn,
            reason,
        )
        result = self.fallback.summarize(job)
        return result.model_copy(update={"fallback_reason": reason, "usage": usage})


def worker_summarizer(settings: Settings) -> Summarizer:
    """The summarizer named by ``settings.worker_summarizer``."""
    choice = settings.worker_summarizer.strip()
    if choice == "extractive":
        return ExtractiveSummarizer()
    if choice == "anthropic":
        return TaskSummarizer(_instrumented(_anthropic(settings)))
    return TaskSummarizer(_instrumented(load_provider_factory(choice)(settings)))


def _instrumented(provider: Provider) -> Provider:
    """The summarizer's own ``chat`` span and usage (purpose ``summarize``) on the worker.

    Uses the global providers that ``worker.signals`` sets up after the fork (no-ops
    when nothing is exported).
    """
    from shared.telemetry.names import PURPOSE_SUMMARIZE, Telemetry
    from shared.telemetry.provider import instrument_provider

    return instrument_provider(provider, Telemetry(), purpose=PURPOSE_SUMMARIZE)


def _anthropic(settings: Settings) -> Provider:
    from shared.providers.anthropic import AnthropicProvider

    worker_settings = settings.model_copy(
        update={"provider_timeout": settings.summarizer_timeout, "provider_max_retries": 0}
    )
    return AnthropicProvider.from_settings(worker_settings)


def load_provider_factory(spec: str) -> ProviderFactory:
    """``package.module:factory`` → the callable, or a :class:`ConfigError` naming the setting."""
    variable = env_name("worker_summarizer")
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ConfigError(
            f"{variable}: expected 'anthropic', 'extractive' or 'package.module:factory', "
            f"got {spec!r}",
            variable=variable,
        )
    try:
        factory = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"{variable}: cannot load {spec!r}: {exc}", variable=variable) from exc
    if not callable(factory):
        raise ConfigError(f"{variable}: {spec!r} is not callable", variable=variable)
    return cast(ProviderFactory, factory)
