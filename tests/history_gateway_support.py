"""A scripted upstream that uses the gateway's history tool, and a client that drives it.

The client runs Bash rounds (each result about 3,600 characters, the first holding
:data:`SECRET`) until the session is compacted, which the upstream sees as the history
tool offered in the request. From then on the upstream follows a script of its own; the
gateway must answer the history calls and the client must never see them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import anthropic

from tests.gateway_support import tool_output

Body = dict[str, Any]

MODEL = "claude-sonnet-4-5"
WINDOW = 16_000  # the smallest window that offers the tool (wiring.agent)
HISTORY = "session_history"
SECRET = "ZX-4471-QUARTZ"
BASH = {"name": "Bash", "description": "run", "input_schema": {"type": "object"}}
QUESTION = "What was the value printed in round 1?"


def offered_tool(body: Body) -> str | None:
    """The gateway's history tool in ``body`` (it is put after the client's tools)."""
    tools = body.get("tools") or []
    last = tools[-1]["name"] if tools else ""
    return last if last == HISTORY or last.startswith("hango_session_history") else None


def internal_depth(messages: list[Any], name: str) -> int:
    """How many internal rounds end ``messages``: (assistant calling ``name``, results)."""
    depth = 0
    while len(messages) >= 2 * (depth + 1):
        assistant = messages[-2 * depth - 2]
        content = assistant.get("content") if isinstance(assistant, dict) else None
        calls = [b for b in content or [] if isinstance(b, dict) and b.get("type") == "tool_use"]
        if assistant.get("role") != "assistant" or not calls:
            return depth
        if any(call.get("name") != name for call in calls):
            return depth
        depth += 1
    return depth


def asks(body: Body, question: str) -> bool:
    """Whether the last message is the user's ``question`` (a string, or hango's one text
    block carrying its breakpoint)."""
    content = body["messages"][-1]["content"]
    if isinstance(content, list) and len(content) == 1 and content[0].get("type") == "text":
        content = content[0]["text"]
    return bool(content == question)


def last_result_text(body: Body) -> str:
    content = body["messages"][-1]["content"]
    return "\n".join(str(b.get("content")) for b in content if b.get("type") == "tool_result")


def bash_round(n: int) -> Body:
    call = {"type": "tool_use", "id": f"toolu_{n:03d}", "name": "Bash", "input": {"n": n}}
    return {"content": [{"type": "text", "text": f"round {n}"}, call], "stop_reason": "tool_use"}


def history_call(ident: str, name: str, **tool_input: Any) -> Body:
    return {"type": "tool_use", "id": ident, "name": name, "input": tool_input}


class LookupUpstream:
    """Bash rounds until the tool is offered; then, asked :data:`QUESTION`, it searches
    (round 1), reads the hit and searches again in parallel (round 2), then answers with
    one more history call beside a Bash call of the client's (the mixed case), and once
    the client answered that, says the value it read."""

    def __init__(self) -> None:
        self.bash = 0
        self.found: str | None = None
        self.history_requests: list[Body] = []

    def __call__(self, body: Body) -> Body:
        name = offered_tool(body)
        if name is None:
            self.bash += 1
            return bash_round(self.bash)
        depth = internal_depth(body["messages"], name)
        if depth:
            self.history_requests.append(body)
        return self._scripted(body, name, depth)

    def _scripted(self, body: Body, name: str, depth: int) -> Body:
        if depth == 0 and asks(body, QUESTION):
            call = history_call("toolu_h1", name, command="search", query=SECRET[:7])
            text = {"type": "text", "text": "Looking it up."}
            return {"content": [text, call], "stop_reason": "tool_use"}
        if depth == 1:
            read = history_call("toolu_h2", name, command="read", tool_use_id="toolu_001")
            search = history_call("toolu_h3", name, command="search", query="round 1")
            return {"content": [read, search], "stop_reason": "tool_use"}
        if depth == 2:
            match = re.search(r"ZX-\d+-[A-Z]+", last_result_text(body))
            self.found = match.group(0) if match else "nothing"
            again = history_call("toolu_h4", name, command="search", query="round 2")
            check = {"type": "tool_use", "id": "toolu_check", "name": "Bash", "input": {}}
            text = {"type": "text", "text": "Found it; checking."}
            return {"content": [text, again, check], "stop_reason": "tool_use"}
        return {"content": [{"type": "text", "text": f"The value was {self.found}."}]}


def bash_result(n: int) -> str:
    output = tool_output(n, 3600)
    return f"printed {SECRET}\n{output}" if n == 1 else output


Send = Callable[[list[Any]], anthropic.types.Message]


def sender(client: anthropic.Anthropic, session: str, streaming: bool) -> Send:
    """One client request with ``history``: ``messages.create`` or ``messages.stream``."""

    def send(history: list[Any]) -> anthropic.types.Message:
        fields: Any = {
            "model": MODEL,
            "max_tokens": 2000,
            "tools": [BASH],
            "messages": history,
            "extra_headers": {"x-hango-session": session},
        }
        if not streaming:
            return client.messages.create(**fields)
        with client.messages.stream(**fields) as stream:
            return stream.get_final_message()

    return send


def answer(history: list[Any], reply: anthropic.types.Message) -> None:
    """Append ``reply`` and the client's results for its Bash calls to ``history``."""
    history.append(
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]}
    )
    calls = [b for b in reply.content if b.type == "tool_use"]
    if calls:
        results = [
            {"type": "tool_result", "tool_use_id": c.id, "content": bash_result(int(c.id[6:]))}
            if c.id[6:].isdigit()
            else {"type": "tool_result", "tool_use_id": c.id, "content": "checked"}
            for c in calls
        ]
        history.append({"role": "user", "content": results})


def run_until_compacted(send: Send, upstream: LookupUpstream, limit: int = 40) -> list[Any]:
    """Bash rounds until the upstream was offered the history tool; the client's history."""
    history: list[Any] = [{"role": "user", "content": "run the rounds"}]
    for _ in range(limit):
        bash_before = upstream.bash
        reply = send(history)
        answer(history, reply)
        if upstream.bash == bash_before:
            return history
    raise AssertionError("the session never compacted")
