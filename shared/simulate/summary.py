"""The scripted model's answer to a summarizer request.

The summary goes through the same provider path as a real deployment's, so it must look
like one: the sections the summary prompt asks for, with the identifiers the transcript
holds copied verbatim (paths, tickets, commands, function names), the way the prompt's
identifier-preservation clause demands. Deterministic: the same request gives the same
summary.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from hango.compaction.prefix import prefix_instruction_of
from hango.compaction.summary_prompt import SUMMARY_SECTIONS
from hango.core.messages import Request

_PATH = re.compile(r"/(?:work|conversation_history|large_tool_results)/[\w./-]+\w")
_TICKET = re.compile(r"\bHANGO-\d+\b")
_COMMAND = re.compile(r"\b(?:pytest [\w/.-]+ -q|make \w+|grep -rn \w+ [\w/.-]+)")
_FUNCTION = re.compile(r"\bdef (\w+)\(")
_REQUEST = re.compile(r"^\[seq \d+\] USER:\n(?!\[tool result)(.+)$", re.MULTILINE)
_FAILED = re.compile(r"^FAILED (\S+)", re.MULTILINE)
_LISTED = 12


def is_summary_request(request: Request) -> bool:
    """A summarizer call carries no tools (the summary prompt forbids tool calls), or is the
    agent's own previous request with the summary instruction appended (the prefix route)."""
    return not request.tool_definitions() or prefix_instruction_of(request) is not None


def scripted_summary(request: Request) -> str:
    """A briefing in the summary prompt's sections, built from what the request shows."""
    text = "\n".join(message.text() for message in request.messages)
    paths = _unique(_PATH.findall(text))
    requests = _unique(_REQUEST.findall(text))
    failures = _unique(_FAILED.findall(text))
    body = {
        "Goal and user requests": _bullets(requests[-_LISTED:]) or "None.",
        "Current state": _state(paths, _unique(_TICKET.findall(text))),
        "Files and artifacts": _bullets(f"`{path}`" for path in paths[-_LISTED:]) or "None.",
        "Decisions": _bullets(
            f"`{name}` is part of the public surface"
            for name in _unique(_FUNCTION.findall(text))[-6:]
        )
        or "None.",
        "Errors and fixes": _bullets(
            f"`{test}` failed; the module was edited and re-run" for test in failures
        )
        or "None.",
        "Open questions": "None.",
        "Next step": _next_step(_unique(_COMMAND.findall(text))),
    }
    return "\n".join(f"## {title}\n{body.get(title, 'None.')}\n" for title in SUMMARY_SECTIONS)


def _state(paths: list[str], tickets: list[str]) -> str:
    written = [path for path in paths if path.startswith("/work/")]
    lines = [f"Worked on {len(written)} files in the workspace."]
    if tickets:
        lines.append("Tickets mentioned: " + ", ".join(tickets) + ".")
    return "\n".join(lines)


def _next_step(commands: list[str]) -> str:
    if not commands:
        return "Wait for the user's next request."
    return f"Re-run `{commands[-1]}` to confirm the last change still passes, then report."


def _bullets(items: Iterable[str]) -> str:
    return "\n".join(f"- {item.strip()[:300]}" for item in items)


def _unique(found: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(found))
