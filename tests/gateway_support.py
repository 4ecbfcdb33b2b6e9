"""A real ``hango serve`` app on a loopback port, in front of a ``FakeAnthropicAPI``.

The gateway is the app ``hango serve`` runs (``build_gateway`` + ``create_app``) served
by uvicorn in a thread, with its store and history in the test's directory. Clients are
real: the Anthropic SDKs, Claude Code, plain HTTP.
"""

from __future__ import annotations

import itertools
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn

from hango.core.settings import Settings, load_settings
from hango.gateway.app import Upstream, create_app
from hango.gateway.build import GatewayOptions, build_gateway
from hango.gateway.service import Gateway
from hango.telemetry.names import Telemetry

SECRET = "test-gateway-secret"


@dataclass
class RunningGateway:
    url: str
    gateway: Gateway
    settings: Settings


def gateway_settings(home: Path, *, operator_key: str | None = None, **extra: Any) -> Settings:
    return load_settings(
        home=home, redis_url=None, anthropic_api_key=operator_key, estimator="heuristic", **extra
    )


@contextmanager
def running_gateway(
    upstream: str,
    home: Path,
    *,
    max_input_tokens: int | None = None,
    operator_key: str | None = None,
    telemetry: Telemetry | None = None,
    settings: Settings | None = None,
    **extra: Any,
) -> Iterator[RunningGateway]:
    """``settings``: the gateway's own (a queue, a PostgreSQL store); else the embedded
    defaults in ``home``."""
    settings = settings or gateway_settings(home, operator_key=operator_key, **extra)
    options = GatewayOptions(upstream=upstream, max_input_tokens=max_input_tokens)
    gateway = build_gateway(settings, options, telemetry)
    app = create_app(gateway, Upstream(upstream, SECRET.encode()))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the gateway did not start")
        time.sleep(0.01)
    try:
        yield RunningGateway(f"http://127.0.0.1:{port}", gateway, settings)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
        gateway.store.engine.dispose()


def tool_round_responder(rounds: int, tool: str = "Bash") -> Any:
    """An upstream that calls ``tool`` once per request for ``rounds`` requests, then ends.

    The round is read from the request itself (how many tool results its last message
    answers so far is not enough after a compaction), so it counts the requests it saw.
    """
    seen = itertools.count(1)

    def respond(body: dict[str, Any]) -> dict[str, Any]:
        n = next(seen)
        if n > rounds:
            return {
                "content": [{"type": "text", "text": "all rounds done"}],
                "stop_reason": "end_turn",
            }
        call = {
            "type": "tool_use",
            "id": f"toolu_{n:03d}",
            "name": tool,
            "input": {"command": f"step {n}"},
        }
        return {
            "content": [{"type": "text", "text": f"round {n}"}, call],
            "stop_reason": "tool_use",
        }

    return respond


def tool_output(n: int, chars: int) -> str:
    """A tool result of about ``chars`` characters, different for every round."""
    line = f"round {n}: output line with some varied text {n * 7919 % 1000:03d}\n"
    return (line * (chars // len(line) + 1))[:chars]


def breakpoints(body: dict[str, Any]) -> int:
    def count(value: Any) -> int:
        if isinstance(value, dict):
            return ("cache_control" in value) + sum(count(v) for v in value.values())
        if isinstance(value, list):
            return sum(count(v) for v in value)
        return 0

    return count(body.get("system")) + count(body.get("tools")) + count(body.get("messages"))


def without_markers(value: Any) -> Any:
    from hango.gateway.identity import without_cache_control

    return without_cache_control(value)
