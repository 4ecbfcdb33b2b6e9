"""Per-call CPU cost of the peers' context-management middleware (langchain, deepagents).

The peer half of a side-by-side benchmark: the same synthetic tool-calling history (Anthropic
Messages API JSON, from ``synthetic_history``) is converted once to langchain_core messages, and
each peer's per-model-call hook is then called directly, in this process, with no network and
no real model:

- ``langchain.before_model``: ``langchain.agents.middleware.SummarizationMiddleware.before_model``
  (the hook ``create_agent`` runs before every model call);
- ``deepagents.wrap_model_call``: ``deepagents.middleware.summarization.SummarizationMiddleware``
  (built by ``create_summarization_middleware``, the ``create_deep_agent`` default) around a
  handler that returns a canned response;
- ``... +ChatAnthropic``: the same hook followed by what ``create_agent``'s model node does for one
  call: ``bind_tools`` and ``ChatAnthropic.invoke``, with the HTTP send replaced by a canned
  Messages API response (the request payload is built by ``_get_request_payload`` as usual and the
  response parsed by ``_format_output``);
- ``ChatAnthropic.invoke`` alone, as the baseline of the stack variants.

``peer_steady_calls`` uses a window large enough that nothing is summarized (the steady call);
``peer_compacting_calls`` uses one that the history crosses, with the summary model replaced by
``FakeSummaryModel``, which answers a canned summary at once and records the CPU time spent inside
it, so "summarizing call minus its model call" can be read off (it is negligible).

Not covered: the LangGraph graph itself (state reducers, checkpointing) and the rest of
``create_deep_agent``'s middleware stack (filesystem, todo, sub-agents, prompt caching).

This module imports nothing from hango; the peers are imported lazily, so ``synthetic_history``
works without them. They come with the ``bench`` extra (``deepagents==0.7.32``,
``langchain==1.5.0``; deepagents pulls in ``langchain-anthropic``).

Run: ``python -m bench.bench_call_peers [--sizes 400 2000 10000] [--repeats 15]`` from the
project root.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import shutil
import socket
import statistics
import string
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SIZES = (400, 2_000, 10_000)
REPEATS = 15
MODEL = "claude-sonnet-4-5"
MAX_TOKENS = 16_000
# Steady: a window no history here comes near. Compacting: the model's real window (200k), or
# less when a short history would not cross 85% of it.
STEADY_WINDOW = 1_000_000_000
COMPACT_WINDOW = 200_000
MIN_COMPACT_WINDOW = 40_000
# create_summarization_middleware's defaults for a profiled model.
TRIGGER_FRACTION = 0.85
KEEP_FRACTION = 0.10
FAKE_API_KEY = "sk-ant-bench-offline-0000"

# --------------------------------------------------------------------------------------------
# Synthetic history (Anthropic Messages API JSON)
# --------------------------------------------------------------------------------------------

_WORDS = tuple(
    (  # noqa: SIM905
        "def return self import from class if else for while in not and or None True False "
        "request message token session value result error path file line test assert raise "
        "the a of to is that with as on by be this are was it an at which can will config "
        "async await yield lambda dict list str int float bytes len range open json load dump"
    ).split()
)
_PACKAGES = ("core", "api", "store", "queue", "agent", "tools", "models", "utils", "cli", "web")
_ID_ALPHABET = string.ascii_letters + string.digits
SYSTEM_PROMPT_WORDS = 2_400


@dataclass(frozen=True)
class _Pool:
    """Pre-made lines that tool results, edits and prose are cut from (fast and deterministic)."""

    code: tuple[str, ...]
    prose: tuple[str, ...]

    def code_text(self, rng: random.Random, chars: int) -> str:
        start = rng.randrange(len(self.code))
        out: list[str] = []
        size = 0
        i = start
        while size < chars:
            line = self.code[i % len(self.code)]
            out.append(line)
            size += len(line) + 1
            i += 1
        return "\n".join(out)[:chars]

    def prose_text(self, rng: random.Random, chars: int) -> str:
        out: list[str] = []
        size = 0
        while size < chars:
            sentence = rng.choice(self.prose)
            out.append(sentence)
            size += len(sentence) + 1
        return " ".join(out)[:chars]


def _make_pool(seed: int) -> _Pool:
    rng = random.Random(seed * 7919 + 17)
    code = []
    for n in range(4_000):
        indent = "    " * rng.randint(0, 3)
        words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(2, 12)))
        code.append(f"{indent}{words}  # {n}")
    prose = []
    for _ in range(600):
        words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(6, 20)))
        prose.append(words.capitalize() + ".")
    return _Pool(tuple(code), tuple(prose))


def _path(rng: random.Random) -> str:
    pkg = rng.choice(_PACKAGES)
    return f"/repo/src/{pkg}/{rng.choice(_WORDS)}_{rng.randint(0, 99)}.py"


def _tool_use_id(rng: random.Random) -> str:
    return "toolu_01" + "".join(rng.choice(_ID_ALPHABET) for _ in range(22))


def _tool_input(rng: random.Random, pool: _Pool, name: str) -> dict[str, Any]:
    """Inputs of realistic size: ~100-400 bytes, edits ~0.5-3 KB, writes ~1-6 KB."""
    if name == "read_file":
        return {"file_path": _path(rng), "offset": rng.randint(0, 800), "limit": 400}
    if name == "grep":
        return {
            "pattern": rf"def {rng.choice(_WORDS)}_\w+\(",
            "path": f"/repo/src/{rng.choice(_PACKAGES)}",
            "glob": "*.py",
            "output_mode": "content",
            "-n": True,
            "head_limit": 200,
        }
    if name == "glob":
        return {"pattern": f"**/{rng.choice(_WORDS)}*.py", "path": "/repo"}
    if name == "bash":
        return {
            "command": f"cd /repo && python -m pytest tests/{rng.choice(_PACKAGES)} -x -q "
            f"-k '{rng.choice(_WORDS)} and not {rng.choice(_WORDS)}' 2>&1 | tail -n 80",
            "description": pool.prose_text(rng, rng.randint(40, 160)),
            "timeout": 120_000,
        }
    if name == "edit_file":
        return {
            "file_path": _path(rng),
            "old_string": pool.code_text(rng, rng.randint(150, 1_500)),
            "new_string": pool.code_text(rng, rng.randint(150, 1_500)),
            "replace_all": False,
        }
    if name == "write_file":
        return {"file_path": _path(rng), "content": pool.code_text(rng, rng.randint(1_000, 6_000))}
    if name == "todo_write":
        return {
            "todos": [
                {
                    "content": pool.prose_text(rng, rng.randint(30, 90)),
                    "status": rng.choice(("pending", "in_progress", "completed")),
                    "activeForm": pool.prose_text(rng, rng.randint(20, 60)),
                }
                for _ in range(rng.randint(2, 7))
            ]
        }
    return {
        "url": f"https://docs.example.com/{rng.choice(_WORDS)}",
        "prompt": pool.prose_text(rng, 120),
    }


_TOOL_WEIGHTS = {
    "read_file": 30,
    "grep": 14,
    "glob": 6,
    "bash": 20,
    "edit_file": 16,
    "write_file": 5,
    "todo_write": 5,
    "web_fetch": 4,
}


def _result_size(rng: random.Random, name: str) -> int:
    """Mostly small or ~2 KB, sometimes ~8 KB, occasionally ~20 KB."""
    if name in ("edit_file", "write_file", "todo_write"):
        return rng.randint(40, 300)
    roll = rng.random()
    if roll < 0.50:
        return rng.randint(40, 400)
    if roll < 0.93:
        return rng.randint(1_000, 3_000)
    if roll < 0.98:
        return rng.randint(5_000, 10_000)
    return rng.randint(18_000, 24_000)


def _tool_turn(rng: random.Random, pool: _Pool) -> tuple[dict[str, Any], dict[str, Any]]:
    calls = rng.choices((1, 2, 3, 4, 5), weights=(72, 14, 8, 4, 2))[0]
    names = rng.choices(tuple(_TOOL_WEIGHTS), weights=tuple(_TOOL_WEIGHTS.values()), k=calls)
    content: list[dict[str, Any]] = []
    if rng.random() < 0.45:
        content.append({"type": "text", "text": pool.prose_text(rng, rng.randint(60, 600))})
    results: list[dict[str, Any]] = []
    for name in names:
        use_id = _tool_use_id(rng)
        content.append(
            {"type": "tool_use", "id": use_id, "name": name, "input": _tool_input(rng, pool, name)}
        )
        header = f"[{name} {use_id[-8:]}]\n"
        result: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": use_id,
            "content": header + pool.code_text(rng, _result_size(rng, name)),
        }
        if rng.random() < 0.03:
            result["is_error"] = True
        results.append(result)
    return {"role": "assistant", "content": content}, {"role": "user", "content": results}


def synthetic_history(n_messages: int, seed: int = 0) -> list[dict[str, Any]]:
    """A deterministic agent session in Messages API JSON, ready for the next model call.

    Roles alternate strictly, starting and ending with a user message, so the length is odd: an
    even ``n_messages`` gives ``n_messages + 1`` messages (400 -> 401). Mostly tool turns: an
    assistant message with an optional text block and 1-5 ``tool_use`` blocks (parallel batches
    ~28% of the time), then a user message with the matching ``tool_result`` blocks (string
    content, ~3% ``is_error``). Every 20-40 turns the assistant answers in text and the user
    follows up. About 1.75 KB of JSON per message: 401 messages are ~205k tokens by langchain's
    counter (3.3 chars/token), 2,001 ~975k, 10,001 ~5.1M.
    """
    if n_messages < 1:
        raise ValueError("n_messages must be >= 1")
    target = n_messages if n_messages % 2 else n_messages + 1
    rng = random.Random(seed)
    pool = _make_pool(seed)
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": pool.prose_text(rng, 1_500)},
    ]
    next_chat = rng.randint(20, 40)
    while len(messages) < target:
        next_chat -= 1
        if next_chat <= 0:
            next_chat = rng.randint(20, 40)
            reply = {"type": "text", "text": pool.prose_text(rng, rng.randint(300, 1_500))}
            messages.append({"role": "assistant", "content": [reply]})
            messages.append({"role": "user", "content": pool.prose_text(rng, rng.randint(40, 400))})
        else:
            messages.extend(_tool_turn(rng, pool))
    return messages


def system_prompt(seed: int = 0) -> str:
    """The session's system prompt (~15 KB), the same for every size."""
    rng = random.Random(seed + 1)
    return _make_pool(seed).prose_text(rng, SYSTEM_PROMPT_WORDS * 6)


def tool_definitions() -> list[dict[str, Any]]:
    """Messages API tool definitions for the tools the history calls."""
    rng = random.Random(99)
    pool = _make_pool(3)

    def prop(kind: str) -> dict[str, Any]:
        return {"type": kind, "description": pool.prose_text(rng, rng.randint(40, 200))}

    props: dict[str, dict[str, dict[str, Any]]] = {
        "read_file": {
            "file_path": prop("string"),
            "offset": prop("integer"),
            "limit": prop("integer"),
        },
        "grep": {
            "pattern": prop("string"),
            "path": prop("string"),
            "glob": prop("string"),
            "output_mode": prop("string"),
            "-n": prop("boolean"),
            "head_limit": prop("integer"),
        },
        "glob": {"pattern": prop("string"), "path": prop("string")},
        "bash": {
            "command": prop("string"),
            "description": prop("string"),
            "timeout": prop("integer"),
        },
        "edit_file": {
            "file_path": prop("string"),
            "old_string": prop("string"),
            "new_string": prop("string"),
            "replace_all": prop("boolean"),
        },
        "write_file": {"file_path": prop("string"), "content": prop("string")},
        "todo_write": {"todos": {"type": "array", "items": {"type": "object"}, **prop("array")}},
        "web_fetch": {"url": prop("string"), "prompt": prop("string")},
    }
    return [
        {
            "name": name,
            "description": pool.prose_text(rng, rng.randint(300, 1_500)),
            "input_schema": {
                "type": "object",
                "properties": properties,
                "required": [next(iter(properties))],
            },
        }
        for name, properties in props.items()
    ]


# --------------------------------------------------------------------------------------------
# Conversion to langchain_core messages (done once, outside any timed region)
# --------------------------------------------------------------------------------------------


def _approx_tokens(chars: int) -> int:
    return chars * 10 // 35


def to_langchain(history: Sequence[dict[str, Any]]) -> list[Any]:
    """The history as a langchain agent holds it after the same session with ChatAnthropic.

    Assistant messages look like ``ChatAnthropic._format_output`` makes them: a text-only reply
    is a string; otherwise ``content`` is the list of blocks (text and ``tool_use``) plus
    ``tool_calls``, ``response_metadata`` with ``model_provider="anthropic"`` and a synthetic
    ``usage_metadata`` (input = everything before it at ~3.5 chars/token). Each ``tool_result``
    becomes its own ``ToolMessage`` (named after its tool, ``status="error"`` for ``is_error``),
    so a parallel batch gives several messages. Every message has an id, as ``add_messages``
    would have given it, so no hook mutates the list on its first call.
    """
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    out: list[Any] = []
    tool_names: dict[str, str] = {}
    seen_chars = 0
    for index, message in enumerate(history):
        content = message["content"]
        chars = len(json.dumps(content))
        if message["role"] == "assistant":
            blocks = [dict(block) for block in content]
            calls = []
            for block in blocks:
                if block["type"] == "tool_use":
                    tool_names[block["id"]] = block["name"]
                    calls.append(
                        {
                            "type": "tool_call",
                            "name": block["name"],
                            "args": block["input"],
                            "id": block["id"],
                        }
                    )
            text_only = len(blocks) == 1 and blocks[0]["type"] == "text"
            inp, outp = _approx_tokens(seen_chars), _approx_tokens(chars)
            out.append(
                AIMessage(
                    content=blocks[0]["text"] if text_only else blocks,
                    tool_calls=calls,
                    id=f"lc-{index}",
                    response_metadata={
                        "model_provider": "anthropic",
                        "model_name": MODEL,
                        "stop_reason": "end_turn" if text_only else "tool_use",
                    },
                    usage_metadata={
                        "input_tokens": inp,
                        "output_tokens": outp,
                        "total_tokens": inp + outp,
                    },
                )
            )
        elif isinstance(content, str):
            out.append(HumanMessage(content=content, id=f"lc-{index}"))
        else:
            texts = []
            for k, block in enumerate(content):
                if block["type"] == "tool_result":
                    out.append(
                        ToolMessage(
                            content=_result_text(block["content"]),
                            tool_call_id=block["tool_use_id"],
                            name=tool_names.get(block["tool_use_id"]),
                            status="error" if block.get("is_error") else "success",
                            id=f"lc-{index}-{k}",
                        )
                    )
                else:
                    texts.append(block)
            if texts:
                out.append(HumanMessage(content=texts, id=f"lc-{index}-text"))
        seen_chars += chars
    return out


def _result_text(content: str | list[dict[str, Any]]) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(block.get("text", "") for block in content)


# --------------------------------------------------------------------------------------------
# Offline models
# --------------------------------------------------------------------------------------------

CANNED_SUMMARY = (
    "## SESSION INTENT\nFix the failing queue tests and make the retry path idempotent.\n\n"
    "## SUMMARY\n"
    + "Read the queue, store and agent modules; found the retry key built from the wall clock. "
    * 12
    + "\n\n## ARTIFACTS\n- /repo/src/queue/retry_12.py: key from (thread, boundary id)\n"
    "- /repo/tests/queue/test_retry.py: new cases\n\n"
    "## NEXT STEPS\nRun the integration suite; then tidy the store module.\n"
)


def _offline_env() -> None:
    """No tracing, and a fake key in this process only (ChatAnthropic also gets it explicitly)."""
    os.environ.setdefault("ANTHROPIC_API_KEY", FAKE_API_KEY)
    for name in ("LANGSMITH_TRACING", "LANGCHAIN_TRACING_V2", "LANGCHAIN_TRACING"):
        os.environ[name] = "false"


def _canned_anthropic_message() -> Any:
    from anthropic.types import Message

    return Message.model_validate(
        {
            "id": "msg_01BenchOfflineCannedReply00",
            "type": "message",
            "role": "assistant",
            "model": MODEL,
            "content": [
                {"type": "text", "text": "Reading the module next."},
                {
                    "type": "tool_use",
                    "id": "toolu_01BenchOfflineCannedCall0",
                    "name": "read_file",
                    "input": {
                        "file_path": "/repo/src/core/request_1.py",
                        "offset": 0,
                        "limit": 400,
                    },
                },
            ],
            "stop_reason": "tool_use",
            "stop_sequence": None,
            "usage": {
                "input_tokens": 12,
                "output_tokens": 48,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 150_000,
            },
        }
    )


def _offline_chat_anthropic_class() -> type[Any]:
    from langchain_anthropic import ChatAnthropic

    class OfflineChatAnthropic(ChatAnthropic):  # type: ignore[misc]
        """ChatAnthropic whose transport is a stub: ``_create`` keeps the payload, sends nothing.

        Everything else (message conversion, ``_get_request_payload``, ``_format_output``,
        callbacks) is the library's own code. The Anthropic client is never constructed.
        """

        def _create(self, payload: dict[str, Any]) -> Any:
            _LAST_PAYLOAD["payload"] = payload
            return _CannedRaw()

        async def _acreate(self, payload: dict[str, Any]) -> Any:
            return self._create(payload)

    return OfflineChatAnthropic


_LAST_PAYLOAD: dict[str, Any] = {}


class _CannedRaw:
    """Stands in for ``client.messages.with_raw_response.create(...)``'s result."""

    _message: Any = None

    def parse(self) -> Any:
        if _CannedRaw._message is None:
            _CannedRaw._message = _canned_anthropic_message()
        return _CannedRaw._message


def offline_chat_anthropic(max_input_tokens: int) -> Any:
    """A ``ChatAnthropic`` for ``MODEL`` with its profile's window set to ``max_input_tokens``."""
    from langchain_anthropic.chat_models import _get_default_model_profile

    _offline_env()
    profile = {**_get_default_model_profile(MODEL), "max_input_tokens": max_input_tokens}
    cls = _offline_chat_anthropic_class()
    return cls(
        model=MODEL, api_key=FAKE_API_KEY, max_tokens=MAX_TOKENS, max_retries=0, profile=profile
    )


def _fake_summary_model_class() -> type[Any]:
    from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel

    class FakeSummaryModel(FakeMessagesListChatModel):  # type: ignore[misc]
        """Answers ``CANNED_SUMMARY`` at once; counts its calls and the CPU time spent inside."""

        calls: int = 0
        cpu_seconds: float = 0.0
        prompt_chars: int = 0

        def _generate(self, messages: list[Any], *args: Any, **kwargs: Any) -> Any:
            started = time.process_time()
            self.calls += 1
            self.prompt_chars = sum(len(m.text) for m in messages)
            result = super()._generate(messages, *args, **kwargs)
            self.cpu_seconds += time.process_time() - started
            return result

    return FakeSummaryModel


def fake_summary_model() -> Any:
    from langchain_core.messages import AIMessage

    return _fake_summary_model_class()(responses=[AIMessage(content=CANNED_SUMMARY)])


# --------------------------------------------------------------------------------------------
# Peer calls
# --------------------------------------------------------------------------------------------


@dataclass
class PeerSetup:
    """What the callables share for one history and one window (built outside timed regions)."""

    lc_messages: list[Any]
    model: Any
    summarizer: Any
    system_message: Any
    tools: list[dict[str, Any]]
    window: int
    tokens: int


def _setup(history: Sequence[dict[str, Any]], window: int | None) -> PeerSetup:
    """``window=None``: the compacting window (200k, or less so that the trigger is crossed)."""
    from langchain.agents.middleware.summarization import _get_approximate_token_counter
    from langchain_core.messages import SystemMessage

    lc_messages = to_langchain(history)
    probe = offline_chat_anthropic(STEADY_WINDOW)
    tokens = _get_approximate_token_counter(probe)(lc_messages)
    if window is None:
        window = min(COMPACT_WINDOW, int(tokens / TRIGGER_FRACTION / 1.15))
        if window < MIN_COMPACT_WINDOW:
            # Below this the system prompt, tools and max_tokens alone fill deepagents' budget.
            msg = f"history too short to compact ({tokens:,} tokens); use >= 100 messages"
            raise ValueError(msg)
    return PeerSetup(
        lc_messages=lc_messages,
        model=offline_chat_anthropic(window),
        summarizer=fake_summary_model(),
        system_message=SystemMessage(content=system_prompt()),
        tools=tool_definitions(),
        window=window,
        tokens=tokens,
    )


def _langchain_middleware(setup: PeerSetup, trim: int | None) -> Any:
    from langchain.agents.middleware import SummarizationMiddleware

    return SummarizationMiddleware(
        model=setup.model,
        trigger=("fraction", TRIGGER_FRACTION),
        keep=("fraction", KEEP_FRACTION),
        trim_tokens_to_summarize=trim,
        summarizer=setup.summarizer,
    )


def _deepagents_middleware(setup: PeerSetup, files: Path | None = None) -> Any:
    """deepagents' summarization over an in-memory store, or over files under ``files``."""
    from deepagents.backends import FilesystemBackend, StoreBackend
    from deepagents.middleware.summarization import create_summarization_middleware
    from langgraph.store.memory import InMemoryStore

    if files is not None:
        backend: Any = FilesystemBackend(root_dir=files, virtual_mode=True)
        clear: Callable[[], None] = lambda: shutil.rmtree(files, ignore_errors=True)  # noqa: E731
    else:
        backend = StoreBackend(namespace=lambda _rt: ("bench",), store=InMemoryStore())
        clear = backend._store._data.clear
    middleware = create_summarization_middleware(setup.model, backend, summarizer=setup.summarizer)
    middleware._bench_clear = clear
    return middleware


def _model_call(setup: PeerSetup, messages: list[Any]) -> Any:
    """One model call as ``create_agent``'s model node makes it (bind tools, invoke)."""
    bound = setup.model.bind_tools(setup.tools, tool_choice=None)
    return bound.invoke([setup.system_message, *messages])


def _apply_langchain_update(messages: list[Any], update: dict[str, Any] | None) -> list[Any]:
    """What ``add_messages`` leaves after ``[RemoveMessage(ALL), summary, *kept]``."""
    if update is None:
        return messages
    return list(update["messages"][1:])


def _langchain_calls(
    setup: PeerSetup, prefix: str, trim: int | None
) -> dict[str, Callable[[], object]]:
    middleware = _langchain_middleware(setup, trim)
    state = {"messages": setup.lc_messages}

    def hook() -> object:
        return middleware.before_model(state, None)

    def stack() -> object:
        update = middleware.before_model(state, None)
        return update, _model_call(setup, _apply_langchain_update(setup.lc_messages, update))

    return {f"{prefix}": hook, f"{prefix}+ChatAnthropic": stack}


def _deepagents_calls(
    setup: PeerSetup, files: Path | None = None, name: str = "deepagents.wrap_model_call"
) -> dict[str, Callable[[], object]]:
    from langchain.agents.middleware.types import ModelRequest, ModelResponse
    from langchain_core.messages import AIMessage

    middleware = _deepagents_middleware(setup, files)
    clear = middleware._bench_clear
    canned = ModelResponse(result=[AIMessage(content="ok", id="canned")])
    request = ModelRequest(
        model=setup.model,
        messages=setup.lc_messages,
        system_message=setup.system_message,
        tools=list(setup.tools),
        state={"messages": setup.lc_messages},
        runtime=None,
    )

    def canned_handler(_request: Any) -> Any:
        return canned

    def real_handler(req: Any) -> Any:
        return ModelResponse(result=[_model_call(setup, req.messages)])

    def hook() -> object:
        clear()  # each call is a session's first summary: no history file yet
        return middleware.wrap_model_call(request, canned_handler)

    def stack() -> object:
        clear()
        return middleware.wrap_model_call(request, real_handler)

    return {name: hook, f"{name}+ChatAnthropic": stack}


def peer_steady_calls(history: Sequence[dict[str, Any]]) -> dict[str, Callable[[], object]]:
    """Zero-argument callables, one model call's worth of peer work each, nothing summarized."""
    setup = _setup(history, STEADY_WINDOW)
    calls = {
        "ChatAnthropic.invoke": lambda: _model_call(setup, setup.lc_messages),
        **_langchain_calls(setup, "langchain.before_model", trim=None),
        **_deepagents_calls(setup),
    }
    _attach(calls, setup)
    return calls


def peer_compacting_calls(
    history: Sequence[dict[str, Any]], files: Path | None = None
) -> dict[str, Callable[[], object]]:
    """Like ``peer_steady_calls``, with the trigger crossed and an instant fake summarizer.

    Both peers use trigger 85% / keep 10% of the window. langchain is measured with
    ``trim_tokens_to_summarize=None`` (the whole evicted span goes to the summarizer, as with
    deepagents' factory) and with its class default 4000 (``[trim=4000]``), where a tool loop
    often leaves no human message in the trimmed window, so the summarizer is not called at all.
    deepagents also renders the evicted span to markdown and writes it to an in-memory
    ``StoreBackend`` (emptied at the start of each call); with ``files``, also over its
    ``FilesystemBackend`` writing there (emptied the same way).
    """
    setup = _setup(history, None)
    calls = {
        **_langchain_calls(setup, "langchain.before_model", trim=None),
        **_langchain_calls(setup, "langchain.before_model[trim=4000]", trim=4_000),
        **_deepagents_calls(setup),
    }
    if files is not None:
        name = "deepagents.wrap_model_call[file backend]"
        calls[name] = _deepagents_calls(setup, files, name)[name]
    _attach(calls, setup)
    return calls


def _attach(calls: dict[str, Callable[[], object]], setup: PeerSetup) -> None:
    """Lets the runner report the window and the fake summarizer's share (not part of the API)."""
    for call in calls.values():
        call.setup = setup  # type: ignore[attr-defined]


# --------------------------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------------------------


def time_calls(
    calls: dict[str, Callable[[], object]], repeats: int = REPEATS, *, warmup: bool = True
) -> dict[str, list[float]]:
    """CPU seconds (``time.process_time``) of each call, round-robin over ``repeats`` rounds.

    One untimed warm-up round first (unless ``warmup=False``). A full ``gc.collect()`` runs
    before each timed call, outside it; the collector stays on inside (its work is part of the
    cost).
    """
    if warmup:
        for call in calls.values():
            call()
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            gc.collect()
            started = time.process_time()
            call()
            samples[name].append(time.process_time() - started)
    return samples


def outcome(result: object) -> str:
    """What one call did, read from its return value (and the stub's last payload)."""
    if isinstance(result, tuple):  # langchain stack: (before_model's update, model reply)
        return outcome(result[0]) + outcome(result[1]).removeprefix("model called")
    if result is None:
        return "no summary"
    if isinstance(result, dict):
        return f"summary + {len(result['messages']) - 2} kept msgs"
    if type(result).__module__.split(".")[0] not in ("langchain", "langchain_core"):
        return type(result).__name__  # an extra (non-peer) call's result
    sent = ""
    payload = _LAST_PAYLOAD.pop("payload", None)
    if payload is not None:
        sent = f", sent {len(payload['messages'])} API msgs"
    command = getattr(result, "command", None)
    if command is not None:
        event = command.update.get("_summarization_event")
        if event is not None:
            return f"summary, cutoff {event['cutoff_index']}{sent}"
        return f"tail clipped{sent}"
    if type(result).__name__ == "AIMessage":
        return f"model called{sent}"
    return f"no summary{sent}"


@contextmanager
def no_network() -> Iterator[None]:
    """Any socket connect in this block raises (a guard: nothing here should try)."""

    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("bench_call_peers: network access attempted")

    saved = socket.socket.connect, socket.socket.connect_ex, socket.create_connection
    socket.socket.connect = refuse  # type: ignore[method-assign]
    socket.socket.connect_ex = refuse  # type: ignore[method-assign]
    socket.create_connection = refuse  # type: ignore[assignment]
    try:
        yield
    finally:
        socket.socket.connect, socket.socket.connect_ex, socket.create_connection = saved  # type: ignore[method-assign]


def _print_table(
    title: str,
    setup: PeerSetup,
    samples: dict[str, list[float]],
    outcomes: dict[str, str],
) -> None:
    print(
        f"\n{title}: {len(setup.lc_messages):,} langchain messages, ~{setup.tokens:,} tokens "
        f"(langchain counter, 3.3 chars/token), window {setup.window:,}"
    )
    print(f"  {'call':<48} {'median ms':>10} {'p10 ms':>9} {'p90 ms':>9}  what it did")
    for name, values in samples.items():
        ms = sorted(v * 1000 for v in values)
        p10 = ms[len(ms) // 10]
        p90 = ms[min(len(ms) - 1, (len(ms) * 9) // 10)]
        print(
            f"  {name:<48} {statistics.median(ms):>10.2f} {p10:>9.2f} {p90:>9.2f}  {outcomes[name]}"
        )


def _warm_up(call: Callable[[], object], setup: PeerSetup) -> str:
    """One untimed call; says what it did, and whether the fake summarizer ran and for how long."""
    summarizer = setup.summarizer
    calls, cpu = summarizer.calls, summarizer.cpu_seconds
    text = outcome(call())
    if summarizer.calls > calls:
        spent = (summarizer.cpu_seconds - cpu) * 1000
        text += f"; summarizer ran ({summarizer.prompt_chars:,}-char prompt, {spent:.2f} ms)"
    elif "summary" in text and "no summary" not in text:
        text += "; summarizer NOT called (placeholder summary)"
    return text


CallBuilder = Callable[[list[dict[str, Any]]], dict[str, Callable[[], object]]]
"""history -> named zero-argument callables (the shape of ``peer_steady_calls``)."""


def run(
    sizes: Sequence[int] = SIZES,
    repeats: int = REPEATS,
    *,
    extra_steady: CallBuilder | None = None,
    extra_compacting: CallBuilder | None = None,
) -> None:
    """Times the peers at each size; ``extra_*`` (e.g. hango's calls) join the same rounds."""
    plans = (
        ("steady", peer_steady_calls, extra_steady),
        ("compacting", peer_compacting_calls, extra_compacting),
    )
    for size in sizes:
        history = synthetic_history(size)
        for title, build, extra in plans:
            try:
                calls = build(history)
            except ValueError as exc:
                print(f"\n{title} @ {len(history):,} API messages: skipped ({exc})")
                continue
            setup = next(iter(calls.values())).setup  # type: ignore[attr-defined]
            if extra is not None:
                calls.update(extra(history))
            outcomes = {name: _warm_up(call, setup) for name, call in calls.items()}
            samples = time_calls(calls, repeats, warmup=False)
            _print_table(f"{title} @ {len(history):,} API messages", setup, samples, outcomes)
            del calls, samples
        gc.collect()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--repeats", type=int, default=REPEATS)
    args = parser.parse_args(argv)
    try:
        import deepagents  # noqa: F401
        import langchain  # noqa: F401
        import langchain_anthropic  # noqa: F401
    except ImportError as exc:
        print(f"skipped: the peers are not installed ({exc}); install the bench extra")
        return
    from importlib.metadata import version

    print(
        "CPU ms per call (time.process_time), median of "
        f"{args.repeats} interleaved rounds; "
        + ", ".join(
            f"{p} {version(p)}"
            for p in ("langchain", "langchain-core", "langchain-anthropic", "deepagents")
        )
    )
    with no_network():
        run(args.sizes, args.repeats)


if __name__ == "__main__":
    main(sys.argv[1:])
