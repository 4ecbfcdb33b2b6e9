"""hango-context: keeps long agent sessions inside the context window without rewriting history.

The public API. Everything a library user needs is importable from here::

    from hango import Message, ToolResultBlock, build_agent, load_settings

Names are resolved on first use (PEP 562), so importing one subpackage (the CLI, a worker)
does not import the whole library.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hango.agent.loop import AgentLoop, TurnResult
    from hango.compaction.jobs import (
        HistoryOffloader,
        OffloadJob,
        Summarizer,
        SummaryJob,
        SummaryResult,
    )
    from hango.compaction.record import CompactionRecord
    from hango.core.errors import (
        CannotFitError,
        ConfigError,
        ContextOverflowError,
        HangoError,
        InvalidInputError,
        ProviderError,
    )
    from hango.core.messages import (
        Message,
        Request,
        Response,
        TextBlock,
        ToolDefinition,
        ToolResultBlock,
        ToolUseBlock,
        Usage,
    )
    from hango.core.settings import Settings, load_settings
    from hango.history.base import HistoryBackend
    from hango.middleware.observer import LoopObserver, NullObserver
    from hango.providers.base import Capabilities, Provider
    from hango.store import Store
    from hango.wiring.agent import Agent, build_agent

_EXPORTS: dict[str, str] = {
    "Agent": "hango.wiring.agent",
    "build_agent": "hango.wiring.agent",
    "AgentLoop": "hango.agent.loop",
    "TurnResult": "hango.agent.loop",
    "Settings": "hango.core.settings",
    "load_settings": "hango.core.settings",
    "Message": "hango.core.messages",
    "Request": "hango.core.messages",
    "Response": "hango.core.messages",
    "TextBlock": "hango.core.messages",
    "ToolDefinition": "hango.core.messages",
    "ToolResultBlock": "hango.core.messages",
    "ToolUseBlock": "hango.core.messages",
    "Usage": "hango.core.messages",
    "HangoError": "hango.core.errors",
    "ConfigError": "hango.core.errors",
    "CannotFitError": "hango.core.errors",
    "ContextOverflowError": "hango.core.errors",
    "InvalidInputError": "hango.core.errors",
    "ProviderError": "hango.core.errors",
    "CompactionRecord": "hango.compaction.record",
    "Summarizer": "hango.compaction.jobs",
    "SummaryJob": "hango.compaction.jobs",
    "SummaryResult": "hango.compaction.jobs",
    "HistoryOffloader": "hango.compaction.jobs",
    "OffloadJob": "hango.compaction.jobs",
    "LoopObserver": "hango.middleware.observer",
    "NullObserver": "hango.middleware.observer",
    "Provider": "hango.providers.base",
    "Capabilities": "hango.providers.base",
    "HistoryBackend": "hango.history.base",
    "Store": "hango.store",
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
