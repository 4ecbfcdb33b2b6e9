"""The summarizer a worker runs, chosen by ``HANGO_WORKER_SUMMARIZER``.

- ``anthropic`` (default): the LLM summary through the Anthropic provider, with the
  summarizer's own timeout and no SDK retries (Celery retries with backoff instead, and
  a timeout times the SDK's attempts would overrun the task's soft time limit);
- ``extractive``: no model at all;
- ``simulated``: the simulation's scripted summarizer (``hango simulate --queue`` offline),
  taking ``HANGO_SIMULATED_SUMMARIZER_LATENCY`` seconds per summary;
- ``package.module:factory``: ``factory(settings)`` returns the :class:`Provider` the LLM
  summary uses (a local model gateway, or a deterministic provider in tests).

The LLM summary is the same :class:`~hango.summarizers.llm.LLMSummarizer` the agent
runs in-process, with ``retry_transient=True``: a transient provider error is raised so
the task retries it with backoff; everything a retry cannot fix falls back to the
extractive summary at once, with the reason recorded.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from typing import cast

from hango.compaction.extractive import ExtractiveSummarizer
from hango.compaction.jobs import Summarizer
from hango.core.errors import ConfigError
from hango.core.settings import Settings, env_name
from hango.providers.base import Provider
from hango.summarizers.llm import LLMSummarizer

log = logging.getLogger(__name__)

ProviderFactory = Callable[[Settings], Provider]


def check_worker_summarizer(settings: Settings) -> None:
    """Fail before the worker serves anything if its summarizer cannot work.

    A worker that starts and then fails every task (a traceback each) while the agents
    silently fall back in-process hides the mistake; refusing to start names it at once.
    """
    choice = settings.worker_summarizer.strip()
    if choice == "anthropic" and settings.anthropic_api_key is None:
        raise ConfigError(
            f"{env_name('worker_summarizer')}=anthropic needs an API key: set "
            "ANTHROPIC_API_KEY (or HANGO_ANTHROPIC_API_KEY), or choose "
            f"{env_name('worker_summarizer')}=simulated or extractive to run without one",
            variable="ANTHROPIC_API_KEY",
        )
    if choice not in ("anthropic", "extractive", "simulated"):
        load_provider_factory(choice)


def worker_summarizer(settings: Settings) -> Summarizer:
    """The summarizer named by ``settings.worker_summarizer``."""
    choice = settings.worker_summarizer.strip()
    if choice == "extractive":
        return ExtractiveSummarizer()
    if choice == "anthropic":
        return LLMSummarizer(_instrumented(_anthropic(settings)), retry_transient=True)
    if choice == "simulated":
        from hango.simulate.model import summary_provider

        return LLMSummarizer(_instrumented(summary_provider(settings)), retry_transient=True)
    return LLMSummarizer(
        _instrumented(load_provider_factory(choice)(settings)), retry_transient=True
    )


def _instrumented(provider: Provider) -> Provider:
    """The summarizer's own ``chat`` span and usage (purpose ``summarize``) on the worker.

    Uses the global providers that ``hango_worker.signals`` sets up after the fork (no-ops
    when nothing is exported).
    """
    from hango.telemetry.names import PURPOSE_SUMMARIZE, Telemetry
    from hango.telemetry.provider import instrument_provider

    return instrument_provider(provider, Telemetry(), purpose=PURPOSE_SUMMARIZE)


def _anthropic(settings: Settings) -> Provider:
    from hango.providers.anthropic import AnthropicProvider

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
            f"{variable}: expected 'anthropic', 'extractive', 'simulated' or "
            "'package.module:factory', "
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
