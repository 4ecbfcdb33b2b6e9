"""``hango worker``: the supervisor restarts a worker that died and forwards a shutdown.

The supervised commands are real child processes (small Python scripts), so exit statuses,
kills and signals are the operating system's, not simulated.
"""

from __future__ import annotations

import itertools
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from hango.cli import build_parser, main
from hango.cli.worker import STABLE_RUN, Supervisor, celery_worker_command, exit_status

REPO_ROOT = Path(__file__).resolve().parents[3]


def script(body: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(body)]


def runs_then(path: Path, statuses: list[int]) -> list[str]:
    """A command that appends a line to ``path`` per run and exits with the next status."""
    return script(f"""
        import os, signal, sys
        path = {str(path)!r}
        with open(path, "a") as f:
            f.write("run\\n")
        statuses = {statuses!r}
        status = statuses[min(len(statuses), sum(1 for _ in open(path))) - 1]
        if status == -9:
            os.kill(os.getpid(), signal.SIGKILL)
        sys.exit(status)
    """)


def test_a_worker_that_dies_is_started_again_with_a_growing_back_off(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    lines: list[str] = []
    supervisor = Supervisor(
        runs_then(runs, [3, -9, 1, 0]), first_delay=0.01, max_delay=0.03, log=lines.append
    )

    assert supervisor.run() == 0
    assert runs.read_text().count("run") == 4
    assert [line.split("status ")[1] for line in lines] == [
        "3; starting it again in 0.01 s",
        "137; starting it again in 0.02 s",
        "1; starting it again in 0.03 s",
    ]


def test_a_worker_refusing_its_configuration_is_not_started_again(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    lines: list[str] = []
    supervisor = Supervisor(runs_then(runs, [78, 0]), first_delay=0.01, log=lines.append)

    assert supervisor.run() == 78
    assert runs.read_text().count("run") == 1 and lines == []


def clock_advancing_by(step: float) -> Callable[[], float]:
    """A clock that moves ``step`` seconds per reading: every run "lasts" ``step``."""
    readings = itertools.count()
    return lambda: next(readings) * step


@pytest.mark.parametrize(
    ("run_seconds", "delays"),
    [
        (STABLE_RUN / 2, ["0.01 s", "0.02 s", "0.04 s"]),
        (STABLE_RUN, ["0.01 s", "0.01 s", "0.01 s"]),
    ],
)
def test_only_a_run_that_lasted_resets_the_back_off(
    tmp_path: Path, run_seconds: float, delays: list[str]
) -> None:
    lines: list[str] = []
    supervisor = Supervisor(
        runs_then(tmp_path / "runs", [1, 1, 1, 0]),
        first_delay=0.01,
        max_delay=1.0,
        clock=clock_advancing_by(run_seconds),
        log=lines.append,
    )
    assert supervisor.run() == 0
    assert [line.rsplit("in ", 1)[1] for line in lines] == delays


def test_sigterm_is_forwarded_and_ends_the_loop_even_when_the_worker_exits_non_zero(
    tmp_path: Path,
) -> None:
    marks = tmp_path / "marks"
    child = textwrap.dedent(f"""
        import signal, sys, time
        def stop(signum, frame):
            open({str(marks)!r}, "a").write(f"got {{signum}}\\n")
            sys.exit(5)
        signal.signal(signal.SIGTERM, stop)
        open({str(marks)!r}, "a").write("started\\n")
        time.sleep(60)
    """)
    supervisor = subprocess.Popen(
        script(f"""
            import sys
            from hango.cli.worker import supervise
            sys.exit(supervise([sys.executable, "-c", {child!r}]))
        """),
        cwd=REPO_ROOT,
    )
    try:
        deadline = time.monotonic() + 20
        while not (marks.exists() and "started" in marks.read_text()):
            assert time.monotonic() < deadline, "the supervised child never started"
            time.sleep(0.02)
        supervisor.send_signal(signal.SIGTERM)
        assert supervisor.wait(timeout=20) == 5
    finally:
        supervisor.kill()
    assert marks.read_text().splitlines() == ["started", f"got {int(signal.SIGTERM)}"]


def test_hango_worker_hands_every_option_to_celery_worker() -> None:
    args, extra = build_parser().parse_known_args(
        ["worker", "-Q", "summarize,offload", "-c", "2", "-E", "-n", "w@%h"]
    )
    assert args.passthrough
    assert celery_worker_command(extra)[1:] == [
        "-m", "celery", "-A", "hango_worker", "worker",
        "-Q", "summarize,offload", "-c", "2", "-E", "-n", "w@%h",
    ]  # fmt: skip


def test_other_commands_still_refuse_unknown_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["simulate", "--bogus"])
    assert exited.value.code == 2
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err


def test_exit_status_reports_a_signal_as_a_shell_does() -> None:
    assert exit_status(0) == 0
    assert exit_status(3) == 3
    assert exit_status(-signal.SIGKILL) == 137
