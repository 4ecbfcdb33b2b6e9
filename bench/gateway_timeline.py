"""Per-phase timestamps of one gateway request, taken inside the gateway's process.

``bench_gateway`` runs the gateway in a process of its own; there, :func:`install` wraps
the points a request passes on its way to the client's first byte and records when it
first reached each, as ``time.perf_counter()`` (``CLOCK_MONOTONIC`` on Linux: the same
clock in every process, so the client's own timestamps line up with them). Requests are
timed one at a time (the steady rounds send one request at once; while one is timed,
others are not); each timed request's marks go to ``sink`` when it ends. The gateway's
code is not changed: only wrapped here.

The phases, in order (``PHASES``): the endpoint entered; the body's last byte in (the
incremental parse starts); the body parsed; the turn's thread started; the upstream body
built; the upstream call started on the event loop; its body sent; upstream's head back;
the turn's store work beside the call finished (awaited before anything is relayed); the
head relayed to the client; the first event relayed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx2

import hango.gateway.app as app_module
import hango.gateway.provider as provider_module
from hango.gateway.body import Bodies
from hango.gateway.service import Beside, Gateway
from hango.gateway.upstream import Head

PHASES = (
    "enter",
    "body_in",
    "parsed",
    "turn",
    "built",
    "upstream_call",
    "upstream_sent",
    "upstream_head",
    "store_ready",
    "head_out",
    "first_out",
)
# The gateway process's CPU seconds from the endpoint entered to the answer's end.
CPU = "process_cpu"
_TRACED = {
    "http11.send_request_body.complete": "upstream_sent",
    "http11.receive_response_headers.complete": "upstream_head",
}


class Timeline:
    """The marks of the request in flight."""

    def __init__(self, sink: Callable[[dict[str, float]], None]) -> None:
        self.sink = sink
        self.marks: dict[str, float] = {}
        # A request is being timed (overlapping ones, when clients run at once, are not).
        self.timing = False

    def mark(self, phase: str) -> None:
        self.marks.setdefault(phase, time.perf_counter())

    def begin(self) -> bool:
        """Start timing a request; False (not timed) while another one is timed."""
        if self.timing:
            return False
        self.timing = True
        self.marks = {"enter": time.perf_counter(), CPU: time.process_time()}
        return True

    def flush(self) -> None:
        """Send the marks, with the process's CPU time over the request (every thread's:
        the turn's, the event loop's, the store work beside the call) in place of its start."""
        self.marks[CPU] = time.process_time() - self.marks[CPU]
        self.sink(self.marks)
        self.marks, self.timing = {}, False


def install(sink: Callable[[dict[str, float]], None]) -> Timeline:
    timeline = Timeline(sink)
    _wrap_endpoint(timeline)
    _wrap_body(timeline)
    _wrap_turn(timeline)
    _wrap_upstream(timeline)
    return timeline


def _wrap_endpoint(timeline: Timeline) -> None:
    call, send_item = app_module.MessagesEndpoint.__call__, app_module._send_item

    async def entered(endpoint: Any, *args: Any) -> None:
        if not timeline.begin():
            await call(endpoint, *args)
            return
        try:
            await call(endpoint, *args)
        finally:
            timeline.flush()

    async def relayed(exchange: Any, send: Any, item: Any) -> None:
        timeline.mark("head_out" if isinstance(item, Head) else "first_out")
        await send_item(exchange, send, item)

    app_module.MessagesEndpoint.__call__ = entered  # type: ignore[method-assign,assignment]
    app_module._send_item = relayed


def _wrap_body(timeline: Timeline) -> None:
    received = Bodies.received

    def timed(bodies: Bodies, *args: Any) -> Any:
        timeline.mark("body_in")
        try:
            return received(bodies, *args)
        finally:
            timeline.mark("parsed")

    Bodies.received = timed  # type: ignore[method-assign,assignment]


def _wrap_turn(timeline: Timeline) -> None:
    # The provider's body builder: ``upstream_parts`` (before it: ``upstream_body``, the
    # name a run against an earlier commit finds).
    name = "upstream_parts" if hasattr(provider_module, "upstream_parts") else "upstream_body"
    serve, built, ready = Gateway.serve, getattr(provider_module, name), Beside.ready

    def served(gateway: Gateway, *args: Any) -> None:
        timeline.mark("turn")
        serve(gateway, *args)

    def body(*args: Any, **kwargs: Any) -> Any:
        out = built(*args, **kwargs)
        timeline.mark("built")
        return out

    async def awaited(beside: Beside) -> None:
        await ready(beside)
        timeline.mark("store_ready")

    Gateway.serve = served  # type: ignore[method-assign,assignment]
    setattr(provider_module, name, body)
    Beside.ready = awaited  # type: ignore[method-assign,assignment]


def _wrap_upstream(timeline: Timeline) -> None:
    send = httpx2.AsyncClient.send

    async def trace(name: str, info: dict[str, Any]) -> None:
        if name in _TRACED:
            timeline.mark(_TRACED[name])

    async def sent(client: httpx2.AsyncClient, request: httpx2.Request, **kwargs: Any) -> Any:
        timeline.mark("upstream_call")
        request.extensions = {**request.extensions, "trace": trace}
        return await send(client, request, **kwargs)

    httpx2.AsyncClient.send = sent  # type: ignore[method-assign,assignment]
