"""Helpers for tests (and the benchmark) that run a real Celery worker process.

- :class:`CountingProvider` is the summarizer provider the worker loads through
  ``HANGO_WORKER_SUMMARIZER=tests.integration.worker_support:counting_provider``. It counts
  its calls in Redis (the worker's pool children are other processes), records the pid
  that made each call (so a test can SIGKILL exactly that child), and is steered from the
  test through Redis keys: every call slow, the next N calls slow, the next N calls failing
  with a transient error. :class:`ProviderProbe` is the test's side of those keys.
- :class:`WorkerProcess` starts ``celery -A hango_worker worker -P prefork`` as a subprocess in
  its own process group, waits until it answers a ping, and stops or kills it.
- :class:`FlowerProcess` runs ``celery -A hango_worker flower`` with basic auth and reads its API.
- :func:`queue_settings` / :func:`worker_env` give both sides the same small limits, so
  lease expiry, re-dispatch and visibility-timeout redelivery happen in seconds.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from celery import Celery

from hango.core.errors import TransientProviderError
from hango.core.messages import Request, Response
from hango.core.settings import Settings, load_settings
from hango.providers.base import Capabilities
from hango.providers.scripted import text_reply
from hango.queue.dispatch import producer_app

REPO_ROOT = Path(__file__).resolve().parents[2]
REDIS_HOST = os.environ.get("HANGO_TEST_REDIS_HOST", "127.0.0.1:6379")
PROVIDER_SPEC = "tests.integration.worker_support:counting_provider"

CALLS_KEY = "test:provider:calls"
PIDS_KEY = "test:provider:pids"
DELAY_KEY = "test:provider:delay"
SLOW_CALLS_KEY = "test:provider:slow_calls"
SLOW_SECONDS_KEY = "test:provider:slow_seconds"
FAIL_CALLS_KEY = "test:provider:fail_calls"

# Small limits that still nest: summarizer < soft < hard < visibility timeout.
FAST_LIMITS: dict[str, Any] = {
    "summarizer_timeout": 4.0,
    "worker_soft_time_limit": 5.0,
    "worker_time_limit": 6.0,
    "queue_visibility_timeout": 8.0,
    "queue_restore_interval": 1,
    "queue_lease_ttl": 1.5,
    "queue_enqueue_ttl": 2.0,
    "queue_deadline": 30.0,
}


def redis_url(db: int) -> str:
    return f"redis://{REDIS_HOST}/{db}"


# Databases the test modules may claim (the benchmark uses 10, another test module 12).
TEST_DBS = (13, 14, 15, 11, 9, 8, 7, 6, 5, 4)
CLAIM_KEY = "hango-test-claim"


@contextlib.contextmanager
def claimed_redis_db(ttl: int = 1800) -> Iterator[int]:
    """An empty Redis database of our own, even while another test run uses the server.

    Test runs on one machine share the Redis server; a worker of another run on the same
    database would take our tasks (and read its own PostgreSQL database). The claim is a
    key in the database itself, set NX, expiring if a run dies without releasing it.
    """
    token = f"{socket.gethostname()}-{os.getpid()}-{time.monotonic_ns()}"
    for db in TEST_DBS:
        client = redis.Redis.from_url(redis_url(db))
        if not client.set(CLAIM_KEY, token, nx=True, ex=ttl):
            continue
        try:
            _empty_except_claim(client)
            yield db
        finally:
            if client.get(CLAIM_KEY) == token.encode():
                client.flushdb()
        return
    raise RuntimeError(f"every test Redis database {TEST_DBS} is claimed by another run")


def _empty_except_claim(client: redis.Redis) -> None:
    keys = [key for key in client.scan_iter(count=1000) if key != CLAIM_KEY.encode()]
    if keys:
        client.delete(*keys)


def redis_reachable(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1).ping())
    except redis.RedisError:
        return False


def closed_port() -> int:
    """A local TCP port nobody listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# -- the worker's summarizer provider ------------------------------------------------------


# One round trip per call (a zero-latency summarizer should cost next to nothing): count
# the call, record the pid, consume one scripted failure or slow call, return the delay.
_PROVIDER_CALL = """
local number = redis.call('incr', KEYS[1])
redis.call('rpush', KEYS[2], ARGV[1])
if redis.call('decr', KEYS[3]) >= 0 then
  return {number, 1, '0'}
end
if redis.call('decr', KEYS[4]) >= 0 then
  return {number, 0, redis.call('get', KEYS[5]) or '0'}
end
return {number, 0, redis.call('get', KEYS[6]) or '0'}
"""


@dataclass
class CountingProvider:
    """A deterministic summarizer provider whose calls are counted across processes."""

    client: redis.Redis
    name: str = "counting"
    capabilities: Capabilities = field(default_factory=Capabilities)

    def complete(self, request: Request) -> Response:
        keys = (CALLS_KEY, PIDS_KEY, FAIL_CALLS_KEY, SLOW_CALLS_KEY, SLOW_SECONDS_KEY, DELAY_KEY)
        number, failing, delay = self.client.eval(_PROVIDER_CALL, len(keys), *keys, os.getpid())
        if failing:
            raise TransientProviderError("scripted overload", status=529)
        if float(delay):
            time.sleep(float(delay))
        return text_reply(
            f"<summary>Briefing #{number} for a fresh agent, written by the test provider "
            f"for model {request.model}.</summary>"
        )


def counting_provider(settings: Settings) -> CountingProvider:
    """The factory named by ``HANGO_WORKER_SUMMARIZER`` in the worker's environment."""
    assert settings.redis_url, "the counting provider keeps its counters in HANGO_REDIS_URL"
    return CountingProvider(redis.Redis.from_url(settings.redis_url))


@dataclass
class ProviderProbe:
    """The test's handle on the counting provider's Redis keys."""

    client: redis.Redis

    def reset(self) -> None:
        self.client.delete(
            CALLS_KEY, PIDS_KEY, DELAY_KEY, SLOW_CALLS_KEY, SLOW_SECONDS_KEY, FAIL_CALLS_KEY
        )

    def calls(self) -> int:
        return int(self.client.get(CALLS_KEY) or 0)

    def pids(self) -> list[int]:
        return [int(pid) for pid in self.client.lrange(PIDS_KEY, 0, -1)]

    def delay_every_call(self, seconds: float) -> None:
        self.client.set(DELAY_KEY, seconds)

    def slow_next_calls(self, count: int, seconds: float) -> None:
        self.client.set(SLOW_SECONDS_KEY, seconds)
        self.client.set(SLOW_CALLS_KEY, count)

    def fail_next_calls(self, count: int) -> None:
        self.client.set(FAIL_CALLS_KEY, count)

    def wait_for_call(self, timeout: float = 15.0) -> int:
        """The pid of the first process to call the provider."""
        wait_until(lambda: bool(self.pids()), timeout, "the worker never called the provider")
        return self.pids()[0]


def clear_job_keys(client: redis.Redis) -> None:
    """Delete the product's and the probe's keys, leaving Celery's queues and bindings."""
    for pattern in ("hango:*", "test:*"):
        keys = list(client.scan_iter(match=pattern, count=1000))
        if keys:
            client.delete(*keys)


def wait_until(condition: Callable[[], bool], timeout: float, failure: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{failure} (waited {timeout:g} s)")
        time.sleep(0.02)


# -- settings shared by the test (agent side) and the worker process -----------------------


# The secret the test agents and workers share (results are signed with it).
TEST_QUEUE_SECRET = "test-queue-secret-0123456789abcdef-shared"


def queue_settings(
    *, redis: str, database_url: str, history_root: Path, **overrides: Any
) -> Settings:
    values: dict[str, Any] = {
        **FAST_LIMITS,
        "redis_url": redis,
        "database_url": database_url,
        "history_root": history_root,
        "worker_summarizer": PROVIDER_SPEC,
        "estimator": "heuristic",
        "queue_secret": TEST_QUEUE_SECRET,
    }
    values.update(overrides)
    return load_settings(**values)


_ENV_FIELDS = (
    "redis_url",
    "database_url",
    "history_backend",
    "history_root",
    "worker_summarizer",
    "simulated_summarizer_latency",
    *FAST_LIMITS,
)


def worker_env(settings: Settings) -> dict[str, str]:
    """A clean environment that gives the worker exactly these settings."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("HANGO_")}
    for name in _ENV_FIELDS:
        env[f"HANGO_{name.upper()}"] = str(getattr(settings, name))
    if settings.anthropic_base_url is not None:
        env["HANGO_ANTHROPIC_BASE_URL"] = settings.anthropic_base_url
    if settings.anthropic_api_key is not None:
        env["HANGO_ANTHROPIC_API_KEY"] = settings.anthropic_api_key.get_secret_value()
    if settings.queue_secret is not None:
        env["HANGO_QUEUE_SECRET"] = settings.queue_secret.get_secret_value()
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = str(REPO_ROOT)
    return env


# -- the worker process --------------------------------------------------------------------


def spawn(command: list[str], settings: Settings, log_path: Path) -> subprocess.Popen[bytes]:
    """A ``celery`` process in its own process group, logging to ``log_path``."""
    with log_path.open("ab") as log:
        return subprocess.Popen(
            command,
            cwd=REPO_ROOT,
            env=worker_env(settings),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


@dataclass
class WorkerProcess:
    """``celery -A hango_worker worker`` in its own process group."""

    settings: Settings
    log_path: Path
    name: str = "hango-test"
    concurrency: int = 2
    queues: str = "summarize,offload"
    process: subprocess.Popen[bytes] | None = None

    @property
    def nodename(self) -> str:
        return f"{self.name}@{socket.gethostname()}"

    def start(self, timeout: float = 45.0) -> WorkerProcess:
        self.launch()
        self.wait_ready(timeout)
        return self

    def launch(self) -> None:
        """Start the process without waiting for it (to start several side by side)."""
        command = [
            sys.executable, "-m", "celery", "-A", "hango_worker", "worker",
            "-P", "prefork", "-c", str(self.concurrency), "-Q", self.queues,
            "-n", self.nodename, "-E", "-l", "info", "--without-mingle", "--without-gossip",
        ]  # fmt: skip
        self.process = spawn(command, self.settings, self.log_path)

    def wait_ready(self, timeout: float) -> None:
        app = producer_app(self.settings)
        try:
            wait_until(lambda: self._answers_ping(app), timeout, self._not_ready())
        finally:
            app.close()

    def _answers_ping(self, app: Celery) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise AssertionError(self._not_ready())
        replies = app.control.ping(destination=[self.nodename], timeout=0.5)
        return any(self.nodename in reply for reply in replies or [])

    def _not_ready(self) -> str:
        return f"worker {self.nodename} did not start; log:\n{self.log_tail()}"

    def log_tail(self, lines: int = 60) -> str:
        if not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def pid(self) -> int:
        assert self.process is not None, "the worker was not started"
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL the whole worker: main process and every pool child."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid(), signal.SIGKILL)
            assert self.process is not None
            self.process.wait(timeout=10)

    def stop(self, grace: float = 15.0) -> None:
        """Warm shutdown (SIGTERM), then SIGKILL if it does not end within ``grace``."""
        if not self.alive():
            return
        assert self.process is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid(), signal.SIGTERM)
        try:
            self.process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.kill()
        # Pool children that outlived the main process.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid(), signal.SIGKILL)


@contextlib.contextmanager
def running_worker(settings: Settings, log_path: Path, **options: Any) -> Iterator[WorkerProcess]:
    worker = WorkerProcess(settings, log_path, **options).start()
    try:
        yield worker
    finally:
        worker.stop()


# -- Flower ----------------------------------------------------------------------------------


@dataclass
class FlowerProcess:
    """``celery -A hango_worker flower`` with basic auth, on a free local port."""

    settings: Settings
    log_path: Path
    user: str = "hango"
    password: str = "s3cret-test"
    port: int = field(default_factory=closed_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 45.0) -> FlowerProcess:
        self.launch()
        self.wait_ready(timeout)
        return self

    def launch(self) -> None:
        command = [
            sys.executable, "-m", "celery", "-A", "hango_worker", "flower",
            f"--port={self.port}", "--address=127.0.0.1",
            f"--basic-auth={self.user}:{self.password}",
        ]  # fmt: skip
        self.process = spawn(command, self.settings, self.log_path)

    def wait_ready(self, timeout: float) -> None:
        wait_until(self._healthy, timeout, f"flower did not start; log:\n{self._log()}")

    def _healthy(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise AssertionError(f"flower exited; log:\n{self._log()}")
        try:
            with urllib.request.urlopen(self.base_url + "/healthcheck", timeout=1) as reply:
                return bool(reply.status == 200)
        except OSError:
            return False

    def _log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""

    def get(self, path: str, *, auth: bool = True) -> tuple[int, Any]:
        """``(status, parsed JSON body or None)`` of a GET."""
        status, body = self.get_text(path, auth=auth)
        return status, json.loads(body or "null") if status == 200 else None

    def get_text(self, path: str, *, auth: bool = True) -> tuple[int, str]:
        """``(status, body as text)`` of a GET: a page or an API answer, as served."""
        request = urllib.request.Request(self.base_url + path)
        if auth:
            token = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        try:
            with urllib.request.urlopen(request, timeout=10) as reply:
                return reply.status, reply.read().decode(errors="replace")
        except urllib.error.HTTPError as error:
            return error.code, ""

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
