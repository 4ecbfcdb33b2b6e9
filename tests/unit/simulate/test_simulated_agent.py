"""The offline scripted coding agent: deterministic, coherent, and a real provider to the loop."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from hango.compaction.jobs import SummaryJob
from hango.compaction.summary_prompt import SUMMARY_SECTIONS, build_summary_request
from hango.compaction.validate import validate_request
from hango.core.errors import ContextOverflowError
from hango.core.messages import Message, Request, StoredMessage, TextBlock, ToolResultBlock
from hango.core.settings import load_settings
from hango.history.local import LocalHistory
from hango.history.paths import conversation_history_path
from hango.simulate.commands import RUN_COMMAND, PretendShell, module_under_test
from hango.simulate.model import ScriptedCodingModel, count_request_tokens
from hango.simulate.plan import BUG_MARKER, FIXED_LINE
from hango.simulate.runner import build_simulation, scripted_model
from hango.simulate.user import ScriptedUser
from hango.tokens.base import TokenCounter
from hango.tools.builtin import COMPACT_CONVERSATION, EDIT_FILE, LS, READ_FILE, WRITE_FILE

TOOLS = (READ_FILE, WRITE_FILE, EDIT_FILE, LS, COMPACT_CONVERSATION, RUN_COMMAND)
TASK = (
    "Create `src/billing/ledger.py` with a small ledger service and tests in "
    "`tests/billing/test_ledger.py`."
)


def request(*messages: Message, tools: bool = True) -> Request:
    return Request(model="m", max_tokens=100, messages=messages, tools=TOOLS if tools else None)


def user(text: str) -> Message:
    return Message(role="user", content=(TextBlock(text=text),))


def play_task(model: ScriptedCodingModel, task: str = TASK) -> list[Message]:
    """Answer every tool call with "ok" until the model ends its turn; the messages."""
    messages = [user(task)]
    for _ in range(20):
        reply = model.complete(request(*messages)).as_message()
        messages.append(reply)
        uses = list(reply.tool_uses())
        if not uses:
            return messages
        messages.append(
            Message(
                role="user",
                content=tuple(ToolResultBlock(tool_use_id=u.id, content="ok") for u in uses),
            )
        )
    raise AssertionError("the scripted model never ended its turn")


def test_same_seed_same_session_and_another_seed_differs() -> None:
    first = [m.to_api() for m in play_task(ScriptedCodingModel(seed=3))]
    again = [m.to_api() for m in play_task(ScriptedCodingModel(seed=3))]
    other = [m.to_api() for m in play_task(ScriptedCodingModel(seed=4))]

    assert first == again
    assert first != other


def test_a_task_writes_the_named_module_runs_it_and_ends_with_text() -> None:
    messages = play_task(ScriptedCodingModel(seed=1))

    calls = [use for m in messages for use in m.tool_uses()]
    names = [call.name for call in calls]
    assert "write_file" in names and "run_command" in names
    written = [call.input["path"] for call in calls if call.name == "write_file"]
    assert "/work/src/billing/ledger.py" in written
    assert "/work/tests/billing/test_ledger.py" in written
    largest = max(len(call.input["content"]) for call in calls if call.name == "write_file")
    assert largest > 4000  # large arguments, for truncation to work on
    assert messages[-1].role == "assistant" and "ledger" in messages[-1].text()
    assert not validate_request(request(*messages[:-1]))


def test_tool_arguments_follow_the_offered_schema_and_missing_tools_are_skipped() -> None:
    renamed = tuple(
        tool.model_copy(
            update={
                "input_schema": {"type": "object", "properties": {"file_path": {}, "content": {}}}
            }
        )
        if tool.name == "write_file"
        else tool
        for tool in TOOLS
        if tool.name != "ls"
    )
    model = ScriptedCodingModel(seed=1)

    reply = model.complete(Request(model="m", max_tokens=10, messages=(user(TASK),), tools=renamed))

    uses = list(reply.as_message().tool_uses())
    assert uses and uses[0].name == "write_file"  # the ls step was skipped
    assert set(uses[0].input) == {"file_path", "content"}


def test_summary_request_gets_the_sections_and_keeps_identifiers() -> None:
    evicted = tuple(
        StoredMessage(seq=i + 1, turn=1, message=m)
        for i, m in enumerate(play_task(ScriptedCodingModel(seed=1)))
    )
    job = SummaryJob(
        session_id="s1",
        turn=2,
        from_seq=1,
        to_seq=len(evicted),
        previous_summary=None,
        evicted=evicted,
        model="m",
    )
    model = ScriptedCodingModel(
        seed=1, max_input_tokens=50
    )  # the agent window does not bind summaries

    summary = (
        model.complete(build_summary_request(job, model="m", max_tokens=500)).as_message().text()
    )

    assert [line for line in summary.splitlines() if line.startswith("## ")] == [
        f"## {s}" for s in SUMMARY_SECTIONS
    ]
    assert "/work/src/billing/ledger.py" in summary
    assert "Create `src/billing/ledger.py`" in summary
    assert model.summary_calls == 1 and model.calls == 0


def test_over_the_window_the_model_refuses_like_the_api() -> None:
    model = ScriptedCodingModel(seed=1, max_input_tokens=100)
    big = request(user("x" * 2000))

    with pytest.raises(ContextOverflowError) as caught:
        model.complete(big)

    tokens = count_request_tokens(big)
    assert str(caught.value) == f"prompt is too long: {tokens} tokens > 100 maximum"
    assert caught.value.tokens == tokens and caught.value.maximum == 100
    assert isinstance(model, TokenCounter) and model.count_tokens(big, timeout=1) == tokens


def test_token_count_covers_tools_and_system() -> None:
    bare = request(user("hi"), tools=False)
    with_tools = request(user("hi"))
    with_system = bare.model_copy(update={"system": (TextBlock(text="be brief " * 50),)})

    assert count_request_tokens(with_tools) > count_request_tokens(bare)
    assert count_request_tokens(with_system) > count_request_tokens(bare)


def test_shell_fails_tests_until_the_bug_marker_is_edited_away(tmp_path: Path) -> None:
    history = LocalHistory(tmp_path)
    shell = PretendShell(history, seed=5)
    history.write(
        "/work/src/billing/ledger.py", f"def load_ledger(items):\n    {BUG_MARKER}\n    return 1\n"
    )

    failing = shell.run({"command": "pytest tests/billing/test_ledger.py -q"})
    history.write(
        "/work/src/billing/ledger.py", f"def load_ledger(items):\n    {FIXED_LINE}\n    return 1\n"
    )
    passing = shell.run({"command": "pytest tests/billing/test_ledger.py -q"})

    assert failing.is_error and "1 failed" in failing.content and "load_ledger" in failing.content
    assert not passing.is_error and " passed in " in passing.content
    assert len(shell.run({"command": "make billing"}).content) > 2000
    assert shell.run({"command": "pytest tests/none/test_x.py"}).is_error
    assert module_under_test("tests/billing/test_ledger.py") == "/work/src/billing/ledger.py"


def test_scripted_user_is_seeded_and_answers_questions() -> None:
    one, two = ScriptedUser(9), ScriptedUser(9)
    first = [one.next_message(n, "Should I?" if n == 2 else "Done.") for n in range(1, 6)]
    second = [two.next_message(n, "Should I?" if n == 2 else "Done.") for n in range(1, 6)]

    assert first == second
    assert len(set(first)) == 5
    answers = ("Yes", "No", "Good question")
    assert first[1].startswith(answers)
    assert not first[2].startswith(answers)


def test_the_content_generators_are_deterministic() -> None:
    from hango.simulate.content import build_log, module_source, new_module

    module = new_module(random.Random(1))
    assert module_source(module, random.Random(2)) == module_source(module, random.Random(2))
    assert build_log("x", random.Random(3)) == build_log("x", random.Random(3))


def test_a_short_simulation_compacts_and_keeps_every_message(tmp_path: Path) -> None:
    settings = load_settings(
        model="sim-model",
        model_profiles={"sim-model": {"max_input_tokens": 9000}},
        database_url=f"sqlite:///{tmp_path / 'sim.db'}",
        history_root=tmp_path / "history",
        estimator="heuristic",
        redis_url=None,
    )
    model = scripted_model(settings, seed=7)
    simulation = build_simulation(
        settings, seed=7, provider=model, session_id="sim-test", model=model
    )

    outcome = simulation.run(6)

    assert outcome.compactions, "a 9k window must compact within six turns"
    assert model.summary_calls >= 1  # the summaries went through the scripted model
    assert any(record.summarizer != "extractive" for record in outcome.compactions)
    assert outcome.session.compactions == len(outcome.compactions)
    stored = simulation.agent.store.messages("sim-test")
    assert [m.seq for m in stored] == list(range(1, len(stored) + 1))
    assert outcome.stored_messages == len(stored) > 2 * 6
    history = simulation.agent.history.read(conversation_history_path("sim-test"))
    assert (
        outcome.history_written
        and outcome.history_file is not None
        and outcome.history_file.is_file()
    )
    assert stored[0].message.text() in history
