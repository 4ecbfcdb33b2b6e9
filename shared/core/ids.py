"""Session ids, checked once before any layer turns one into a path.

A session id names a history file, so the store refuses an unsafe one before anything is
written, and the history layer can trust the ids it is given. Tool-use ids follow the same
rule (:func:`is_safe_id`) and are checked where they become paths, in ``history.paths``.
"""

from __future__ import annotations

import re

from hango.core.errors import InvalidSessionIdError

_SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def is_safe_id(value: object) -> bool:
    return isinstance(value, str) and _SAFE_ID.fullmatch(value) is not None and ".." not in value


def validate_session_id(session_id: str) -> str:
    """``session_id`` itself when it can safely be a file name; else ``InvalidSessionIdError``."""
    if not is_safe_id(session_id):
        raise InvalidSessionIdError(str(session_id))
    return session_id
