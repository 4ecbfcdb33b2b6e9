"""The gateway's history tool seen from the TypeScript SDK and Claude Code (both pinned,
installed by ``.ci/node-clients``): their streams stay valid and their transcripts never
hold the tool, while the upstream recovers an evicted value with it."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import anthropic

from hango.compaction.extractive import RESULT_CHARS
from tests.fakeapi import FakeAnthropicAPI, count_input_tokens, text_reply
from tests.gateway_support import running_gateway
from tests.history_gateway_support import (
    HISTORY,
    QUESTION,
    SECRET,
    WINDOW,
    LookupUpstream,
    history_call,
    internal_depth,
    last_result_text,
    offered_tool,
    run_until_compacted,
    sender,
)
from tests.unit.gateway.test_node_clients import (
    NODE_DIR,
    ROUNDS,
    _installed,
    bash_round,
    check_main_request,
    node_clients,  # noqa: F401  (its autouse fixture installs the clients)
    run_claude_code,
)
from tests.unit.gateway.test_node_clients import WINDOW as CLAUDE_CODE_WINDOW

KEY = "sk-ant-node-client-9d3"  # the key run_claude_code gives Claude Code

TS_LOOKUP = """
const fs = require("fs");
const Anthropic = require("@anthropic-ai/sdk");
const client = new Anthropic({ apiKey: process.env.KEY, baseURL: process.env.BASE, maxRetries: 0 });
(async () => {
  const body = JSON.parse(fs.readFileSync(process.env.BODY, "utf8"));
  const stream = client.messages.stream(body, { headers: { "x-hango-session": "ts" } });
  const final = await stream.finalMessage();
  console.log(JSON.stringify(final));
})().catch((error) => { console.error(error); process.exit(1); });
"""


def test_the_typescript_sdk_streams_a_lookup_without_seeing_the_tool(tmp_path: Path) -> None:
    _installed(NODE_DIR / "node_modules" / "@anthropic-ai" / "sdk")
    script = LookupUpstream()
    with (
        FakeAnthropicAPI(window=WINDOW, responder=script) as upstream,
        running_gateway(upstream.base_url, tmp_path / "hango", max_input_tokens=WINDOW) as gw,
        anthropic.Anthropic(api_key=KEY, base_url=gw.url, max_retries=0) as client,
    ):
        history = run_until_compacted(sender(client, "ts", True), script)
        history.append({"role": "user", "content": QUESTION})
        body = {"model": "claude-sonnet-4-5", "max_tokens": 2000, "messages": history}
        body["tools"] = [{"name": "Bash", "description": "run", "input_schema": {"type": "object"}}]
        (tmp_path / "body.json").write_text(json.dumps(body))
        (tmp_path / "client.js").write_text(TS_LOOKUP)
        env = {
            **os.environ,
            "KEY": KEY,
            "BASE": gw.url,
            "BODY": str(tmp_path / "body.json"),
            "NODE_PATH": str(NODE_DIR / "node_modules"),
        }
        done = subprocess.run(
            ["node", str(tmp_path / "client.js")], env=env, capture_output=True, text=True,
            timeout=60,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    final = json.loads(done.stdout)
    assert [b["type"] for b in final["content"]] == ["text", "text", "tool_use"]
    assert final["content"][2]["name"] == "Bash" and final["stop_reason"] == "tool_use"
    assert HISTORY not in done.stdout and "toolu_h" not in done.stdout
    assert SECRET in json.dumps(script.history_requests[0]["messages"][-1])


class ClaudeCodeLookup:
    """Claude Code's main loop: Bash rounds (the first prints :data:`SECRET`), then, with the
    session compacted, a search of the history tool and an answer naming what it found."""

    def __init__(self) -> None:
        self.rounds = 0
        self.before_lookup: dict[str, Any] | None = None

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        if not any(t.get("name") == "Bash" for t in body.get("tools") or []):
            return text_reply("side answer")
        name = offered_tool(body)
        if self.rounds >= ROUNDS and name is not None:
            return self._lookup(body, name)
        self.rounds += 1
        if self.rounds > ROUNDS:
            return text_reply("NOT OFFERED")
        # The value is printed after ~1,100 characters of numbers: a summary of the evicted
        # rounds may quote the head of each latest tool result (the extractive digest's
        # RESULT_CHARS), so only a value past that head is evicted whichever range holds it.
        echo = f"; echo {SECRET}" if self.rounds == 1 else ""
        return bash_round(self.rounds, f"seq 1 300{echo}; echo round {self.rounds}")

    def _lookup(self, body: dict[str, Any], name: str) -> dict[str, Any]:
        if internal_depth(body["messages"], name) == 0:
            self.before_lookup = body
            call = history_call("toolu_cc_h1", name, command="search", query=SECRET[:7])
            return {"content": [call], "stop_reason": "tool_use"}
        found = re.search(r"ZX-\d+-[A-Z]+", last_result_text(body))
        return text_reply(f"RECOVERED {found.group(0) if found else 'nothing'}")


def test_claude_code_finishes_a_session_in_which_the_upstream_recovered_an_evicted_value(
    tmp_path: Path,
) -> None:
    for name in ("work", "home"):
        (tmp_path / name).mkdir()
    lookup = ClaudeCodeLookup()
    with (
        FakeAnthropicAPI(window=CLAUDE_CODE_WINDOW, responder=lookup) as upstream,
        running_gateway(
            upstream.base_url, tmp_path / "hango", max_input_tokens=CLAUDE_CODE_WINDOW
        ) as gateway,
    ):
        result = run_claude_code(gateway.url, tmp_path / "work", tmp_path / "home")
        main = [r for r in upstream.message_requests() if r.body.get("tools")]
        for request in main:
            if offered_tool(request.body) and internal_depth(request.body["messages"], HISTORY):
                # An internal round: its newest result is the tool's, not a Bash output.
                assert count_input_tokens(request.body) <= CLAUDE_CODE_WINDOW
                continue
            check_main_request(request.headers, request.body)
    assert (result["is_error"], result["result"]) == (False, f"RECOVERED {SECRET}")
    assert lookup.before_lookup is not None
    # Bash printed the value past the head a summary may quote; a request held that output.
    printed = [t for t in map(last_result_text, (r.body for r in main)) if SECRET in t]
    assert printed and printed[0].index(SECRET) > RESULT_CHARS
    # The value was evicted: the request that asked the tool did not hold it.
    assert SECRET not in json.dumps(lookup.before_lookup)
    # Claude Code's own transcript of the session never names the tool.
    transcripts = list((tmp_path / "home").rglob("*.jsonl"))
    assert transcripts
    for path in transcripts:
        assert HISTORY not in path.read_text(), path
