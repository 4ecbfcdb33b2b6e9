"""``hango chat`` against the loopback Messages API, with stdin fed by the test."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from hango.cli import main
from hango.cli.errors import EXIT_PROVIDER
from hango.compaction.record import RunState
from hango.compaction.summary_prompt import SUMMARY_SYSTEM_PROMPT
from hango.core.messages import Message
from hango.history.local import LocalHistory
from hango.history.paths import conversation_history_path
from hango.wiring.agent import open_store
from tests.agent_support import make_settings
from tests.fakeapi import FakeAnthropicAPI, fake_api, text_reply, tool_use_reply

__all__ = ["fake_api"]  # the fixture, imported so pytest finds it here

MODEL = "chat-test-model"


@pytest.fixture
def chat_env(fake_api: FakeAnthropicAPI, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.setenv("HANGO_ANTHROPIC_BASE_URL", fake_api.base_url)
    monkeypatch.setenv("HANGO_MODEL", MODEL)
    monkeypatch.setenv("HANGO_DATABASE_URL", f"sqlite:///{tmp_path / 'chat.db'}")
    monkeypatch.setenv("HANGO_HISTORY_ROOT", str(tmp_path / "history"))
    monkeypatch.setenv("HANGO_ESTIMATOR", "heuristic")
    monkeypatch.setenv("HANGO_PROVIDER_MAX_RETRIES", "0")
    monkeypatch.delenv("HANGO_REDIS_URL", raising=False)
    return tmp_path


def chat(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], typed: str, *argv: str
) -> tuple[int, str, str]:
    monkeypatch.setattr("sys.stdin", io.StringIO(typed))
    code = main(["chat", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_each_line_is_a_turn_with_the_file_tools(
    chat_env: Path,
    fake_api: FakeAnthropicAPI,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake_api.push(
        text_reply("Hello! What shall we write?"),
        tool_use_reply(
            ("toolu_1", "write_file", {"path": "/notes/plan.md", "content": "step one"})
        ),
        text_reply("Saved the plan."),
    )

    code, out, err = chat(
        monkeypatch, capsys, "hi\n\nwrite the plan\n/exit\nnever read\n", "--session", "c1"
    )

    assert code == 0, err
    assert out.splitlines() == ["Hello! What shall we write?", "Saved the plan."]
    assert "session c1" in err and "turn 2:" in err and "1 tools" in err
    assert LocalHistory(chat_env / "history").read("/notes/plan.md") == "step one"
    sent = fake_api.message_requests()
    assert len(sent) == 3  # the empty line and everything after /exit were not sent
    assert {"read_file", "write_file", "edit_file", "ls", "compact_conversation"} <= {
        tool["name"] for tool in sent[0].body["tools"]
    }
    assert sent[-1].body["messages"][-1]["content"][0]["tool_use_id"] == "toolu_1"


def test_resume_sends_the_earlier_conversation(
    chat_env: Path,
    fake_api: FakeAnthropicAPI,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake_api.push(text_reply("first answer"), text_reply("second answer"))
    chat(monkeypatch, capsys, "remember the code word heron\n", "--session", "c2")

    code, out, _ = chat(monkeypatch, capsys, "what was the code word?\n", "--session", "c2")

    assert code == 0 and out == "second answer\n"
    resumed = fake_api.message_requests()[-1].body["messages"]
    assert [m["role"] for m in resumed] == ["user", "assistant", "user"]
    assert "heron" in json.dumps(resumed[0])


def test_a_small_window_compacts_through_the_api_summarizer(
    chat_env: Path,
    fake_api: FakeAnthropicAPI,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The window must leave room for a conversation beside the file tools' definitions
    # and system block (a 3,000-token window cannot hold even the newest group).
    monkeypatch.setenv("HANGO_MODEL_PROFILES", json.dumps({MODEL: {"max_input_tokens": 6000}}))
    fake_api.responder = lambda body: text_reply(
        "## Goal and user requests\n- keep notes" if "tools" not in body else "noted"
    )
    lines = "".join(f"note {i}: " + "words " * 250 + "\n" for i in range(16))

    code, _, err = chat(monkeypatch, capsys, lines, "--session", "c3")

    assert code == 0, err
    assert "compacted (threshold" in err
    summaries = [r for r in fake_api.message_requests() if "tools" not in r.body]
    assert summaries and summaries[0].body["system"][0]["text"] == SUMMARY_SYSTEM_PROMPT
    assert LocalHistory(chat_env / "history").exists(conversation_history_path("c3"))


def test_a_failed_turn_is_one_line_and_the_chat_goes_on(
    chat_env: Path,
    fake_api: FakeAnthropicAPI,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake_api.fail_next(1, 500, endpoint="/v1/messages")
    fake_api.push(text_reply("back again"))

    code, out, err = chat(monkeypatch, capsys, "first\nsecond\n", "--session", "c4")

    assert code == EXIT_PROVIDER
    assert out == "back again\n"
    errors = [line for line in err.splitlines() if line.startswith("hango chat: error: ")]
    assert len(errors) == 1 and "Traceback" not in err


# --- the other commands' Anthropic paths, against the same loopback API ----------------------


def test_replay_with_the_anthropic_summarizer_sends_summary_requests(
    chat_env: Path,
    fake_api: FakeAnthropicAPI,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    briefing = "## Goal and user requests\n- keep every note verbatim\n## Next step\n- wait"
    fake_api.responder = lambda body: text_reply(briefing)
    messages = []
    for i in range(6):
        messages += [
            {"role": "user", "content": f"note {i}: " + "detail " * 300},
            {"role": "assistant", "content": f"noted {i}"},
        ]
    transcript = chat_env / "t.json"
    transcript.write_text(json.dumps({"messages": messages}))
    argv = (str(transcript), "--summarizer", "anthropic", "--max-input-tokens", "3000", "--json")

    code = main(["replay", *argv])
    out, err = capsys.readouterr()

    assert code == 0, err
    report = json.loads(out)
    summaries = fake_api.message_requests()
    assert summaries and all("tools" not in r.body for r in summaries)
    assert report["compactions"] == len(summaries)
    assert {c["summarizer"] for c in report["compaction_records"]} == {"llm"}


def test_simulate_with_the_anthropic_provider(
    chat_env: Path,
    fake_api: FakeAnthropicAPI,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["simulate", "--provider", "anthropic", "--turns", "2", "--json"])
    report = json.loads(capsys.readouterr().out)

    assert code == 0
    sent = fake_api.message_requests()
    assert len(sent) == report["model_calls"] == 2  # the fake answers each turn with text
    assert "run_command" in {tool["name"] for tool in sent[0].body["tools"]}
    assert report["provider"] == "anthropic" and report["summary_calls"] is None


def test_sessions_resume_finishes_the_turn_a_dead_process_left(
    chat_env: Path,
    fake_api: FakeAnthropicAPI,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    store = open_store(make_settings(chat_env, database_url=f"sqlite:///{chat_env / 'chat.db'}"))
    store.ensure_session("c3", MODEL)
    store.start_run("c3", 1, RunState())  # started, never finished: the process died
    store.append_message("c3", 1, Message(role="user", content="the question a crash left"))
    fake_api.push(text_reply("the answer, at last"))

    code = main(["sessions", "resume", "c3", "--json"])
    out = capsys.readouterr().out

    assert code == 0 and json.loads(out) == {
        "session_id": "c3", "resumed_turn": 1, "model_calls": 1,
    }  # fmt: skip
    sent = fake_api.message_requests()[-1].body["messages"]
    assert [m["role"] for m in sent] == ["user"] and "crash left" in json.dumps(sent)
    assert [r.status for r in store.runs("c3")] == ["completed"]

    assert main(["sessions", "resume", "c3"]) == 0
    assert "no unfinished turn" in capsys.readouterr().out
