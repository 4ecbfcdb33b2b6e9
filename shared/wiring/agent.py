"""Wires an agent from the settings: the embedded default or the real stack.

Embedded default (no ``HANGO_REDIS_URL``): SQLite, a local history directory and the
in-process summarizer, with the extractive summarizer as its fallback. With
``HANGO_REDIS_URL`` the summarizer and the history offload go through Celery workers,
falling back to the in-process path when the queue does not answer.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from hango.agent.loop import AgentLoop, InputLimit
from hango.compaction.extractive import ExtractiveSummarizer
from hango.compaction.jobs import HistoryOffloader, Summarizer
from hango.core.messages import TextBlock
from hango.core.profiles import ModelProfile, Profiles
from hango.core.settings import Settings
from hango.history.base import HistoryBackend
from hango.middleware.base import Middleware
from hango.middleware.chain import build_chain
from hango.middleware.filesystem import FilesystemMiddleware
from hango.middleware.observer import LoopObserver, Observers
from hango.middleware.pacing import Clock
from hango.middleware.prompt_cache import CachePolicy, PromptCacheMiddleware
from hango.middleware.summarization import SummarizationMiddleware
from hango.middleware.summary_route import (
    PrefixSummarizer,
    ProviderPrefix,
    RouterPrices,
    SentRequests,
    SummaryRouter,
)
from hango.middleware.tool_args import ToolArgTruncationMiddleware
from hango.providers.base import Provider
from hango.store import Store
from hango.store.leases import LeasePolicy
from hango.summarizers.llm import LLMSummarizer
from hango.summarizers.offload import InlineOffloader
from hango.telemetry.names import PURPOSE_CHAT, PURPOSE_SUMMARIZE, Telemetry
from hango.telemetry.observer import TelemetryObserver
from hango.telemetry.provider import InstrumentedProvider, instrument_provider
from hango.tokens import Estimator, make_estimator
from hango.tools.builtin import Tool, ToolRegistry
from hango.tools.history import PAGE_CHARS, StoreTranscripts, history_tool
from hango.wiring.history import history_from_settings


@dataclass
class Agent:
    settings: Settings
    store: Store
    history: HistoryBackend
    loop: AgentLoop
    provider: Provider
    profile: ModelProfile
    summarizer: Summarizer
    offloader: HistoryOffloader


def build_agent(
    settings: Settings,
    *,
    provider: Provider | None = None,
    summarizer_provider: Provider | None = None,
    summarizer: Summarizer | None = None,
    offloader: HistoryOffloader | None = None,
    observers: Sequence[LoopObserver] = (),
    extra_tools: Sequence[Tool] = (),
    store: Store | None = None,
    history: HistoryBackend | None = None,
    max_tokens: int = 8192,
    system_prompt: Sequence[TextBlock] = (),
    late: Sequence[Middleware] = (),
    telemetry: Telemetry | None = None,
    estimator: Estimator | None = None,
    clock: Clock = time.monotonic,
    summary_seconds: float | None = None,
    prefix_summarizer: PrefixSummarizer | None = None,
    prefix_closed: str | None = None,
) -> Agent:
    """The agent for ``settings``; every port can be replaced by an argument.

    ``late`` fills the chain's slot after the prompt cache (a memory block that changes
    more often than the system prompt); the summarization middleware counts its blocks.
    The agent's and the summarizer's providers are instrumented here (spans and token
    metrics with ``hango.call.purpose`` chat / summarize, on ``telemetry`` or the global
    OpenTelemetry providers), so a library user gets the summarizer's usage apart from
    the agent's without the CLI; a provider passed in already instrumented is kept.
    ``clock`` and ``summary_seconds`` pace the pre-summaries on a simulated clock
    (``hango replay``: the recorded times and a summarizer latency; see middleware/pacing).
    ``prefix_summarizer`` makes the prefix-route summaries (default: the agent's provider);
    ``prefix_closed`` closes that route, saying why (see middleware/summary_route).
    """
    # The provider first: a missing API key fails here, before anything is stored.
    provider = provider or _anthropic(settings)
    store = store or open_store(settings)
    history = history or history_from_settings(settings, engine=store.engine)
    telemetry = telemetry or Telemetry()
    provider = _instrumented(provider, telemetry, PURPOSE_CHAT)
    if summarizer_provider is not None:
        summarizer_provider = _instrumented(summarizer_provider, telemetry, PURPOSE_SUMMARIZE)
    profile = Profiles.from_settings(settings).resolve(settings.model)
    estimator = estimator or make_estimator(settings.estimator)
    sent = SentRequests(clock)
    observer = Observers([*_with_compaction_log(observers), sent])
    inline_offloader = offloader or InlineOffloader(history)
    inline_summarizer = summarizer or LLMSummarizer(
        summarizer_provider or _instrumented(provider, telemetry, PURPOSE_SUMMARIZE),
        fallback=ExtractiveSummarizer(),
        timeout=settings.summarizer_timeout,  # one deadline, the provider's retries included
    )
    summarizer, offloader = _ports(settings, store, history, inline_summarizer, inline_offloader)
    history_tools = _history_tools(store, profile, offload_limit(settings, profile))
    tools = ToolRegistry(history, (*history_tools, *extra_tools))
    filesystem = FilesystemMiddleware(
        history,
        max_result_tokens=offload_limit(settings, profile),
        estimator=estimator,
        tools=tools,
        max_batch_tokens=batch_limit(settings, profile),
    )
    summarization = SummarizationMiddleware(
        profile=profile,
        estimator=estimator,
        counter=provider,
        count_timeout=settings.count_tokens_timeout,
        count_band=settings.count_tokens_band,
        presummarize_frac=settings.context_presummarize_frac,
        presummarize_pace=settings.context_presummarize_pace,
        clock=clock,
        summary_seconds=summary_seconds,
        summarizer=summarizer,
        offloader=offloader,
        observer=observer,
        router=SummaryRouter(
            prices=_route_prices(settings, profile),
            estimator=estimator,
            sent=sent,
            prefix=_prefix(settings, provider, telemetry, prefix_summarizer, prefix_closed),
            caches=provider.capabilities.prompt_caching,
            window=profile.max_input_tokens,
            setting=settings.summary_route,
            closed=_closed_reason(settings, prefix_closed),
        ),
    )
    chain = build_chain(
        filesystem=filesystem,
        truncation=ToolArgTruncationMiddleware(
            profile=profile,
            estimator=estimator,
            max_tokens=settings.tool_arg_max_tokens,
            clear_at_least=settings.tool_arg_clear_at_least,
            observer=observer,
        ),
        summarization=summarization,
        prompt_cache=PromptCacheMiddleware(
            provider.capabilities.prompt_caching,
            CachePolicy(min_tokens=profile.min_cacheable_tokens, estimator=estimator),
        ),
        late=late,
    )
    loop = AgentLoop(
        store=store,
        provider=provider,
        chain=chain,
        tools=tools,
        tool_result_hooks=(filesystem,),
        compaction=summarization,
        model=settings.model,
        max_tokens=max_tokens,
        observer=observer,
        system_prompt=system_prompt,
        lease_policy=lease_policy(settings),
        input_limit=InputLimit(tokens=profile.max_input_tokens // 2, estimator=estimator),
        price=profile.price,
        estimator=estimator,
    )
    return Agent(settings, store, history, loop, provider, profile, summarizer, offloader)


# The history tool's definition (about 250 tokens, sent with every request) is under 2 %
# of this window; a smaller window keeps that room for the conversation, and its model
# reads the history through the file tools (/conversation_history/).
HISTORY_TOOL_MIN_WINDOW = 16_000


# Characters of a history page per token of the large-result limit: text runs at about 3
# to 4 characters a token, dense identifiers and non-Latin scripts at fewer.
PAGE_CHARS_PER_TOKEN = 2


def _history_tools(store: Store, profile: ModelProfile, offload_tokens: int) -> tuple[Tool, ...]:
    """The history tool over ``store``, when the model's window has room for it.

    Its pages stay under the large-result limit, so a page is shown, not offloaded to a
    file as a preview (which the model would have to read in turn).
    """
    if profile.max_input_tokens < HISTORY_TOOL_MIN_WINDOW:
        return ()
    page_chars = min(PAGE_CHARS, offload_tokens * PAGE_CHARS_PER_TOKEN)
    return (history_tool(StoreTranscripts(store), page_chars=page_chars),)


def _route_prices(settings: Settings, profile: ModelProfile) -> RouterPrices:
    summarizer = Profiles.from_settings(settings).price(profile.summarizer_model)
    return RouterPrices(agent=profile.price, summarizer=summarizer)


def _prefix(
    settings: Settings,
    provider: Provider,
    telemetry: Telemetry,
    given: PrefixSummarizer | None,
    closed: str | None,
) -> PrefixSummarizer | None:
    """What makes prefix-route summaries: none on the queued path (a worker has no copy of
    the last request) or when closed; else the one given, or the agent's own provider."""
    if settings.redis_url is not None or closed is not None:
        return None
    if given is not None:
        return given
    summarizing = _instrumented(provider, telemetry, PURPOSE_SUMMARIZE)
    return ProviderPrefix(summarizing, settings.summarizer_timeout)


def _closed_reason(settings: Settings, closed: str | None) -> str:
    if settings.redis_url is not None:
        return "queued summaries take the range route (a worker has no copy of the prefix)"
    return closed or "no prefix summarizer"


def _instrumented(provider: Provider, telemetry: Telemetry, purpose: str) -> Provider:
    """``provider`` as spans and token metrics for ``purpose``; an instrumented one as is
    (re-wrapping the agent's own provider for the summarizer gives it its own purpose)."""
    if isinstance(provider, InstrumentedProvider):
        if provider.purpose == purpose:
            return provider
        provider = provider.inner
    return instrument_provider(provider, telemetry, purpose=purpose)


def _with_compaction_log(observers: Sequence[LoopObserver]) -> list[LoopObserver]:
    """The observers, plus a telemetry observer (it writes the compaction log line)."""
    if any(isinstance(o, TelemetryObserver) for o in observers):
        return list(observers)
    return [*observers, TelemetryObserver(Telemetry.noop())]


def offload_limit(settings: Settings, profile: ModelProfile) -> int:
    """Tool results over this many tokens go to ``/large_tool_results/`` when produced.

    Capped at a tenth of the window: a result that size is kept whole in the keep window,
    and a few of them would otherwise fill a small window on their own (then no
    compaction can get the request back under the trigger).
    """
    return min(settings.tool_result_offload_tokens, profile.max_input_tokens // 10)


def batch_limit(settings: Settings, profile: ModelProfile) -> int:
    """A parallel tool batch over this many tokens has its largest results offloaded.

    A quarter of the window (never under the single-result limit): the batch is one tool
    group, which no compaction can split, so it must fit beside the system prompt, the
    tools, the summary and the question with room to spare.
    """
    return max(offload_limit(settings, profile), profile.max_input_tokens // 4)


def lease_policy(settings: Settings) -> LeasePolicy:
    """How long a turn's hold on its session lives, and how long a turn waits for one."""
    return LeasePolicy(ttl=settings.session_lease_ttl, wait=settings.session_busy_timeout)


def open_store(settings: Settings, *, migrate: bool = False) -> Store:
    """The store, its schema checked: SQLite migrates itself on first use; PostgreSQL does
    when asked (``migrate``, ``HANGO_AUTO_MIGRATE``), else fails naming ``hango migrate``."""
    store = Store.from_url(settings.database_url, create_directory=settings.database_in_home)
    if settings.database_url.startswith("sqlite"):
        store.migrate()
    else:
        store.require_schema(migrate=migrate or settings.auto_migrate)
    return store


def _anthropic(settings: Settings) -> Provider:
    from hango.providers.anthropic import AnthropicProvider

    provider = AnthropicProvider.from_settings(settings)
    provider.require_credentials()
    return provider


def _ports(
    settings: Settings,
    store: Store,
    history: HistoryBackend,
    summarizer: Summarizer,
    offloader: HistoryOffloader,
) -> tuple[Summarizer, HistoryOffloader]:
    if settings.redis_url is None:
        return summarizer, offloader
    from hango.wiring.queue import make_queued_ports

    return make_queued_ports(
        settings,
        store=store,
        history=history,
        fallback_summarizer=summarizer,
        fallback_offloader=offloader,
    )
