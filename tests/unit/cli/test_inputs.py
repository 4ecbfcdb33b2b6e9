"""Bad inputs to ``hango replay`` fail up front, with one line, and write nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hango.cli import main
from hango.cli.errors import EXIT_CONFIG, EXIT_TRANSCRIPT

GOOD = {
    "messages": [
        {"role": "user", "content": "list the files"},
        {"role": "assistant", "content": "a.py and b.py"},
    ]
}


@pytest.fixture(autouse=True)
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def write(path: Path, body: object) -> Path:
    path.write_text(json.dumps(body))
    return path


@pytest.mark.parametrize(
    ("first_content", "says"),
    [([], "non-empty content"), ("", "non-empty content"), ([{"type": "text", "text": " "}], "")],
)
def test_empty_content_is_refused_naming_the_message(
    scratch: Path, capsys: pytest.CaptureFixture[str], first_content: object, says: str
) -> None:
    body = {"messages": [{"role": "user", "content": first_content}, GOOD["messages"][1]]}
    transcript = write(scratch / "t.json", body)
    database = scratch / "replay.db"
    code = main(["replay", str(transcript), "--database-url", f"sqlite:///{database}"])
    err = capsys.readouterr().err
    assert code == EXIT_TRANSCRIPT
    assert "messages[0]" in err and says in err and len(err.strip().splitlines()) == 1
    assert not database.exists()


def test_a_dump_target_that_is_the_transcript_is_refused_and_the_transcript_kept(
    scratch: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    transcript = write(scratch / "t.json", GOOD)
    before = transcript.read_text()
    code = main(["replay", str(transcript), "--dump-requests", str(transcript)])
    assert code == EXIT_CONFIG
    assert "the transcript itself" in capsys.readouterr().err
    assert transcript.read_text() == before


def test_a_dump_target_that_is_a_directory_is_refused_before_replaying(
    scratch: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    transcript = write(scratch / "t.json", GOOD)
    code = main(["replay", str(transcript), "--dump-requests", str(scratch)])
    assert code == EXIT_CONFIG
    assert "is a directory" in capsys.readouterr().err


def test_the_dump_is_an_ordinary_file(scratch: Path) -> None:
    transcript = write(scratch / "t.json", GOOD)
    dump = scratch / "out.jsonl"
    assert main(["replay", str(transcript), "--dump-requests", str(dump), "--json"]) == 0
    assert dump.stat().st_mode & 0o044  # readable by group/others under the usual umask
    assert len(dump.read_text().splitlines()) == 1


@pytest.mark.parametrize("depth", [300, 100_000])
def test_replay_of_a_deeply_nested_transcript_is_a_clear_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, depth: int
) -> None:
    nested = '{"a":' * depth + "{}" + "}" * depth
    body = (
        '{"messages": [{"role": "user", "content": "go"}, {"role": "assistant", "content": '
        '[{"type": "tool_use", "id": "t1", "name": "ls", "input": ' + nested + "}]}]}"
    )
    transcript = tmp_path / "deep.json"
    transcript.write_text(body, encoding="utf-8")
    code = main(["replay", str(transcript), "--database-url", f"sqlite:///{tmp_path / 'h.db'}"])
    err = capsys.readouterr().err
    assert code == EXIT_TRANSCRIPT, err
    assert "nested" in err and "deep" in err and "this is a bug" not in err
    assert err.count("\n") == 1


def _claude_code_lines(count: int) -> str:
    line = json.dumps(
        {"type": "user", "message": {"role": "user", "content": "hello there"}, "uuid": "u"}
    )
    return (line + "\n") * count


def test_replay_refuses_a_transcript_over_the_size_limit_before_reading_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    transcript = tmp_path / "big.jsonl"
    transcript.write_text(_claude_code_lines(20_000), encoding="utf-8")
    size = transcript.stat().st_size
    db = f"sqlite:///{tmp_path / 'h.db'}"

    code = main(["replay", str(transcript), "--max-bytes", str(size - 1), "--database-url", db])
    err = capsys.readouterr().err
    assert code == EXIT_TRANSCRIPT and err.count("\n") == 1
    assert f"{size:,} bytes" in err and "--max-bytes" in err and "HANGO_REPLAY_MAX_BYTES" in err

    monkeypatch.setenv("HANGO_REPLAY_MAX_BYTES", str(size - 1))
    assert main(["replay", str(transcript), "--database-url", db]) == EXIT_TRANSCRIPT
    assert "over the replay limit" in capsys.readouterr().err


def test_the_replay_limit_is_a_setting_with_a_default() -> None:
    from hango.core.settings import load_settings

    assert load_settings().replay_max_bytes == 64 * 1024 * 1024


@pytest.mark.parametrize("later", [False, True], ids=["first-turn", "after-a-turn"])
def test_a_user_message_larger_than_the_window_is_reported_with_its_true_size(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, later: bool
) -> None:
    """A 3 MB user message (over a million characters: the estimator's heuristic path, as
    for the 60 MB message of issue 26) on an 8,000-token window: the error gives the
    request's size as the estimator measures that message, whole and readable (before,
    the line was cut inside its parentheses: "(1 messages (raise ...")."""
    from hango.tokens import make_estimator

    huge = "x" * 3_000_000
    earlier = GOOD["messages"] if later else []
    body = {"messages": [*earlier, {"role": "user", "content": huge}, GOOD["messages"][1]]}
    transcript = write(tmp_path / "huge.json", body)
    db = f"sqlite:///{tmp_path / 'h.db'}"
    code = main(["replay", str(transcript), "--max-input-tokens", "8000", "--database-url", db])
    err = capsys.readouterr().err
    assert code != 0 and err.count("\n") == 1, err
    figure = int(err.split("needs about ")[1].split(" tokens")[0].replace(",", ""))
    message = make_estimator("tiktoken").estimate(huge)
    assert message <= figure <= message + 2_000, err  # the message, framing, system prompt
    assert "window of 8,000" in err and "--max-input-tokens" in err
    assert err.count("(") == err.count(")") and "1 messages" not in err, err
