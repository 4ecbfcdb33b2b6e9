"""The command-line conventions people expect: --version, -q/-v, plain help that shows
every option with its default, exit codes as documented, NO_COLOR, hints that run as
printed, and state found from any directory."""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from hango.cli import build_parser, main
from hango.cli.errors import EXIT_CODES, EXIT_CONFIG, EXIT_SESSION, EXIT_USAGE
from hango.cli.output import shorten

README = (Path(__file__).resolve().parents[3] / "README.md").read_text()


@pytest.fixture(autouse=True)
def offline_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("HANGO_REDIS_URL", "HANGO_MODEL_PROFILES", "HANGO_DATABASE_URL",
                 "HANGO_HISTORY_ROOT", "NO_COLOR", "FORCE_COLOR"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HANGO_ESTIMATOR", "heuristic")
    monkeypatch.setenv("HANGO_MODEL", "cli-test-model")
    monkeypatch.setenv("HANGO_HOME", str(tmp_path / "home"))


def _parsers(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    found = [(parser.prog, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                found += _parsers(child)
    return found


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert re.fullmatch(r"hango \d+\.\d+\.\d+\S*\n", capsys.readouterr().out)


def test_every_option_has_a_help_line_and_help_is_plain_text(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for prog, parser in _parsers(build_parser()):
        for action in parser._actions:
            if not isinstance(action, argparse._SubParsersAction):
                assert action.help, f"{prog}: {action.option_strings or action.dest} has no help"
        text = parser.format_help()
        assert "``" not in text and not re.search(r":[a-z]+:`", text), prog


def test_help_shows_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    parser = dict(_parsers(build_parser()))["hango simulate"]
    text = " ".join(parser.format_help().split())
    assert "user turns to play (default: 24)" in text
    assert "(default: 16000)" in text and "(default: scripted)" in text


def test_top_level_help_imports_no_command_module() -> None:
    code = (
        "import sys; from hango.cli import main\n"
        "try: main(['--help'])\nexcept SystemExit: pass\n"
        "heavy = [m for m in ('sqlalchemy', 'rich', 'anthropic', 'celery', 'pydantic',"
        " 'opentelemetry', 'hango.cli.simulate') if m in sys.modules]\n"
        "sys.stderr.write(repr(heavy))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stderr == "[]"
    assert "simulate" in done.stdout and "migrate" in done.stdout


def test_quiet_drops_progress_and_notices_but_not_results(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["sessions", "list", "-q"]) == 0
    assert capsys.readouterr().err == ""
    assert main(["-q", "simulate", "--turns", "2", "--json"]) == 0
    ran = capsys.readouterr()
    assert ran.err == "" and json.loads(ran.out)["turns"] == 2


def test_verbose_is_accepted_anywhere(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-v", "sessions", "list"]) == 0
    assert main(["sessions", "list", "-vv"]) == 0


def test_readme_exit_code_table_is_the_code(capsys: pytest.CaptureFixture[str]) -> None:
    rows = dict(re.findall(r"^\| (\d+) \| (.+?) \|$", README, re.M))
    assert {int(code): text for code, text in rows.items()} == EXIT_CODES


def test_no_color_means_no_escape_even_on_a_terminal(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert main(["simulate", "--turns", "2"]) == 0
    assert "\x1b[" in capsys.readouterr().out  # the check below can fail
    monkeypatch.setenv("NO_COLOR", "1")
    assert main(["simulate", "--turns", "2"]) == 0
    ran = capsys.readouterr()
    assert "\x1b" not in ran.out + ran.err


def test_counts_are_pluralized(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--turns", "1", "--max-input-tokens", "9000"]) == 0
    out = capsys.readouterr().out
    assert "Simulated 1 turn " in out and "1 turns" not in out
    assert main(["sessions", "list"]) == 0
    listed = capsys.readouterr().out
    assert not re.search(r"\b1 (compactions|tokens)\b", listed)


def test_a_long_fallback_reason_is_cut_between_words() -> None:
    reason = "the queued summary did not arrive in time for messages 48-71 of session abc"
    cut = shorten(reason)
    assert cut.endswith("…") and len(cut) <= 61
    assert cut[:-1] == reason[: len(cut) - 1]
    assert reason[len(cut) - 1] == " "  # cut where a word ended, not inside "48-71"
    assert shorten("short") == "short"


def test_a_missing_sqlite_directory_is_an_error_not_created(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'absent' / 'dir' / 'x.db'}"
    for argv in (["simulate", "--turns", "1"], ["migrate"]):
        assert main([*argv, "--database-url", url]) == EXIT_CONFIG
        err = capsys.readouterr().err
        assert "no directory" in err and err.count("\n") == 1
    assert not (tmp_path / "absent").exists()


def test_an_unsupported_database_is_one_line_with_the_supported_ones(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["sessions", "list", "--database-url", "mysql://u:pw@db/x"]) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unsupported database 'mysql'" in err
    assert "postgresql://" in err and "pw@" not in err and "bug" not in err


def test_the_usage_code_is_the_same_for_every_bad_flag_value() -> None:
    for argv in (["simulate", "--turns", "x"], ["replay", "t.json", "--max-input-tokens", "-1"]):
        with pytest.raises(SystemExit) as exited:
            main(argv)
        assert exited.value.code == EXIT_USAGE


# --- state found from anywhere, and hints that run as printed ------------------------------


def _hints(text: str) -> list[list[str]]:
    """Every ``hango ...`` command the output tells the reader to run."""
    found = re.findall(r"(?:: |`)(hango [^`\n]+?)(?:`|$)", text, re.M)
    return [shlex.split(command)[1:] for command in found]


def test_default_state_is_found_from_another_directory(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    assert main(["simulate", "--turns", "4", "--max-input-tokens", "9000", "--json"]) == 0
    session = json.loads(capsys.readouterr().out)["session_id"]
    monkeypatch.chdir(tmp_path / "b")
    assert main(["sessions", "show", session, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["compaction_records"] and shown["history_file"]
    assert main(["history", session]) == 0
    assert "/work/src/" in capsys.readouterr().out
    assert not list((tmp_path / "a").iterdir()) and not list((tmp_path / "b").iterdir())


@pytest.mark.parametrize("relative", [False, True])
def test_every_printed_hint_runs_as_printed(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    relative: bool,
) -> None:
    """Run from one directory with explicit flags; follow each hint from another."""
    (tmp_path / "here").mkdir()
    (tmp_path / "there").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    database = "sqlite:///kept.db" if relative else f"sqlite:///{tmp_path / 'here' / 'kept.db'}"
    history = "hist" if relative else str(tmp_path / "here" / "hist")
    flags = ["--database-url", database, "--history-root", history]
    assert main(["simulate", "--turns", "4", "--max-input-tokens", "9000", *flags]) == 0
    hints = _hints(capsys.readouterr().out)
    assert [hint[:2] for hint in hints] == [["sessions", "show"], ["history", hints[1][1]]]
    monkeypatch.chdir(tmp_path / "there")
    for hint in hints:
        assert main(hint) == 0, hint
        assert capsys.readouterr().out.strip()

    # an error's advice carries the flags too, and runs from elsewhere
    monkeypatch.chdir(tmp_path / "here")
    assert main(["sessions", "show", "nobody", "--database-url", database]) == EXIT_SESSION
    err = capsys.readouterr().err
    assert "no session 'nobody' in sqlite:///" in err
    (advice,) = _hints(err)
    monkeypatch.chdir(tmp_path / "there")
    assert advice[:2] == ["sessions", "list"] and "--database-url" in advice
    assert main(advice) == 0 and capsys.readouterr().out.strip()


def test_sessions_show_and_history_agree_with_the_records(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A history root other than the one the session was written with is an error that
    names the expected file, not "nothing evicted"."""
    database = f"sqlite:///{tmp_path / 'db.sqlite'}"
    written = ["--database-url", database, "--history-root", str(tmp_path / "written")]
    other = ["--database-url", database, "--history-root", str(tmp_path / "other")]
    assert main(["simulate", "--turns", "4", "--max-input-tokens", "9000", "--json", *written]) == 0
    session = json.loads(capsys.readouterr().out)["session_id"]

    for argv in (["sessions", "show", session, *other], ["history", session, *other]):
        assert main(argv) == EXIT_SESSION, argv
        err = capsys.readouterr().err
        assert f"/conversation_history/{session}.md" in err and "nothing" not in err
        assert str(tmp_path / "other") in err and "--history-root" in err


# --- repeatable runs -------------------------------------------------------------------------


def _figures(report: dict[str, object]) -> list[tuple[object, ...]]:
    records = report.get("compaction_records", report.get("compactions"))
    assert isinstance(records, list) and records
    return [(r["turn"], r["reason"], r["tokens_before"], r["tokens_after"]) for r in records]


def test_a_seeded_simulation_gives_the_same_figures_twice_in_one_place(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HANGO_ESTIMATOR", "tiktoken")  # the default; ids must not move it
    argv = ["simulate", "--turns", "8", "--max-input-tokens", "9000", "--json"]
    reports = []
    for _ in range(2):
        assert main(argv) == 0
        reports.append(json.loads(capsys.readouterr().out))
    assert reports[0]["session_id"] != reports[1]["session_id"]
    assert _figures(reports[0]) == _figures(reports[1])
    assert reports[0]["input_tokens_sent"] == reports[1]["input_tokens_sent"]


def test_a_replay_gives_the_same_figures_every_time(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HANGO_ESTIMATOR", "tiktoken")
    messages: list[dict[str, object]] = []
    for n in range(6):
        messages += [
            {"role": "user", "content": f"step {n}: " + "explain the build output " * 40},
            {"role": "assistant", "content": f"done {n}: " + "the build passed " * 60},
        ]
    transcript = tmp_path / "t.json"
    transcript.write_text(json.dumps({"messages": messages}))
    database = f"sqlite:///{tmp_path / 'kept.db'}"
    reports = []
    for _ in range(2):
        # A summary's time on the replayed clock is given: "as measured" is the machine's
        # load, and whether a pre-summary is ready at the trigger would follow it.
        argv = ["replay", str(transcript), "--max-input-tokens", "3000", "--json"]
        argv += ["--summarizer-latency", "2"]
        assert main([*argv, "--database-url", database]) == 0
        reports.append(json.loads(capsys.readouterr().out))
    assert _figures(reports[0]) == _figures(reports[1])
    assert reports[0]["tokens_sent"] == reports[1]["tokens_sent"]
    assert reports[0]["session_id"] != reports[1]["session_id"]  # kept: a second session
