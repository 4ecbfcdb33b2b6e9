"""The outgoing messages as a session's copy made them, with what that copy knows of them.

A :class:`SentMessages` is a read-only view of the first messages of the copy's list
(:class:`~hango.core.collection.Prefix`), as fixed as a tuple of them: the copy never
changes a position a view holds in place, it moves to a new list first (copy on write),
so making a view copies nothing however long the history. Beside its elements it names
the copy that made it (:class:`~hango.compaction.outgoing.OutgoingCopy`) and the version
of that copy it was made from; while the copy is at that version, the copy answers for it
what it keeps per position (each message's API JSON, the running token total, the
breakpoint count) instead of a walk over the history. Once the copy moves on, or for any
other sequence, the plain functions answer: a stale or foreign sequence costs a walk,
never a wrong body.

The prompt-cache middleware's marks are not in these messages: they overlay them on the
request (:attr:`~hango.core.messages.Request.marks`), so a marked request shares this view.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

from hango.core.collection import Prefix

if TYPE_CHECKING:
    from hango.core.messages import Message

# (a message, the positions of the blocks to mark, its JSON) -> the form, the form's JSON
Mark: TypeAlias = Callable[["Message", Collection[int], bytes], tuple["Message", bytes]]


class CopySource(Protocol):
    """What a copy answers for the views it made (see :class:`SentMessages`)."""

    @property
    def version(self) -> int: ...

    @property
    def breakpoints(self) -> int:
        """``cache_control`` markers in the copy's messages."""

    def json_parts(self, version: int, marks: Mapping[int, Message]) -> list[bytes] | None:
        """Each message's serialized JSON (:func:`~hango.core.messages.message_json`), read
        through ``marks``, a fresh list (``None``: the copy is no longer at ``version``)."""

    def marked(
        self, blocks: Mapping[int, Collection[int]], mark: Mark, version: int
    ) -> dict[int, Message] | None:
        """The messages at ``blocks``' positions as ``mark`` marks them, their JSON kept for
        :meth:`json_parts` (``None``: the copy is no longer at ``version``)."""

    def token_sums(self, estimator: object, split: int, version: int) -> tuple[int, int] | None:
        """The messages' estimate and that of the first ``split`` of them, by ``estimator``
        (``None``: the copy keeps another estimator's figures, or none, or has moved on)."""

    def changed_since(self, old: int, new: int) -> int | None:
        """The lowest position that changed from version ``old`` to ``new`` (``None``: not
        known): below it, the views made at the two versions hold the same messages."""


class SentMessages(Prefix["Message"]):
    """Messages made by a copy at one of its versions."""

    __slots__ = ("source", "version")

    def __init__(self, items: list[Message], length: int, source: CopySource, version: int) -> None:
        super().__init__(items, length)
        self.source, self.version = source, version

    def __reduce__(self) -> tuple[Any, ...]:
        return (tuple, (tuple(self),))

    def live(self) -> bool:
        """Whether the copy is still at the version these messages were made from."""
        return self.source.version == self.version


def live_view(messages: object) -> SentMessages | None:
    """``messages`` when a copy still answers for them, else ``None``."""
    if isinstance(messages, SentMessages) and messages.live():
        return messages
    return None
