"""A real ``hango serve`` app on a loopback port, in front of a ``FakeAnthropicAPI``.

The gateway is the app ``hango serve`` runs (``build_gateway`` + ``create_app``) served
by uvicorn in a thread, with its store and history in the test's directory. Clients are
real: the Anthropic SDKs, Claude Code, plain HTTP.
"""

from __future__ import annotations

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
    **extra: Any,
) -> Iterator[RunningGateway]:
    settings = gateway_settings(home, operator_key=operator_key, **extra)
    options = GatewayOptions(upstream=upstream, max_input_tokens=max_input_tokens)
    gateway = build_gateway(settings, options)
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
