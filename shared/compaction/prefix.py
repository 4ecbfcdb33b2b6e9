"""The prefix route's request: the previous request as sent, plus the summary instruction.

Everything before the appended instruction stays as it was sent, ``tool_choice`` and the
thinking configuration too: changing either invalidates the cached messages
(https://platform.claude.com/docs/en/build-with-claude/prompt-caching). The instruction
asks for text without tools instead; a reply that calls a tool anyway is no summary (the
router then falls back to the range route).
"""

from __future__ import annotations

from hango.compaction.summary_prompt import SUMMARY_SYSTEM_PROMPT
from hango.core.messages import Message, Request, TextBlock

# How the instruction opens: what tells a prefix summary request from an agent's call.
PREFIX_OPENING = "[Context maintenance: this is not a step of the task.]"


def prefix_instruction(kept_verbatim: int, max_tokens: int | None) -> str:
    """The instruction appended to the previous request: summarize all but the newest
    ``kept_verbatim`` messages, in text, without tools."""
    length = f" Keep the briefing under {max_tokens} tokens." if max_tokens else ""
    replaced = (
        f"everything before its last {kept_verbatim} messages"
        if kept_verbatim
        else "all of it (the newest messages, which you have not seen, stay verbatim)"
    )
    return (
        f"{PREFIX_OPENING} The conversation above is "
        f"about to be shortened: {replaced}, including any earlier briefing at its start, "
        "will be replaced by a briefing. "
        "Do not call any tools and do not continue the work: answer in text only, with "
        "that briefing inside <summary></summary>. Instructions for the briefing:\n\n"
        f"{SUMMARY_SYSTEM_PROMPT}{length}"
    )


def prefix_request(sent: Request, instruction: str, max_tokens: int) -> Request:
    """``sent`` (one :func:`prefix_problem` passes) with ``instruction`` appended after its
    rolling breakpoint.

    Only the last message changes, by one text block after its marked last block: every
    byte through the breakpoint is the bytes the provider cached. ``max_tokens`` does not
    take part in the cache; with thinking on it stays as sent (it must exceed the budget).
    """
    messages = sent.sent_messages()  # with the breakpoints the provider cached
    appended = Message(role="user", content=(*messages[-1].blocks(), TextBlock(text=instruction)))
    thinking = (sent.model_extra or {}).get("thinking") is not None
    return sent.model_copy(
        update={
            "messages": (*messages[:-1], appended),
            "max_tokens": sent.max_tokens if thinking else max_tokens,
        }
    )


def prefix_problem(sent: Request) -> str | None:
    """Why ``sent`` cannot carry a prefix summary (``None``: it can)."""
    messages = sent.sent_messages()
    if not messages or messages[-1].role != "user":
        return "the previous request does not end with a user message"
    blocks = messages[-1].blocks()
    if not blocks or getattr(blocks[-1], "cache_control", None) is None:
        return "the previous request has no breakpoint on its last message"
    return None


def prefix_instruction_of(request: Request) -> str | None:
    """The summary instruction a prefix request ends with (``None``: not a prefix request)."""
    messages = request.sent_messages()
    if not messages or messages[-1].role != "user":
        return None
    blocks = messages[-1].blocks()
    last = blocks[-1] if blocks else None
    if isinstance(last, TextBlock) and last.text.startswith(PREFIX_OPENING):
        return last.text
    return None
