"""The HTTP face of the gateway: a Starlette app served by uvicorn.

- ``POST /v1/messages``: a turn of the library's loop (:mod:`hango.gateway.service`),
  streamed back event by event, or the JSON message;
- ``POST /v1/messages/count_tokens``: the count of the request as hango would send it;
- ``GET /healthz`` (the process answers), ``GET /readyz`` (the store answers too);
- any other ``/v1/…`` path: proxied to the upstream unchanged; anything else: a 404 in
  the API's error format naming the path.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio
import anyio.to_thread
import httpx2
from sqlalchemy import text
from starlette.applications import Starlette
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from hango.gateway.body import Bodies, Body, BodyError
from hango.gateway.identity import api_key, client_session, header_session, tenant_of
from hango.gateway.service import Caller, EarlyLease, Gateway
from hango.gateway.upstream import (
    Exchange,
    Head,
    answer_header_map,
    error_body,
    forwarded_headers,
)

log = logging.getLogger(__name__)

# Worker threads for turns in flight (anyio's default of 40 would queue the 41st client).
TURN_THREADS = 256
UPSTREAM_TIMEOUT = httpx2.Timeout(600.0, connect=10.0)


@dataclass
class Upstream:
    base_url: str
    secret: bytes
    client: httpx2.AsyncClient | None = None

    def url(self, path: str, query: bytes) -> str:
        return self.base_url.rstrip("/") + path + (f"?{query.decode()}" if query else "")

    def http(self) -> httpx2.AsyncClient:
        assert self.client is not None, "the app's lifespan opens the client"
        return self.client


def api_error(status: int, kind: str, message: str) -> Response:
    return Response(error_body(status, kind, message), status, media_type="application/json")


class MessagesEndpoint:
    """``POST /v1/messages`` as a raw ASGI app: the answer streams as upstream sends it."""

    def __init__(self, gateway: Gateway, upstream: Upstream) -> None:
        self.gateway = gateway
        self.upstream = upstream
        self.threads = anyio.CapacityLimiter(TURN_THREADS)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = HttpRequest(scope, receive)
        prepared = await self._prepare(request)
        if isinstance(prepared, Response):
            await prepared(scope, receive, send)
            return
        exchange, caller, early = prepared
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(self._serve, exchange, caller, early)
                group.start_soon(_watch_disconnect, receive, exchange)
                await _relay(exchange, send)
                group.cancel_scope.cancel()
        finally:
            await _discard(early)  # a turn that never ran leaves no lease behind

    async def _prepare(
        self, request: HttpRequest
    ) -> tuple[Exchange, Caller, EarlyLease | None] | Response:
        headers = {k.lower(): v for k, v in request.headers.items()}
        key = api_key(headers)
        if key is None:
            return api_error(401, "authentication_error", "hango gateway: no x-api-key header")
        tenant = tenant_of(key, self.upstream.secret)
        named = header_session(headers)
        # The branch's lease is tried while the body arrives, not after.
        early = None if named is None else self.gateway.early_lease(Caller(tenant, named))
        body = await read_body(request, self.gateway.bodies, tenant, headers)
        if isinstance(body, Response):
            await _discard(early)
            return body
        raw = body.raw
        exchange = Exchange(
            client=self.upstream.http(),
            url=self.upstream.url("/v1/messages", request.url.query.encode()),
            raw=raw,
            headers={**forwarded_headers(headers), "content-type": "application/json"},
            streaming=bool(raw.get("stream")),
            frame=body.frame(),
        )
        return exchange, Caller(tenant, client_session(headers, raw)), early

    async def _serve(self, exchange: Exchange, caller: Caller, early: EarlyLease | None) -> None:
        serve = self.gateway.serve
        await anyio.to_thread.run_sync(serve, exchange, caller, early, limiter=self.threads)


async def _discard(early: EarlyLease | None) -> None:
    if early is not None and early.pending:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(early.discard)


async def read_body(
    request: HttpRequest, bodies: Bodies, tenant: str, headers: dict[str, str], kind: str = ""
) -> Body | Response:
    """The request's body, or the API's 400 when it is no JSON object.

    The previous body of the same session (and ``kind`` of request) is compared with this
    one as it arrives: only what it does not repeat is parsed. A session not named in the
    headers is one of the tenant's unnamed conversations, told apart by how the body starts.
    """
    named = header_session(headers)
    group = f"{kind}\0{tenant}"
    arrival = bodies.arrival(group if named is None else f"{group}\0{named}", unnamed=not named)
    async for chunk in request.stream():
        arrival.add(chunk)
    try:
        return bodies.received(arrival)
    except BodyError as error:
        return api_error(400, "invalid_request_error", f"hango gateway: {error}")


async def _relay(exchange: Exchange, send: Send) -> None:
    started = False
    async with exchange.answers:
        async for item in exchange.answers:
            await _send_item(exchange, send, item)
            started = started or isinstance(item, Head)
    if started:
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _send_item(exchange: Exchange, send: Send, item: Head | bytes) -> None:
    try:
        if isinstance(item, Head):
            start = {"status": item.status, "headers": item.headers}
            await send({"type": "http.response.start", **start})
        elif not exchange.gone:
            await send({"type": "http.response.body", "body": item, "more_body": True})
    except OSError:
        exchange.disconnected()


async def _watch_disconnect(receive: Receive, exchange: Exchange) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            exchange.disconnected()
            return


def create_app(gateway: Gateway, upstream: Upstream) -> Starlette:
    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        limits = httpx2.Limits(max_connections=512, max_keepalive_connections=64)
        async with httpx2.AsyncClient(timeout=UPSTREAM_TIMEOUT, limits=limits) as client:
            upstream.client = client
            yield
            upstream.client = None
        await anyio.to_thread.run_sync(gateway.close)

    async def healthz(request: HttpRequest) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(request: HttpRequest) -> Response:
        try:
            await anyio.to_thread.run_sync(_ping_store, gateway)
        except Exception as error:
            return JSONResponse({"status": "unavailable", "store": type(error).__name__}, 503)
        return JSONResponse({"status": "ready"})

    async def count_tokens(request: HttpRequest) -> Response:
        return await _count_tokens(request, gateway, upstream)

    async def other(request: HttpRequest) -> Response:
        if request.url.path.startswith("/v1/"):
            return await _proxy(request, upstream)
        return api_error(
            404,
            "not_found_error",
            f"hango gateway: {request.method} {request.url.path} is not served",
        )

    methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
    return Starlette(
        routes=[
            Route("/v1/messages", MessagesEndpoint(gateway, upstream), methods=["POST"]),
            Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
            Route("/{path:path}", other, methods=methods),
        ],
        lifespan=lifespan,
    )


def _ping_store(gateway: Gateway) -> None:
    with gateway.store.engine.connect() as conn:
        conn.execute(text("SELECT 1"))


async def _count_tokens(request: HttpRequest, gateway: Gateway, upstream: Upstream) -> Response:
    headers = {k.lower(): v for k, v in request.headers.items()}
    key = api_key(headers)
    if key is None:
        return api_error(401, "authentication_error", "hango gateway: no x-api-key header")
    tenant = tenant_of(key, upstream.secret)
    body = await read_body(request, gateway.bodies, tenant, headers, "count_tokens")
    if isinstance(body, Response):
        return body
    caller = Caller(tenant, client_session(headers, body.raw))
    sent = await anyio.to_thread.run_sync(gateway.as_sent, body.raw, caller)
    answer = await upstream.http().post(
        upstream.url("/v1/messages/count_tokens", request.url.query.encode()),
        # Unchanged (nothing compacted yet): the client's own bytes, not serialized again.
        content=bytes(body.data) if sent is body.raw else json.dumps(sent).encode(),
        headers={**forwarded_headers(headers), "content-type": "application/json"},
    )
    return Response(answer.content, answer.status_code, headers=answer_header_map(answer.headers))


async def _proxy(request: HttpRequest, upstream: Upstream) -> Response:
    headers = forwarded_headers({k.lower(): v for k, v in request.headers.items()})
    if "content-type" in request.headers:
        headers["content-type"] = request.headers["content-type"]
    outgoing = upstream.http().build_request(
        request.method,
        upstream.url(request.url.path, request.url.query.encode()),
        content=await request.body(),
        headers=headers,
    )
    answer = await upstream.http().send(outgoing, stream=True)

    async def body() -> AsyncIterator[bytes]:
        try:
            async for chunk in answer.aiter_raw():
                yield chunk
        finally:
            await answer.aclose()

    return StreamingResponse(body(), answer.status_code, headers=answer_header_map(answer.headers))
