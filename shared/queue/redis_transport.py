"""kombu's Redis transport with a channel close that survives a broker that vanished.

Celery's consumer reacts to a lost broker connection with ``connection.collect()`` and then
``connection.close()``. In kombu 5.7.0, ``Channel.close()`` first reads the reply of the
BRPOP it is waiting on; with Redis gone that raises ``ConnectionError`` *before* the
channel is marked closed. ``collect()`` swallows the error, leaves the channel half-open
(the in-flight message still in ``qos._delivered``) and clears ``transport.client``. The
second close then restores the unacked message through a new pool whose parameters come
from ``transport.client`` (now ``None``): ``AttributeError: 'NoneType' object has no
attribute 'hostname'``, which is not a connection error, so the worker stops with
"Unrecoverable error" whenever Redis restarts while a task runs (idle workers survive).

Here the pending reply is drained best-effort: with the broker gone there is nothing to
drain, and the close goes on to mark the channel closed and restore the message once.
:func:`install` makes ``redis://`` mean this transport in the process; it is registered
under kombu's own alias rather than named in ``broker_transport``, so the broker URL keeps
its ``redis://`` scheme (Flower picks its queue-length reader by that scheme).
"""

from __future__ import annotations

from queue import Empty
from typing import Any

import kombu.transport
from kombu.transport import redis


class Channel(redis.Channel):
    """A Redis channel whose ``close()`` does not stop half-way on a dead connection."""

    def close(self) -> None:
        state: Any = self  # the type stubs do not declare the channel's polling state
        if state._in_poll:
            try:
                state._brpop_read()
            except Empty:
                pass
            except state.connection_errors:
                pass  # the broker is gone: no reply left to read (_in_poll is reset)
        super().close()


class Transport(redis.Transport):
    """``redis://`` with :class:`Channel`."""

    Channel = Channel


TRANSPORT = f"{__name__}:Transport"
_SCHEMES = ("redis", "rediss")


def install() -> None:
    """Resolve ``redis://`` and ``rediss://`` to :class:`Transport` from now on (idempotent)."""
    for scheme in _SCHEMES:
        kombu.transport.TRANSPORT_ALIASES[scheme] = TRANSPORT
        # A connection made before this call cached kombu's own class under the alias.
        cache: dict[str, object] = getattr(kombu.transport, "_transport_cache", {})
        cache.pop(scheme, None)
