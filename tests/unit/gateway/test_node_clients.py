"""Real clients in other languages through ``hango serve``: the TypeScript SDK (node) and
Claude Code in print mode, both pinned and installed by ``.ci/node-clients``."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from tests.fakeapi import FakeAnthropicAPI, count_input_tokens, text_reply
from tests.gateway_support import RunningGateway, breakpoints, running_gateway, without_markers

NODE_DIR = Path(__file__).resolve().parents[3] / ".ci" / "node"
# The native binary in the platform package (its postinstall, which links it into bin/,
# is not run: .ci/node-clients installs with --ignore-scripts).
CLAUDE_PACKAGES = NODE_DIR / "node_modules" / "@anthropic-ai"
CLIENT_KEY = "sk-ant-node-client-9d3"
WINDOW = 60_000
ROUNDS = 20
# What the scripted model says each round: its reasoning, long enough (about 3,000 tokens)
# that 20 rounds cannot fit a 60k window without compaction (tool results alone would be
# shortened by hango's sticky tool-result truncation instead).
NOTES = 3_000 * 4


@pytest.fixture(scope="module", autouse=True)
def node_clients() -> None:
    """The pinned clients, installed by the same script CI runs (idempotent: a no-op once
    installed), so the README's test command needs nothing more on a machine with npm."""
    installer = NODE_DIR.parent / "node-clients"
    done = subprocess.run([str(installer)], capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        pytest.fail(f"{installer} failed (npm is needed):\n{done.stdout}{done.stderr}")


def _installed(path: Path) -> Path:
    if not path.exists():
        pytest.fail(f"{path} is missing: run .ci/node-clients (npm) first")
    return path


def claude_binary() -> Path:
    found = sorted(CLAUDE_PACKAGES.glob("claude-code-*/claude"))
    if not found:
        pytest.fail(f"no Claude Code binary under {CLAUDE_PACKAGES}: run .ci/node-clients first")
    return found[0]


TS_SCRIPT = """
const Anthropic = require("@anthropic-ai/sdk");
const client = new Anthropic({ apiKey: process.env.KEY, baseURL: process.env.BASE, maxRetries: 0 });
(async () => {
  const made = await client.messages.create({
    model: "claude-sonnet-4-5", max_tokens: 50,
    messages: [{ role: "user", content: "hello from node" }],
  });
  const stream = client.messages.stream({
    model: "claude-sonnet-4-5", max_tokens: 50,
    messages: [{ role: "user", content: "hello from node" },
               { role: "assistant", content: made.content },
               { role: "user", content: "stream it" }],
  });
  let text = "";
  stream.on("text", (delta) => { text += delta; });
  const final = await stream.finalMessage();
  console.log(JSON.stringify({ made: made.content[0].text, streamed: text,
                               stop: final.stop_reason }));
})().catch((error) => { console.error(error); process.exit(1); });
"""


def test_the_typescript_sdk_creates_and_streams_through_the_gateway(
    gateway: RunningGateway, upstream: FakeAnthropicAPI, tmp_path: Path
) -> None:
    _installed(NODE_DIR / "node_modules" / "@anthropic-ai" / "sdk")
    upstream.push(text_reply("made in node"), text_reply("streamed in node"))
    script = tmp_path / "client.js"
    script.write_text(TS_SCRIPT)
    env = {
        **os.environ,
        "KEY": CLIENT_KEY,
        "BASE": gateway.url,
        "NODE_PATH": str(NODE_DIR / "node_modules"),
    }
    done = subprocess.run(
        ["node", str(script)], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "made": "made in node",
        "streamed": "streamed in node",
        "stop": "end_turn",
    }
    first, second = upstream.message_requests()
    assert second.body["stream"] is True
    assert second.body["messages"][:1] == first.body["messages"]


class ClaudeCodeUpstream:
    """Drives Claude Code's main loop through ``ROUNDS`` Bash calls, then ends the turn.

    Requests of its main loop carry the Bash tool; anything else it asks on the side (a
    title, a topic) gets a short text answer.
    """

    def __init__(self) -> None:
        self.rounds = 0

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        if not any(t.get("name") == "Bash" for t in body.get("tools") or []):
            return text_reply("side answer")
        self.rounds += 1
        if self.rounds > ROUNDS:
            return text_reply("ALL ROUNDS DONE")
        return bash_round(self.rounds, f"seq 1 300; echo round {self.rounds}")


def bash_round(rounds: int, command: str) -> dict[str, Any]:
    """The scripted model's reply of one round: its long notes, then one Bash call."""
    line = f"round {rounds}: checked the output, the numbers look right; next step. "
    notes = {"type": "text", "text": (line * (NOTES // len(line) + 1))[:NOTES]}
    call = {
        "type": "tool_use",
        "id": f"toolu_cc_{rounds:03d}",
        "name": "Bash",
        "input": {"command": command, "description": f"round {rounds}"},
    }
    return {"content": [notes, call], "stop_reason": "tool_use"}


def run_claude_code(base_url: str, work: Path, home: Path) -> dict[str, Any]:
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": CLIENT_KEY,
        "DISABLE_TELEMETRY": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
    }
    done = subprocess.run(
        [str(claude_binary()), "-p", "run the rounds", "--output-format", "json",
         "--allowedTools", "Bash", "--max-turns", str(ROUNDS + 5)],
        cwd=work, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_claude_code_runs_a_long_tool_session_through_the_gateway(tmp_path: Path) -> None:
    for name in ("direct", "work", "home", "home-direct"):
        (tmp_path / name).mkdir()
    # Directly, on an upstream whose window takes the whole history: what Claude Code does.
    with FakeAnthropicAPI(window=10 * WINDOW, responder=ClaudeCodeUpstream()) as direct:
        alone = run_claude_code(direct.base_url, tmp_path / "direct", tmp_path / "home-direct")
        largest = max(count_input_tokens(r.body) for r in direct.message_requests())
    assert largest > WINDOW  # it would not fit the gateway's window uncompacted
    with (
        FakeAnthropicAPI(window=WINDOW, responder=ClaudeCodeUpstream()) as upstream,
        running_gateway(upstream.base_url, tmp_path / "hango", max_input_tokens=WINDOW) as gateway,
    ):
        result = run_claude_code(gateway.url, tmp_path / "work", tmp_path / "home")
        main = [r for r in upstream.message_requests() if r.body.get("tools")]
        assert len(main) == ROUNDS + 1
        for request in main:
            check_main_request(request.headers, request.body)
        sessions = _sessions(gateway)
    assert (result["is_error"], result["result"], result["num_turns"]) == (
        alone["is_error"],
        alone["result"],
        alone["num_turns"],
    )
    assert result["result"] == "ALL ROUNDS DONE"
    ((_, compactions, stored),) = sessions
    assert compactions >= 2  # the gateway compacted at least twice
    # Claude Code never compacted on its own: its history only grew, from its first
    # message, on one branch (a compaction of its own would have started a second).
    assert stored == 2 * ROUNDS + 2


def check_main_request(headers: dict[str, str], body: dict[str, Any]) -> None:
    assert headers["x-api-key"] == CLIENT_KEY
    assert "claude-code" in headers["anthropic-beta"]
    assert count_input_tokens(body) <= WINDOW
    assert body["system"][0]["text"].startswith("x-anthropic-billing-header")
    for field in ("thinking", "metadata", "context_management", "output_config"):
        assert field in body, field
    assert breakpoints(body) <= 4
    last = body["messages"][-1]
    results = [b for b in last["content"] if isinstance(b, dict) and b.get("type") == "tool_result"]
    for result in results:  # the newest tool result goes whole
        assert "\\n300\\n" in json.dumps(without_markers(result))


def _sessions(gateway: RunningGateway) -> list[tuple[str, int, int]]:
    query = text(
        "SELECT s.id, s.compactions, count(m.seq) FROM sessions s "
        "LEFT JOIN messages m ON m.session_id = s.id GROUP BY s.id, s.compactions"
    )
    with gateway.gateway.store.engine.connect() as conn:
        return [(r[0], r[1], r[2]) for r in conn.execute(query)]
