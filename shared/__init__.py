"""hango-context: keeps long agent sessions inside the context window without rewriting history.

The public API. Everything a library user needs is importable from here::

    from shared import Message, ToolResultBlock, build_agent, load_settings

Names are resolved on first use (PEP 562), so importing one subpackage (the CLI, a worker)
does not import the whole library.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from shared.agent.loop import AgentLoop, TurnResult
    from shared.compaction.jobs import (
        HistoryOffloader,
        OffloadJob,
        Summarizer,
        SummaryJob,
        SummaryResult,
    )
    from shared.compaction.record import CompactionRecord
    from shared.core.errors import (
        CannotFitError,
        ConfigError,
        ContextOverflowError,
        HangoError,
        InvalidInputError,
        ProviderError,
    )
    from shared.core.messages import (
        Message,
        Request,
        Response,
        TextBlock,
        ToolDefinition,
        ToolResultBlock,
        ToolUseBlock,
        Usage,
    )
    from shared.core.settings import Settings, load_settings
    from shared.history.base import HistoryBackend
    from shared.middleware.observer import LoopObserver, NullObserver
    from shared.providers.base import Capabilities, Provider
    from shared.store import Store
    from shared.wiring.agent import Agent, build_agent

_EXPORTS: dict[str, str] = {
    "Agent": "shared.wiring.agent",
    "build_agent": "shared.wiring.agent",
    "AgentLoop": "shared.agent.loop",
    "TurnResult": "shared.agent.loop",
    "Settings": "shared.core.settings",
    "load_settings": "shared.core.settings",
    "Message": "shared.core.messages",
    "Request": "shared.core.messages",
    "Response": "shared.core.messages",
    "TextBlock": "shared.core.messages",
    "ToolDefinition": "shared.core.messages",
    "ToolResultBlock": "shared.core.messages",
    "ToolUseBlock": "shared.core.messages",
    "Usage": "shared.core.messages",
    "HangoError": "shared.core.errors",
    "ConfigError": "shared.core.errors",
    "CannotFitError": "shared.core.errors",
    "ContextOverflowError": "shared.core.errors",
    "InvalidInputError": "shared.core.errors",
    "ProviderError": "shared.core.errors",
    "CompactionRecord": "shared.compaction.record",
    "Summarizer": "shared.compaction.jobs",
    "SummaryJob": "shared.compaction.jobs",
    "SummaryResult": "shared.compaction.jobs",
    "HistoryOffloader": "shared.compaction.jobs",
    "OffloadJob": "shared.compaction.jobs",
    "LoopObserver": "shared.middleware.observer",
    "NullObserver": "shared.middleware.observer",
    "Provider": "shared.providers.base",
    "Capabilities": "shared.providers.base",
    "HistoryBackend": "shared.history.base",
    "Store": "shared.store",
}

__all__ = [
    "Agent",
    "AgentLoop",
    "CannotFitError",
    "Capabilities",
    "CompactionRecord",
    "ConfigError",
    "ContextOverflowError",
    "HangoError",
    "HistoryBackend",
    "HistoryOffloader",
    "InvalidInputError",
    "LoopObserver",
    "Message",
    "NullObserver",
    "OffloadJob",
    "Provider",
    "ProviderError",
    "Request",
    "Response",
    "Settings",
    "Store",
    "Summarizer",
    "SummaryJob",
    "SummaryResult",
    "TextBlock",
    "ToolDefinition",
    "ToolResultBlock",
    "ToolUseBlock",
    "TurnResult",
    "Usage",
    "build_agent",
    "load_settings",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'shared' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
