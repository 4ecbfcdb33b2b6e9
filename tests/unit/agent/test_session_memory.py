"""The loop's per-session memory is bounded, and a session it forgot is read back whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from hango.agent import loop as loop_module
from hango.providers.scripted import text_reply
from hango.wiring.agent import Agent
from tests.agent_support import build, dumps, writer_reply


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


TURNS = 26
# Each turn writes a large file, then answers: a compaction every few turns.
LONG_REPLIES = [r for n in range(TURNS) for r in (writer_reply(n, 1500), text_reply(f"done {n}"))]


def _long_session(agent_dir: Path, turns: int, *, forgetting: bool) -> tuple[list[str], Agent]:
    """The bodies of every request of ``turns`` turns answered by ``LONG_REPLIES``.

    ``forgetting``: the loop forgets the session before each turn, so every turn reads
    the whole session back from the store (the path that keeps nothing in memory)."""
    # Every summary made at the trigger: a pre-summary's thread would race the turns, and
    # the two runs could compact at different points on a loaded machine.
    agent, provider = build(agent_dir, list(LONG_REPLIES), context_presummarize_frac=1)
    for n in range(turns):
        if forgetting:
            agent.loop.forget("s")
        agent.loop.run_turn("s", f"task {n}: write file {n}")
    return [dumps(request) for request in provider.requests], agent


def test_the_loop_drops_from_memory_the_messages_before_the_latest_kept_part(
    tmp_path: Path,
) -> None:
    sent, agent = _long_session(tmp_path / "kept", TURNS, forgetting=False)
    state = agent.store.latest_state("s")
    assert state.compaction_count >= 2
    assert state.latest is not None
    memory = agent.loop._memory.get("s", lambda: pytest.fail("the session was forgotten"))
    # Every later request starts at the kept part: nothing before it is held.
    assert memory.transcript[0].seq >= state.latest.kept_from_seq
    assert memory.transcript[-1].seq == len(agent.store.messages("s"))

    # Every request is the one a loop that reads the whole session back each turn sends.
    reread, _ = _long_session(tmp_path / "reread", TURNS, forgetting=True)
    assert sent == reread


def test_a_state_older_than_the_trim_reads_the_dropped_messages_back(tmp_path: Path) -> None:
    """A turn whose append failed goes back to the state it began with, whose kept part
    may start before what memory dropped since: those messages come from the store."""
    _, agent = _long_session(tmp_path, TURNS, forgetting=False)
    loop = agent.loop
    ctx = loop.begin_turn("s")
    assert ctx.memory.dropped > 0
    transcript, first = loop._kept_part(ctx, 1)
    assert first == 0
    assert [m.seq for m in transcript] == [m.seq for m in agent.store.messages("s")]
    loop.end_turn(ctx)
