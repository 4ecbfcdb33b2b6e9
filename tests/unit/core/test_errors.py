"""Every exception of hango.core.errors survives pickling with its type, message and fields.

Celery moves exceptions between processes by pickling them, so a field lost here is a
field a caller in another process never sees.
"""

from __future__ import annotations

import inspect
import pickle
from typing import Any

import pytest

from hango.core import errors
from hango.core.errors import (
    CannotFitError,
    ConfigError,
    ContextOverflowError,
    HangoError,
    HistoryPathError,
    InvalidInputError,
    InvalidRequestError,
    InvalidSessionIdError,
    JobFailedError,
    LeaseBusyError,
    MissingHistoryError,
    MissingRangeError,
    ProviderError,
    PublishError,
    QueueDeadlineError,
    QueueUnavailableError,
    SchemaNotReadyError,
    SessionBusyError,
    SummarizerError,
    ToolInputError,
    TranscriptError,
    TransientProviderError,
    TurnLeaseLostError,
    UnknownSessionError,
)

# One sample per class, with the fields each one must carry across processes.
SAMPLES: list[tuple[HangoError, dict[str, Any]]] = [
    (HangoError("base failure"), {}),
    (ConfigError("HANGO_MODEL: bad", variable="HANGO_MODEL"), {"variable": "HANGO_MODEL"}),
    (InvalidSessionIdError("../etc"), {"session_id": "../etc"}),
    (
        HistoryPathError("/tmp/../x", "escapes the history root"),
        {"path": "/tmp/../x", "reason": "escapes the history root"},
    ),
    (
        TranscriptError("not JSON", source="s.jsonl", location="line 7"),
        {"source": "s.jsonl", "location": "line 7"},
    ),
    (
        CannotFitError("keep window too big", tokens=250_000, limit=200_000),
        {"tokens": 250_000, "limit": 200_000},
    ),
    (InvalidInputError("the user message is empty: nothing was stored"), {}),
    (SummarizerError("summary was empty"), {}),
    (QueueUnavailableError("no worker answered within 90s"), {}),
    (ProviderError("Anthropic API 401", status=401), {"status": 401}),
    (ProviderError("no status"), {"status": None}),
    (TransientProviderError("Anthropic API 529 overloaded", status=529), {"status": 529}),
    (InvalidRequestError("messages.3: `tool_use` ids ...", status=400), {"status": 400}),
    (
        ContextOverflowError("prompt is too long", tokens=208_310, maximum=200_000, status=400),
        {"tokens": 208_310, "maximum": 200_000, "status": 400},
    ),
    (
        ContextOverflowError("model_context_window_exceeded"),
        {"tokens": None, "maximum": None, "status": None},
    ),
    (UnknownSessionError("nobody"), {"session_id": "nobody"}),
    (
        UnknownSessionError("nobody", database="sqlite:////h/hango.db"),
        {"session_id": "nobody", "database": "sqlite:////h/hango.db"},
    ),
    (
        MissingHistoryError("not there", session_id="s", path="/conversation_history/s.md"),
        {"session_id": "s", "path": "/conversation_history/s.md"},
    ),
    (
        SchemaNotReadyError("run `hango migrate`", database="postgresql://h/d"),
        {"database": "postgresql://h/d"},
    ),
    (ToolInputError("file not found: /notes/x.md"), {}),
    (QueueDeadlineError("summarize:s:3: no result within 90 s"), {}),
    (JobFailedError("summarize:s:3: the worker failed: boom"), {}),
    (PublishError("summarize:s:3: could not publish the task"), {}),
    (LeaseBusyError("lease:summarize:s:3"), {"key": "lease:summarize:s:3"}),
    (
        SessionBusyError("session 's' is busy", session_id="s", waited=1.5),
        {"session_id": "s", "waited": 1.5},
    ),
    (TurnLeaseLostError("lost", session_id="s"), {"session_id": "s"}),
    (MissingRangeError("messages 4-9 of 's' are not all in the store"), {}),
]


def _defined_error_classes() -> set[type[BaseException]]:
    return {
        cls
        for _, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, HangoError) and cls.__module__ == errors.__name__
    }


def test_every_error_class_has_a_sample() -> None:
    assert {type(error) for error, _ in SAMPLES} == _defined_error_classes()


@pytest.mark.parametrize(
    ("error", "fields"),
    SAMPLES,
    ids=[f"{type(e).__name__}-{i}" for i, (e, _) in enumerate(SAMPLES)],
)
def test_error_survives_pickle(error: HangoError, fields: dict[str, Any]) -> None:
    restored = pickle.loads(pickle.dumps(error))
    assert type(restored) is type(error)
    assert str(restored) == str(error)
    assert restored.message == error.message
    assert restored.args == error.args
    for name, value in fields.items():
        assert getattr(restored, name) == value, name


def test_pickled_error_still_raises_and_is_caught_by_its_base() -> None:
    restored = pickle.loads(pickle.dumps(ContextOverflowError("x", tokens=1, maximum=0)))
    with pytest.raises(ProviderError) as caught:
        raise restored
    assert caught.value.tokens == 1


def test_derived_messages_are_kept_verbatim() -> None:
    error = TranscriptError("bad role", source="a.json", location="message 4")
    assert str(pickle.loads(pickle.dumps(error))) == "a.json: message 4: bad role"
    assert "../etc" in str(pickle.loads(pickle.dumps(InvalidSessionIdError("../etc"))))
