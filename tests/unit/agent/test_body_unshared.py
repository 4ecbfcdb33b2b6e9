"""Nothing handed to the provider is shared with the session's later requests.

A provider (or the SDK under it) that changes the body it was given, every dict and list
in it, must not change what the session sends next: the next request is byte-equal to
the one a fresh process, reading the same store, sends.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from hango.core.messages import Request, Response
from hango.providers.base import Provider
from hango.providers.scripted import text_reply
from tests.agent_support import build, writer_reply

ROOT = Path(__file__).resolve().parents[3]

FRESH = """
import base64, sys
from pathlib import Path
from hango.providers.scripted import text_reply
from hango.store import Store
from tests.agent_support import build

root = Path(sys.argv[1])
agent, provider = build(root, [text_reply("done")], caching=True)
agent.loop.run_turn("s", "and now?")
sys.stdout.write(base64.b64encode(provider.requests[-1].api_bytes()).decode())
"""


def scribble(node: Any) -> int:
    """Change every dict and list in ``node``, in place; how many were changed."""
    changed = 0
    if isinstance(node, dict):
        for key, value in list(node.items()):
            changed += scribble(value)
            if isinstance(value, str):
                node[key] = value + " (changed)"
        node["scribbled"] = True
        changed += 1
    elif isinstance(node, list):
        for item in node:
            changed += scribble(item)
        node.append("scribbled")
        changed += 1
    return changed


class Scribbling:
    """The provider it wraps, changing everything in each body it is handed first."""

    def __init__(self, inner: Provider) -> None:
        self.inner = inner
        self.scribbled = 0

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def capabilities(self) -> Any:
        return self.inner.capabilities

    def complete(self, request: Request) -> Response:
        self.scribbled += scribble(json.loads(request.api_bytes()))
        return self.inner.complete(request)


def test_changing_every_container_of_a_sent_body_changes_nothing_sent_later(
    tmp_path: Path,
) -> None:
    session = tmp_path / "session"
    agent, provider = build(session, caching=True)
    scribbling = Scribbling(agent.loop.provider)
    agent.loop.provider = scribbling
    for turn in range(5):
        provider.push(*(writer_reply(10 * turn + i) for i in range(6)))
        provider.push(text_reply(f"turn {turn} done"))
        agent.loop.run_turn("s", f"write files, part {turn}")
    # A fresh process gets a copy of the store and the history files as they are now.
    fresh = tmp_path / "fresh"
    shutil.copytree(session, fresh)
    provider.push(text_reply("done"))

    agent.loop.run_turn("s", "and now?")

    assert scribbling.scribbled > 100  # every body was changed all over, the last one too
    assert agent.store.latest_state("s").compaction_count > 0  # the copy was rebuilt too
    sent = provider.requests[-1].api_bytes()
    out = subprocess.run(
        [sys.executable, "-c", FRESH, str(fresh)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert base64.b64decode(out.stdout) == sent
