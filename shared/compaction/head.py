"""The message that opens a compacted request, rebuilt from the compaction record.

It is a pure function of the record, so every call of every later turn sends the same
bytes for it (the prompt cache depends on that), and a resumed process rebuilds it
exactly. With a summary it is the summary message; after a mechanical truncation with no
summary yet it is a short notice that points at the history file.
"""

from __future__ import annotations

from hango.compaction.record import CompactionRecord
from hango.compaction.summary_prompt import HISTORY_TOOL_NAME, build_summary_message
from hango.core.messages import Message, TextBlock

_NOTICE = (
    "[Context notice] {count} earlier messages of this session were removed from this "
    "request to fit the model's context window. {where}"
)

_REQUEST_QUOTE = (
    "The user's request that started turn {turn} is quoted here verbatim, because the "
    "messages above no longer hold it:\n<user_request>\n{text}\n</user_request>"
)


def head_message(record: CompactionRecord | None) -> Message:
    """The head of a request compacted by ``record`` (a notice when there is no record)."""
    head = _head_without_request(record)
    if record is None or record.user_request is None:
        return head
    quote = TextBlock(text=_REQUEST_QUOTE.format(turn=record.at_turn, text=record.user_request))
    return Message(role="user", content=(*head.blocks(), quote))


def _head_without_request(record: CompactionRecord | None) -> Message:
    if record is not None and record.summary and record.offload_path:
        saved_to = record.saved_to_seq
        message = build_summary_message(
            record.summary,
            offload_path=record.offload_path,
            artifacts=list(record.artifacts),
            saved_to=saved_to,
        )
        if saved_to >= record.kept_from_seq - 1:
            return message
        gap = TextBlock(text=_gap_note(saved_to + 1, record.kept_from_seq - 1))
        return Message(role="user", content=(*message.blocks(), gap))
    count = record.kept_from_seq - 1 if record else "Some"
    if record is not None and record.offload_path:
        where = (
            f"Their full transcript is saved at {record.offload_path}; use the read_file "
            f"tool or {HISTORY_TOOL_NAME} to recover details."
        )
        if record.saved_to_seq < record.kept_from_seq - 1:
            where += " " + _gap_note(record.saved_to_seq + 1, record.kept_from_seq - 1)
    else:
        where = f"They remain in the stored transcript ({HISTORY_TOOL_NAME} reads them)."
    return Message(role="user", content=_NOTICE.format(count=count, where=where))


def _gap_note(first: int, last: int) -> str:
    return (
        f"Messages {first} to {last} could not be written to the history file; they remain "
        f"only in the stored transcript ({HISTORY_TOOL_NAME} reads them)."
    )
