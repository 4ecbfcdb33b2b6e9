"""The outgoing copy in one pass, as its definition reads: the reference the tests hold
the incremental :class:`~hango.compaction.outgoing.OutgoingCopy` to."""

from __future__ import annotations

from collections.abc import Sequence

from hango.compaction.repair import UsedIds, joined, repair_message
from hango.core.messages import Message, StoredMessage


def sendable(messages: Sequence[Message]) -> tuple[Message, ...]:
    """The messages with every repair of ``repair.py`` applied; the same objects where none was
    needed."""
    repaired: list[Message] = []
    ids = UsedIds()
    for index, message in enumerate(messages):
        previous = messages[index - 1] if index > 0 else None
        repaired.append(ids.unique(repair_message(message, previous)))
    return tuple(repaired)


def merge_consecutive(
    stored: Sequence[StoredMessage],
) -> tuple[tuple[Message, ...], tuple[int | None, ...]]:
    """The outgoing messages, with consecutive same-role messages joined into one.

    A turn that failed after its user message leaves two user messages in a row; the API
    wants strict alternation, so the outgoing copy joins them (the store keeps both).
    Each joined message is anchored to the sequence number of its first part.
    """
    messages: list[Message] = []
    seqs: list[int | None] = []
    for item in stored:
        if messages and messages[-1].role == item.message.role:
            messages[-1] = joined(messages[-1], item.message)
            continue
        messages.append(item.message)
        seqs.append(item.seq)
    return tuple(messages), tuple(seqs)
