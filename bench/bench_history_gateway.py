"""Stress: streamed turns through ``hango serve`` whose upstream calls the history tool.

Sessions run Bash rounds on a loopback scripted upstream (``tests.fakeapi``) at a 16k
window until the gateway compacts them and offers the history tool; then every client
request is a scripted turn in which the upstream calls the tool: 1 to 5 rounds of 1 or 2
parallel calls (search, read of a range, read of a tool result, and a read of an unknown
id that the tool answers with an error), text and thinking blocks before the calls, and an
end chosen at random: text (``end_turn``), the client's own Bash call beside one more
history call (the mixed case), or more history calls than the gateway's limit of 4
internal rounds allows. Each session is one client thread, several at once.

Every answer is read as raw server-sent events and checked: a **leaked tool block** is a
block calling the history tool (or any block whose id the script gave a history call);
an **invalid event sequence** is one ``tests.sse_check.sequence_problems`` rejects (one
message; blocks indexed 0, 1, 2, … in order, each started, its own deltas, stopped;
``message_delta`` then ``message_stop``). Both must be 0. The client's transcript (the
messages it sends back) is checked too, and the upstream's requests: every internal round
must carry the tool's results for the calls of the round before.

Run: ``python -m bench.bench_history_gateway [--sessions 20] [--turns 50] [--threads 4]
[--json PATH]``.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx2

from hango.gateway.sse import MessageBuilder, parse_event
from tests.fakeapi import FakeAnthropicAPI
from tests.gateway_support import running_gateway, tool_output
from tests.history_gateway_support import (
    BASH,
    HISTORY,
    MODEL,
    WINDOW,
    bash_round,
    history_call,
    internal_depth,
    offered_tool,
)
from tests.sse_check import leaked_blocks, parse_sse, sequence_problems

LIMIT = 4  # the gateway's default internal rounds per client request
KEY = "sk-ant-bench-history"


class RandomUpstream:
    """Bash rounds until the tool is offered; then a random script per client request."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.internal_requests = 0
        self.unanswered = 0  # internal rounds whose request lacks a result for a call

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        name = offered_tool(body)
        messages = body["messages"]
        if name is None:
            return bash_round(_bash_number(messages))
        depth = internal_depth(messages, name)
        if depth:
            self._check_round(messages)
        opening = json.dumps(messages[len(messages) - 2 * depth - 1], sort_keys=True)
        script = random.Random(f"{opening}")
        rounds = script.choice([1, 1, 2, 3, LIMIT + 1])
        return _answer(script, name, depth, rounds)

    def _check_round(self, messages: list[Any]) -> None:
        calls = {b["id"] for b in messages[-2]["content"] if b.get("type") == "tool_use"}
        results = {b["tool_use_id"] for b in messages[-1]["content"]}
        with self.lock:
            self.internal_requests += 1
            self.unanswered += len(calls - results)


def _bash_number(messages: list[Any]) -> int:
    return sum(1 for m in messages if m["role"] == "assistant") + 1


def _answer(script: random.Random, name: str, depth: int, rounds: int) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = []
    if script.random() < 0.5:
        blocks.append({"type": "text", "text": f"step {depth}: " + "x" * script.randint(0, 80)})
    if script.random() < 0.2:
        blocks.insert(0, {"type": "thinking", "thinking": "hmm", "signature": "c2ln"})
    if depth < rounds:
        calls = [_history_call(script, name, depth, n) for n in range(script.randint(1, 2))]
        return {"content": blocks + calls, "stop_reason": "tool_use"}
    ending = script.choice(["text", "mixed"])
    if ending == "mixed":
        ident = f"toolu_bash_{script.randint(0, 10**9)}"
        bash = {"type": "tool_use", "id": ident, "name": "Bash", "input": {}}
        extra = _history_call(script, name, depth, 9)
        return {"content": [*blocks, extra, bash], "stop_reason": "tool_use"}
    return {"content": [*blocks, {"type": "text", "text": "done"}], "stop_reason": "end_turn"}


def _history_call(script: random.Random, name: str, depth: int, n: int) -> dict[str, Any]:
    ident = f"toolu_h{depth}_{n}_{script.randint(0, 10**9)}"
    choice = script.choice(["search", "read", "result", "unknown"])
    if choice == "search":
        return history_call(ident, name, command="search", query=script.choice(["round", "Bash"]))
    if choice == "read":
        first = script.randint(1, 8)
        return history_call(ident, name, command="read", from_seq=first, to_seq=first + 1)
    tool_use_id = "toolu_001" if choice == "result" else "toolu_nowhere"
    return history_call(ident, name, command="read", tool_use_id=tool_use_id)


class Counts:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.turns = 0
        self.leaked = 0
        self.invalid = 0
        self.transcript_leaks = 0
        self.problems: list[str] = []

    def add(self, events: list[tuple[str, dict[str, Any]]], history: list[Any]) -> None:
        problems = sequence_problems(events)
        leaked = leaked_blocks(events, (HISTORY,)) + sum(
            1
            for name, data in events
            if name == "content_block_start"
            and str(data["content_block"].get("id", "")).startswith("toolu_h")
        )
        with self.lock:
            self.turns += 1
            self.leaked += leaked
            self.invalid += bool(problems)
            self.transcript_leaks += HISTORY in json.dumps(history)
            self.problems.extend(problems[:1])


def _stream(http: httpx2.Client, url: str, session: str, history: list[Any]) -> bytes:
    body = {
        "model": MODEL,
        "max_tokens": 1000,
        "tools": [BASH],
        "messages": history,
        "metadata": {"user_id": session},
    }
    headers = {"x-api-key": KEY, "x-hango-session": session, "anthropic-version": "2023-06-01"}
    with http.stream(
        "POST", f"{url}/v1/messages", json={**body, "stream": True}, headers=headers
    ) as reply:
        reply.raise_for_status()
        return b"".join(reply.iter_raw())


def _append(history: list[Any], events: list[tuple[str, dict[str, Any]]]) -> bool:
    """Add the answer (and the client's Bash results) to ``history``; whether it ran Bash."""
    builder = MessageBuilder()
    for name, data in events:
        builder.add(parse_event(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()))
    message = builder.response()
    assert message is not None
    content = [b.to_api() for b in message.content]
    history.append({"role": "assistant", "content": content or [{"type": "text", "text": "-"}]})
    calls = [b for b in content if b.get("type") == "tool_use"]
    if calls:
        results = [_bash_result(call["id"]) for call in calls]
        history.append({"role": "user", "content": results})
    return bool(calls)


def _bash_result(ident: str) -> dict[str, Any]:
    number = int(ident[6:]) if ident[6:].isdigit() else 0
    return {"type": "tool_result", "tool_use_id": ident, "content": tool_output(number, 3600)}


def _session(url: str, session: str, turns: int, upstream: Any, counts: Counts) -> int:
    """Compact the session, then run ``turns`` scripted turns; the Bash rounds it took."""
    history: list[Any] = [{"role": "user", "content": "run the rounds"}]
    with httpx2.Client(timeout=60) as http:
        bash = 0
        while upstream.offered_for(session) is False and bash < 40:
            _append(history, parse_sse(_stream(http, url, session, history)))
            bash += 1
        for turn in range(turns):
            if history[-1]["role"] == "assistant":
                history.append({"role": "user", "content": f"{session}: turn {turn}"})
            events = parse_sse(_stream(http, url, session, history))
            _append(history, events)
            counts.add(events, history)
    return bash


class TrackedUpstream(RandomUpstream):
    """Remembers which sessions were offered the tool (the client's name is in the body)."""

    def __init__(self) -> None:
        super().__init__()
        self.offered: set[str] = set()

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        if offered_tool(body) is not None:
            with self.lock:
                self.offered.add(str(body.get("metadata", {}).get("user_id")))
        return super().__call__(body)

    def offered_for(self, session: str) -> bool:
        with self.lock:
            return session in self.offered


def run(sessions: int, turns: int, threads: int) -> dict[str, Any]:
    upstream = TrackedUpstream()
    counts = Counts()
    with (
        tempfile.TemporaryDirectory() as scratch,
        FakeAnthropicAPI(window=WINDOW, responder=upstream) as api,
        running_gateway(api.base_url, Path(scratch), max_input_tokens=WINDOW) as gateway,
    ):
        started = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            names = [f"s{n}" for n in range(sessions)]
            bash = list(
                pool.map(lambda s: _session(gateway.url, s, turns, upstream, counts), names)
            )
        elapsed = time.perf_counter() - started
        requests = len(api.message_requests())
    return {
        "streamed_turns_with_the_tool_offered": counts.turns,
        "leaked_tool_blocks": counts.leaked,
        "invalid_event_sequences": counts.invalid,
        "client_transcripts_naming_the_tool": counts.transcript_leaks,
        "internal_round_requests": upstream.internal_requests,
        "history_calls_without_a_result": upstream.unanswered,
        "upstream_requests": requests,
        "bash_rounds_to_compact_per_session": sorted(set(bash)),
        "seconds": round(elapsed, 1),
        "first_problems": counts.problems[:5],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args(argv)
    results = run(args.sessions, args.turns, args.threads)
    print(json.dumps(results, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
