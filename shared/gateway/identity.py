"""Who is calling (the tenant) and which conversation (the session) a request continues.

**Tenant**: an HMAC-SHA256 of the request's API key (``x-api-key``, else the bearer token
of ``Authorization``) under the gateway's secret. The key itself is never kept; two keys
are two tenants, and a key's tenant is the same on every gateway process that shares the
secret (``HANGO_GATEWAY_SECRET``; without it, a random secret kept in ``HANGO_HOME``).

**Session**, first match wins:

1. the ``x-claude-code-session-id`` header (Claude Code sends it on every call);
2. an ``X-Hango-Session`` header (any client that wants to name its session);
3. ``metadata.user_id`` holding JSON with a ``session_id`` (Claude Code's form);
4. a fingerprint of the conversation's start: SHA-256 of the model and the first
   message's JSON with ``cache_control`` removed (sorted keys). Two conversations that open
   with the same message of the same model share it; clients that want them apart name
   their sessions.

The store's session id is ``gw-`` and 40 hex digits of SHA-256 over the tenant and the
client's session name, so a name chosen by one tenant can never reach another tenant's
session, and whatever a client sends becomes a safe file name.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hango.core.errors import ConfigError

SECRET_FILE = "gateway.secret"


def gateway_secret(configured: str | None, home: Path) -> bytes:
    """The configured secret, else the one kept in ``home`` (made on first use)."""
    if configured:
        return configured.encode()
    path = home / SECRET_FILE
    if not path.exists():
        home.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_hex(32))
        path.chmod(0o600)
    text = path.read_text().strip()
    if not text:
        raise ConfigError(
            f"{path} is empty: delete it or set HANGO_GATEWAY_SECRET",
            variable="HANGO_GATEWAY_SECRET",
        )
    return text.encode()


def api_key(headers: Mapping[str, str]) -> str | None:
    """The caller's key: ``x-api-key``, else the bearer token of ``authorization``."""
    key = headers.get("x-api-key")
    if key:
        return key
    scheme, _, token = headers.get("authorization", "").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def tenant_of(key: str, secret: bytes) -> str:
    return hmac.new(secret, key.encode(), hashlib.sha256).hexdigest()


def client_session(headers: Mapping[str, str], body: Mapping[str, Any]) -> str:
    """The client's name for its conversation (see the module docstring for the order)."""
    by_header = header_session(headers)
    if by_header is not None:
        return by_header
    named = _metadata_session(body.get("metadata"))
    if named is not None:
        return f"metadata:{named}"
    return f"start:{conversation_fingerprint(body)}"


def header_session(headers: Mapping[str, str]) -> str | None:
    """The session a header names (``x-claude-code-session-id``, ``x-hango-session``)."""
    for header in ("x-claude-code-session-id", "x-hango-session"):
        if headers.get(header):
            return f"{header}:{headers[header]}"
    return None


def _metadata_session(metadata: Any) -> str | None:
    if not isinstance(metadata, dict) or not isinstance(metadata.get("user_id"), str):
        return None
    try:
        user = json.loads(metadata["user_id"])
    except ValueError:
        return None
    session = user.get("session_id") if isinstance(user, dict) else None
    return session if isinstance(session, str) and session else None


def conversation_fingerprint(body: Mapping[str, Any]) -> str:
    messages = body.get("messages") or [None]
    start = {"model": body.get("model"), "first": without_cache_control(messages[0])}
    return hashlib.sha256(json.dumps(start, sort_keys=True).encode()).hexdigest()


def store_session_id(tenant: str, session: str) -> str:
    digest = hashlib.sha256(f"{tenant}\0{session}".encode()).hexdigest()
    return f"gw-{digest[:40]}"


def without_cache_control(value: Any) -> Any:
    """``value`` with every ``cache_control`` key removed (a marker is not content)."""
    if isinstance(value, dict):
        return {k: without_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [without_cache_control(v) for v in value]
    return value
