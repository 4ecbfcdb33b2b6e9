"""A ``redis-server`` of the test's own, on a port of its own, to stop, restart or pause.

The machine's shared Redis (6379) must never be stopped; fault tests start this one on a
free port in 6391-6399 (claimed by binding), with the append-only file on as in
``docker-compose.yml``, so queued messages and results survive a restart as they would in
production.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import redis

PORTS = range(6391, 6400)


def redis_server_available() -> bool:
    return all(shutil.which(binary) for binary in ("redis-server", "redis-cli"))


def free_port() -> int:
    for port in PORTS:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port for a test Redis in {PORTS.start}-{PORTS.stop - 1}")


@dataclass
class RedisServer:
    """One ``redis-server`` process; :meth:`stop` and :meth:`start` keep its port and data."""

    directory: Path
    port: int
    append_only: bool = True
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=5, socket_connect_timeout=2)

    def start(self, timeout: float = 10.0) -> RedisServer:
        persistence = ["--appendonly", "yes", "--appendfsync", "always"] if self.append_only else []
        command = [
            "redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
            "--save", "", *persistence, "--dir", str(self.directory),
            "--logfile", str(self.directory / "redis.log"),
        ]  # fmt: skip
        self.process = subprocess.Popen(command, start_new_session=True)
        deadline = time.monotonic() + timeout
        while not self._answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server on {self.port} did not start: {self._log()}")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        """``SHUTDOWN NOSAVE``: gone at once, as a crashed or restarted server would be."""
        if self.process is None or self.process.poll() is not None:
            return
        subprocess.run(
            ["redis-cli", "-p", str(self.port), "shutdown", "nosave"],
            capture_output=True,
            timeout=10,
            check=False,
        )
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)

    def pause(self) -> None:
        """SIGSTOP: the server keeps its sockets open but never answers (a hung host)."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGCONT)

    def _answers(self) -> bool:
        try:
            return bool(self.client().ping())
        except redis.RedisError:
            return False

    def _log(self) -> str:
        log = self.directory / "redis.log"
        return log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"


@contextlib.contextmanager
def own_redis(directory: Path, *, append_only: bool = True) -> Iterator[RedisServer]:
    server = RedisServer(directory, free_port(), append_only=append_only).start()
    try:
        yield server
    finally:
        if server.process is not None and server.process.poll() is None:
            server.resume()
        server.stop()
