"""The loop's provider in the gateway: the current client request's upstream call.

The loop and its middleware run in a worker thread per client request; the request they
serve is a context variable of that thread, so one provider object serves every client
and no client's credentials reach any other call (the summarizer has its own provider,
paid with the operator's key).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import anyio.from_thread

from hango.core.errors import ProviderError
from hango.core.messages import Request, Response
from hango.gateway.upstream import Exchange, upstream_body
from hango.providers.base import Capabilities

_CURRENT: ContextVar[Exchange | None] = ContextVar("hango_gateway_exchange", default=None)


@contextmanager
def serving(exchange: Exchange) -> Iterator[None]:
    """Calls of the provider in this context go upstream for ``exchange``."""
    token = _CURRENT.set(exchange)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def current_exchange() -> Exchange | None:
    """The client request this thread serves, if any."""
    return _CURRENT.get()


class GatewayProvider:
    """Sends the pipeline's request upstream with the client's own headers and fields."""

    name = "anthropic"
    capabilities = Capabilities(prompt_caching=True)

    def complete(self, request: Request) -> Response:
        exchange = _CURRENT.get()
        if exchange is None:
            raise ProviderError("the gateway's provider was called outside a client request")
        body = upstream_body(exchange.raw, request, exchange.frame)
        outcome = anyio.from_thread.run(exchange.forward, body)
        if isinstance(outcome, ProviderError):
            raise outcome
        return outcome
