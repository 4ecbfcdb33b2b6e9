"""Wires the gateway from the settings, through the library's own ``build_agent``.

Each model's loop is the agent ``build_agent`` makes for those settings (the same chain,
store, history, queue ports and summarizer as the library), with the gateway's provider
in place of the API client. Summaries are paid with the operator's key
(``ANTHROPIC_API_KEY`` / ``HANGO_ANTHROPIC_API_KEY`` where the gateway runs) and sent to
the same upstream; without a key the extractive summarizer makes them, and
:func:`summaries_note` says so at start-up. A client's key never pays for a summary.
"""

from __future__ import annotations

from dataclasses import dataclass

from hango.agent.loop import AgentLoop
from hango.compaction.extractive import ExtractiveSummarizer
from hango.core.settings import Settings
from hango.gateway.history_rounds import HistoryAnswering, HistoryRounds
from hango.gateway.provider import GatewayProvider
from hango.gateway.service import Gateway, Loops
from hango.providers.anthropic import AnthropicProvider
from hango.store import Store
from hango.telemetry.names import Telemetry
from hango.tools.history import PAGE_CHARS
from hango.wiring.agent import (
    HISTORY_TOOL_MIN_WINDOW,
    PAGE_CHARS_PER_TOKEN,
    build_agent,
    open_store,
)
from hango.wiring.history import history_from_settings

DEFAULT_UPSTREAM = "https://api.anthropic.com"
# Below Claude Code's own auto-compaction point (window - min(max output, 20k) - 13k:
# 83.5 % of a 200k window, 96.7 % of 1M), so it never compacts on its own behind hango.
GATEWAY_TRIGGER_FRAC = 0.75


@dataclass(frozen=True)
class GatewayOptions:
    upstream: str = DEFAULT_UPSTREAM
    max_input_tokens: int | None = None
    secret: str | None = None
    # Set when the operator did not choose a trigger (HANGO_CONTEXT_TRIGGER_FRAC).
    trigger_frac: float | None = GATEWAY_TRIGGER_FRAC


def gateway_settings(settings: Settings, options: GatewayOptions) -> Settings:
    """The settings the gateway's loops use: its trigger unless the operator set one."""
    if options.trigger_frac is None:
        return settings
    return settings.model_copy(update={"context_trigger_frac": options.trigger_frac})


def build_gateway(
    settings: Settings, options: GatewayOptions, telemetry: Telemetry | None = None
) -> Gateway:
    store = open_store(settings)
    history = history_from_settings(settings, engine=store.engine)
    provider = HistoryAnswering(GatewayProvider())
    rounds = history_rounds(store, settings)

    def build_loop(model_settings: Settings) -> AgentLoop:
        operator = operator_provider(model_settings, options.upstream)
        agent = build_agent(
            model_settings,
            provider=provider,
            store=store,
            history=history,
            summarizer_provider=operator,
            summarizer=ExtractiveSummarizer() if operator is None else None,
            telemetry=telemetry,
            # The prefix is sent with the client's key, which never pays for a summary.
            prefix_closed="the gateway: summaries are paid with the operator's key",
        )
        # The library's rule: a window too small for the tool's pages does not offer it.
        roomy = agent.profile.max_input_tokens >= HISTORY_TOOL_MIN_WINDOW
        window = agent.profile.max_input_tokens
        rounds.allow(agent.loop, model_settings.gateway_history_rounds if roomy else 0, window)
        return agent.loop

    loops = Loops(gateway_settings(settings, options), build_loop, options.max_input_tokens)
    return Gateway(store, loops, rounds)


def history_rounds(store: Store, settings: Settings) -> HistoryRounds:
    """The history tool the gateway answers, its pages under the large-result limit."""
    page_chars = min(PAGE_CHARS, settings.tool_result_offload_tokens * PAGE_CHARS_PER_TOKEN)
    return HistoryRounds(store, settings.gateway_history_rounds, page_chars)


def operator_provider(settings: Settings, upstream: str) -> AnthropicProvider | None:
    """The summarizer's provider: the operator's key, on the same upstream (None: no key)."""
    key = settings.anthropic_api_key
    if key is None:
        return None
    return AnthropicProvider(
        api_key=key.get_secret_value(),
        base_url=upstream,
        timeout=settings.provider_timeout,
        max_retries=settings.provider_max_retries,
    )


def summaries_note(settings: Settings) -> str:
    if settings.anthropic_api_key is None:
        return (
            "summaries: extractive (no operator key: set ANTHROPIC_API_KEY where the gateway "
            "runs to have the model write them; a client's key never pays for a summary)"
        )
    return "summaries: written by the model, paid with the operator's key"
