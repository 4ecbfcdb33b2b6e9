"""Suite-wide guards: no test reaches past this machine, nor writes into the user's home.

Every socket ``connect`` in the test process is checked: loopback addresses (127.0.0.0/8,
::1, ``localhost``) and Unix sockets pass; anything else fails the test at once with the
address named, instead of hanging on a network that does not exist or, worse, calling a
real API. Worker subprocesses are started by the tests with loopback URLs only.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Iterator
from typing import Any

import pytest

_LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}


class NetworkAccessError(RuntimeError):
    """A test tried to connect beyond loopback."""


def is_loopback(address: Any) -> bool:
    if not isinstance(address, tuple):  # AF_UNIX paths and abstract names
        return True
    host = str(address[0]).strip("[]")
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


def _guarded(original: Any) -> Any:
    def connect(self: socket.socket, address: Any) -> Any:
        if not is_loopback(address):
            raise NetworkAccessError(f"tests may only connect to loopback, not {address!r}")
        return original(self, address)

    return connect


@pytest.fixture(autouse=True, scope="session")
def _loopback_only() -> Iterator[None]:
    connect, connect_ex = socket.socket.connect, socket.socket.connect_ex
    socket.socket.connect = _guarded(connect)  # type: ignore[method-assign]
    socket.socket.connect_ex = _guarded(connect_ex)  # type: ignore[method-assign]
    try:
        yield
    finally:
        socket.socket.connect = connect  # type: ignore[method-assign]
        socket.socket.connect_ex = connect_ex  # type: ignore[method-assign]


@pytest.fixture(autouse=True, scope="session")
def _hango_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """HANGO_HOME (the default database and history root) is a scratch directory, for
    this process and the worker processes it starts; never the user's own."""
    saved = os.environ.get("HANGO_HOME")
    os.environ["HANGO_HOME"] = str(tmp_path_factory.mktemp("hango-home"))
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("HANGO_HOME", None)
        else:
            os.environ["HANGO_HOME"] = saved
