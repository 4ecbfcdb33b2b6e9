"""Builders for end-to-end tests of the agent loop with a scripted model."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hango.core.messages import Request, Response, TextBlock
from hango.core.settings import Settings, load_settings
from hango.middleware.base import Middleware
from hango.middleware.observer import LoopObserver
from hango.providers.base import Capabilities
from hango.providers.scripted import Reply, ScriptedProvider, text_reply, tool_reply
from hango.store import Store
from hango.tokens import Estimator
from hango.tools.builtin import Tool
from hango.wiring.agent import Agent, build_agent

TEST_MODEL = "test-model"


def make_settings(tmp_path: Path, *, window: int = 6000, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "home": tmp_path,  # the test owns this directory: the store may create it
        "model": TEST_MODEL,
        "model_profiles": {TEST_MODEL: {"max_input_tokens": window}},
        "history_root": tmp_path / "history",
        "database_url": f"sqlite:///{tmp_path / 'hango.db'}",
        "estimator": "heuristic",
        "tool_arg_max_tokens": 200,
        "tool_result_offload_tokens": 100_000,
        # A scripted agent provider answers the agent's steps only: a summary on the
        # prefix route would take one of its replies. The route's own tests open it.
        "summary_route": "range",
    }
    values.update(overrides)
    return load_settings(**values)


def writer_reply(i: int, size: int = 3000) -> Response:
    """A model reply that writes a large file (a large tool input)."""
    return tool_reply(
        ("write_file", {"path": f"/work/file_{i}.txt", "content": f"line {i}\n" * (size // 7)})
    )


def build(
    tmp_path: Path,
    replies: list[Reply] | None = None,
    *,
    store: Store | None = None,
    window: int = 6000,
    caching: bool = False,
    observers: list[LoopObserver] | None = None,
    late: Sequence[Middleware] = (),
    extra_tools: Sequence[Tool] = (),
    system_prompt: Sequence[TextBlock] = (),
    estimator: Estimator | None = None,
    **overrides: Any,
) -> tuple[Agent, ScriptedProvider]:
    provider = ScriptedProvider(replies or [], capabilities=Capabilities(prompt_caching=caching))
    summarizer = ScriptedProvider(
        fallback=lambda r: text_reply("SUMMARY of earlier work: wrote /work/file_0.txt")
    )
    settings = make_settings(tmp_path, window=window, **overrides)
    agent = build_agent(
        settings,
        provider=provider,
        summarizer_provider=summarizer,
        store=store,
        observers=observers or [],
        extra_tools=extra_tools,
        system_prompt=system_prompt,
        late=late,
        estimator=estimator,
    )
    return agent, provider


def dumps(request: Request) -> str:
    return json.dumps(request.to_api())
