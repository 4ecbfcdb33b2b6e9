"""The estimator contract: an estimate covers the *whole* request, system blocks, tool
definitions and the API's framing included (``framing.py``); estimating only ``messages``
misses the largest fixed cost of a request."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from hango.core.messages import Message, Request


@runtime_checkable
class Estimator(Protocol):
    name: str

    def estimate(self, text: str) -> int:
        """Tokens of a piece of text."""

    def estimate_message(self, message: Message) -> int:
        """Tokens of one message, framing included."""

    def estimate_request(self, request: Request) -> int:
        """Tokens of the whole request, framing included."""


@runtime_checkable
class TokenCounter(Protocol):
    """Counts the input tokens of a whole request, exactly as the provider will."""

    def count_tokens(self, request: Request, *, timeout: float) -> int: ...


@runtime_checkable
class KeepsEstimates(Protocol):
    """An estimator whose per-message figures can be stored and handed back later.

    ``signature`` names the estimator and the version of its rules (text counter,
    calibration, framing): a stored figure is used only by an estimator with the same
    signature, so a changed estimator simply estimates again. A restarted process counts
    with the figures stored with the messages it reads back (the outgoing copy takes them
    for its positions, truncation judges by them), not with the text: a long session's
    budget is rebuilt cheaply. What estimates a request outside the copy (the overflow
    ladder's last rung) counts its messages once more, then has them by identity.
    """

    signature: str

    def estimate_message(self, message: Message) -> int: ...
