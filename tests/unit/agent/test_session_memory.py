"""The loop's per-session memory is bounded, and a session it forgot is read back whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from hango.agent import loop as loop_module
from hango.providers.scripted import text_reply
from tests.agent_support import build


def test_a_loop_keeps_its_most_recent_sessions_only_and_reads_a_forgotten_one_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loop_module, "SESSIONS_REMEMBERED", 2)
    agent, provider = build(tmp_path, [text_reply(f"answer {n}") for n in range(8)])
    loop = agent.loop
    for session in ("a", "b", "c"):
        loop.run_turn(session, f"hello from {session}")
    assert len(loop._memory) == 2  # "a" is forgotten

    loop.run_turn("a", "again from a")
    sent = provider.requests[-1]
    assert [m.text() for m in sent.messages] == ["hello from a", "answer 0", "again from a"]
    assert len(loop._memory) == 2

    # The same turn from a loop that never forgot sends the very same request.
    fresh, fresh_provider = build(
        tmp_path / "other", [text_reply("answer 0"), text_reply("answer 1")]
    )
    fresh.loop.run_turn("a", "hello from a")
    fresh.loop.run_turn("a", "again from a")
    assert fresh_provider.requests[-1].to_api() == sent.to_api()
