"""The history tool over sessions replayed at a window that forces compaction.

Generated coding sessions (paths, commands, symbols, error text, URLs, a Windows path,
non-ASCII text) are replayed with ``hango replay`` into a kept SQLite database; then every
evicted message must read back through the tool exactly as the transcript had it, every
tool result by its id, and every identifier of the artifact index over the evicted
messages must be found by search in the first five hits.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
from pathlib import Path
from typing import Any

import pytest

from hango.cli import main as hango
from hango.core.messages import Message
from hango.store import Store
from tests.history_reading import evicted_to, expected_payload, probe_session

WINDOW = 8_000


def coding_session(seed: int, steps: int = 36) -> list[dict[str, Any]]:
    """A transcript in the Messages API shape: user tasks, tool calls and their results."""
    rng = random.Random(seed)
    messages: list[dict[str, Any]] = []
    for step in range(steps):
        if step % 9 == 0:
            task = f"Task {step}: fix issue #{rng.randrange(1000, 9999)} in pkg_{step} — naïve café"
            if messages:  # the previous turn ends with the model's answer
                messages.append({"role": "assistant", "content": [_text(f"Part {step} done.")]})
            messages.append({"role": "user", "content": [_text(task)]})
        call_id = f"toolu_{seed}_{step:03d}"
        name, arguments, output = _tool_step(rng, step)
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": f"Step {step}: running {name}."},
                    {"type": "tool_use", "id": call_id, "name": name, "input": arguments},
                ],
            }
        )
        result = {"type": "tool_result", "tool_use_id": call_id, "content": output}
        if "FAILED" in output:
            result["is_error"] = True
        messages.append({"role": "user", "content": [result]})
    messages.append({"role": "assistant", "content": [_text("Done.")]})
    return messages


def _text(text: str) -> dict[str, str]:
    return {"type": "text", "text": text}


def _tool_step(rng: random.Random, step: int) -> tuple[str, dict[str, Any], str]:
    module = f"/repo/src/pkg_{rng.randrange(6)}/mod_{step}.py"
    symbol = f"handle_{rng.choice(['retry', 'parse', 'flush'])}_{step}"
    body = "\n".join(f"    value_{n} = compute_{n}({n})" for n in range(rng.randrange(5, 40)))
    kind = step % 5
    if kind == 0:
        return "Read", {"file_path": module}, f"def {symbol}():\n{body}\n"
    if kind == 1:
        command = f"pytest tests/test_mod_{step}.py -k {symbol} > /tmp/run_{step}.log 2>&1"
        error = f"FAILED tests/test_mod_{step}.py::{symbol} - KeyError: 'k{step:x}'"
        return "Bash", {"command": command}, f"{body}\n{error}\n"
    if kind == 2:
        edit = {"file_path": module, "old_string": f"def {symbol}():", "new_string": "def x():"}
        return "Edit", edit, "The file has been updated."
    if kind == 3:
        return "WebFetch", {"url": f"https://docs.example.org/api/v{step}#{symbol}"}, body
    windows = f"C:\\work\\pkg_{step}\\notes {step}.txt"
    return "Write", {"file_path": windows, "content": f"Notes: {body}"}, "Written."


def replay_kept(tmp_path: Path, messages: list[dict[str, Any]]) -> tuple[Store, str]:
    transcript = tmp_path / "session.json"
    transcript.write_text(json.dumps({"system": [], "tools": [], "messages": messages}))
    database = f"sqlite:///{tmp_path / 'kept.db'}"
    arguments = ["replay", str(transcript), "--json", "--max-input-tokens", str(WINDOW)]
    arguments += ["--database-url", database, "--history-root", str(tmp_path / "history")]
    with contextlib.redirect_stdout(io.StringIO()):
        assert hango(arguments) == 0
    store = Store.from_url(database)
    [session] = store.sessions()
    return store, session.id


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_evicted_message_reads_back_exactly_and_every_artifact_is_found(
    tmp_path: Path, seed: int
) -> None:
    messages = coding_session(seed)
    store, session_id = replay_kept(tmp_path, messages)
    try:
        last_evicted = evicted_to(store, session_id)
        # Compaction did evict most of the session, more than once.
        assert last_evicted > len(messages) // 2
        assert sum(len(run.state.compactions) for run in store.runs(session_id)) >= 2
        stored = store.messages(session_id)
        # The store holds what the transcript said (nothing was offloaded at this size).
        originals = [Message.model_validate(m) for m in messages]
        assert [m.message for m in stored] == originals
        probe = probe_session(store, session_id, page_chars=1_000)
    finally:
        store.engine.dispose()
    assert (probe.evicted, probe.read_exact) == (last_evicted, last_evicted)
    assert probe.results > 10 and probe.results_exact == probe.results
    assert probe.identifiers > 20 and probe.misses == []
    assert probe.found_top5 == probe.identifiers
    assert probe.error_lines > 0 and probe.error_lines_top5 == probe.error_lines
    # The probe compares with the store; the store with the transcript, block by block.
    assert expected_payload(originals[1].blocks()[1]) == json.dumps(
        messages[1]["content"][1]["input"], ensure_ascii=False
    )
