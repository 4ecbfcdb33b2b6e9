"""The product's exceptions, in one small hierarchy under :class:`HangoError`.

Every exception pickles with its fields intact (Celery moves exceptions between
processes): each one records its constructor keywords and rebuilds itself from them.
"""

from __future__ import annotations

from typing import Any


class HangoError(Exception):
    """Base of every error the product raises on purpose."""

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.message = message
        self._fields = fields
        for key, value in fields.items():
            setattr(self, key, value)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.message, self._fields))

    def __str__(self) -> str:
        return self.message


def _rebuild(cls: type[HangoError], message: str, fields: dict[str, Any]) -> HangoError:
    error = cls.__new__(cls)
    HangoError.__init__(error, message, **fields)
    return error


# The exit status of a worker that refuses to start because of its configuration
# (sysexits' EX_CONFIG): a supervisor must not start it again until someone fixes it.
EXIT_WORKER_CONFIG = 78


class ConfigError(HangoError):
    variable: str

    def __init__(self, message: str, *, variable: str) -> None:
        super().__init__(message, variable=variable)


class InvalidSessionIdError(HangoError):
    session_id: str

    def __init__(self, session_id: str) -> None:
        shown = session_id if len(session_id) <= 80 else session_id[:80] + "..."
        super().__init__(
            f"invalid session id {shown!r}: use 1-128 characters from "
            "letters, digits, '.', '_' and '-', not starting with '.'",
            session_id=session_id,
        )


class HistoryPathError(HangoError):
    path: str
    reason: str

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"refused history path {path!r}: {reason}", path=path, reason=reason)


class TranscriptError(HangoError):
    source: str
    location: str

    def __init__(self, message: str, *, source: str, location: str) -> None:
        super().__init__(f"{source}: {location}: {message}", source=source, location=location)


class InvalidInputError(HangoError):
    """Refused before anything was stored: the session is exactly as it was."""


class CannotFitError(HangoError):
    """Even the keep window does not fit the model's window."""

    tokens: int
    limit: int

    def __init__(self, message: str, *, tokens: int, limit: int) -> None:
        super().__init__(message, tokens=tokens, limit=limit)


class SummarizerError(HangoError):
    """A summarizer failed or returned nothing usable."""


class QueueUnavailableError(HangoError):
    """The broker/Redis cannot be reached or no worker answered."""


class ProviderError(HangoError):
    status: int | None

    def __init__(self, message: str, *, status: int | None = None, **fields: Any) -> None:
        super().__init__(message, status=status, **fields)


class TransientProviderError(ProviderError):
    """Worth retrying: 429, 5xx, 529, timeouts, connections."""


class InvalidRequestError(ProviderError):
    """A 400 that is not an overflow (e.g. tool pairing)."""


class ContextOverflowError(ProviderError):
    """The request did not fit the model's window: ``tokens`` and ``maximum`` as the 400
    text states them (``None`` when the stop reason signalled the overflow)."""

    tokens: int | None
    maximum: int | None

    def __init__(
        self,
        message: str,
        *,
        tokens: int | None = None,
        maximum: int | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message, status=status, tokens=tokens, maximum=maximum)


class SessionBusyError(HangoError):
    """Another process is running a turn on this session, and the wait for it ran out."""

    session_id: str


class TurnLeaseLostError(HangoError):
    """This process's hold on the session expired and another holder took it: stop writing."""

    session_id: str


class UnknownSessionError(HangoError):
    """A session the store does not hold (never created, or another database)."""

    session_id: str

    def __init__(self, session_id: str, *, database: str | None = None) -> None:
        where = database or "the database"
        super().__init__(f"no session {session_id!r} in {where}", session_id=session_id,
                         database=database)  # fmt: skip


class MissingHistoryError(HangoError):
    """A session whose compaction records offloaded to a file the history does not hold."""

    def __init__(self, message: str, *, session_id: str, path: str) -> None:
        super().__init__(message, session_id=session_id, path=path)


class SchemaNotReadyError(HangoError):
    """The database lacks the schema (or is behind it): ``hango migrate`` brings it up."""

    def __init__(self, message: str, *, database: str) -> None:
        super().__init__(message, database=database)


class ToolInputError(HangoError):
    """A tool's arguments were well-formed but cannot be acted on (the message says why)."""


class QueueDeadlineError(QueueUnavailableError):
    """No result arrived before the caller's deadline."""


class JobFailedError(QueueUnavailableError):
    """The worker gave up on the job and said why."""


class PublishError(QueueUnavailableError):
    """The task could not be published (the broker is unreachable)."""


class LeaseBusyError(HangoError):
    """Another worker holds the lease of this job right now."""

    key: str

    def __init__(self, key: str) -> None:
        super().__init__(f"lease {key!r} is held by another worker", key=key)


class MissingRangeError(HangoError):
    """The store does not hold every message of the range a task was sent."""
