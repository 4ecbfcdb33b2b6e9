"""Results that prove where they came from: a keyed MAC over the job's key and payload.

Anyone who can write to the result Redis could otherwise plant a summary that an agent
installs as the worker's (or copy one session's result under another session's key).
Every committed result is stored as ``hmac-sha256:<hex>:<payload>``, the MAC taken with
``HANGO_QUEUE_SECRET`` (shared by the agents and the workers, never by Redis) over the
result key's name, which names the job (kind, session, turn, range, fingerprint), and the
payload. A forged, copied or otherwise mismatched value fails the check, and the
:class:`~hango.queue.results.ResultCache` treats it as absent: never installed, logged,
counted, deleted, and the job computed again.
"""

from __future__ import annotations

import hashlib
import hmac
import logging

import redis

from hango.core.errors import ConfigError
from hango.core.settings import Settings, env_name

log = logging.getLogger(__name__)

SCHEME = "hmac-sha256:"
MIN_SECRET_CHARS = 32
SECRET_VARIABLE = env_name("queue_secret")
# Where a worker publishes, when it starts, a value signed with its secret: an agent that
# starts with another secret finds out then, not summary by summary.
PROBE_KEY = "hango:queue:secret-probe"


class ResultSigner:
    """Signs and checks committed results with one shared secret."""

    def __init__(self, secret: str) -> None:
        if len(secret) < MIN_SECRET_CHARS:
            raise ValueError(f"the secret must have at least {MIN_SECRET_CHARS} characters")
        self._secret = secret.encode()

    def _mac(self, key_name: str, payload: str) -> str:
        message = key_name.encode() + b"\0" + payload.encode()
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()

    def sign(self, key_name: str, payload: str) -> str:
        """The value to store under ``key_name``."""
        return f"{SCHEME}{self._mac(key_name, payload)}:{payload}"

    def open(self, key_name: str, stored: str) -> str | None:
        """The payload of a value stored under ``key_name``; ``None`` unless it is genuine."""
        if not stored.startswith(SCHEME):
            return None
        mac, separator, payload = stored[len(SCHEME) :].partition(":")
        if not separator:
            return None
        return payload if hmac.compare_digest(mac, self._mac(key_name, payload)) else None


def signer_from_settings(settings: Settings) -> ResultSigner:
    """The signer of this deployment, or a :class:`ConfigError` naming the variable."""
    secret = settings.queue_secret.get_secret_value() if settings.queue_secret else ""
    if not secret:
        raise ConfigError(
            f"{SECRET_VARIABLE} is not set: with HANGO_REDIS_URL the agents and the workers "
            "sign every result with a secret they share (at least "
            f"{MIN_SECRET_CHARS} characters; e.g. python -c 'import secrets; "
            "print(secrets.token_hex(32))'), so nothing written to Redis by anyone else is "
            "installed",
            variable=SECRET_VARIABLE,
        )
    if len(secret) < MIN_SECRET_CHARS:
        raise ConfigError(
            f"{SECRET_VARIABLE} is too short ({len(secret)} characters): use at least "
            f"{MIN_SECRET_CHARS} random characters, the same on every agent and worker",
            variable=SECRET_VARIABLE,
        )
    return ResultSigner(secret)


def publish_probe(client: redis.Redis, signer: ResultSigner, worker: str) -> None:
    """The worker's start-up proof of its secret, under :data:`PROBE_KEY`.

    A probe another secret signed is replaced, with a warning: the latest worker to start
    is the one the agents are checked against. Redis unreachable: a warning, no probe.
    """
    try:
        stored = client.get(PROBE_KEY)
        if stored is not None and signer.open(PROBE_KEY, _text(stored)) is None:
            log.warning(
                "the secret probe on this Redis was signed with another %s: another worker "
                "(or an earlier one) uses a different secret; replacing it",
                SECRET_VARIABLE,
            )
        client.set(PROBE_KEY, signer.sign(PROBE_KEY, worker))
    except redis.RedisError as exc:
        log.warning("could not publish the secret probe (%s)", type(exc).__name__)


def check_probe(client: redis.Redis, signer: ResultSigner) -> None:
    """A :class:`ConfigError` naming :data:`SECRET_VARIABLE` (never the secret) when the
    workers' probe on this Redis does not verify with ``signer``'s secret.

    No probe yet (no worker started since Redis was emptied) or Redis unreachable: nothing
    to check now; each result is still checked when it is read.
    """
    try:
        stored = client.get(PROBE_KEY)
    except redis.RedisError as exc:
        log.warning("could not read the workers' secret probe (%s)", type(exc).__name__)
        return
    if stored is not None and signer.open(PROBE_KEY, _text(stored)) is None:
        raise ConfigError(
            f"{SECRET_VARIABLE} differs from the one the workers on this Redis use (their "
            "start-up probe does not verify with it): every summary they made would be "
            "refused and made again here; set the same secret on every agent and worker",
            variable=SECRET_VARIABLE,
        )


def _text(stored: bytes | str) -> str:
    return stored.decode("utf-8", "replace") if isinstance(stored, bytes) else stored
