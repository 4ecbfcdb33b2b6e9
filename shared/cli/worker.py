"""``hango worker``: a Celery worker pool that is started again when it stops on its own.

Every option is handed to ``celery -A hango_worker worker`` (``hango worker -Q summarize -c 4 -E``).
A worker that exits with a non-zero status, or is killed, is restarted after a back-off of
1 s, doubling up to 30 s and reset once a run lasted a minute; until then every compaction
of every agent would wait out the queue deadline and fall back. SIGTERM and SIGINT are
passed to the worker and end the loop, so a warm shutdown stays warm; a clean exit (status
0, e.g. ``celery control shutdown``), or a refusal to start over its configuration (status
78, e.g. no API key for its summarizer), is not restarted: retrying cannot fix it.

The worker runs as a child process: the agent's side of the product never imports the
``worker`` package.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from hango.cli.parsing import summary
from hango.core.errors import EXIT_WORKER_CONFIG

FIRST_DELAY = 1.0
MAX_DELAY = 30.0
STABLE_RUN = 60.0  # a run this long resets the back-off
FORWARDED = (signal.SIGTERM, signal.SIGINT)

Spawn = Callable[[Sequence[str]], "subprocess.Popen[bytes]"]


def celery_worker_command(options: Sequence[str]) -> list[str]:
    return [sys.executable, "-m", "celery", "-A", "hango_worker", "worker", *options]


def _spawn(command: Sequence[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(list(command))


@dataclass
class Supervisor:
    """Runs ``command`` until it exits cleanly or a forwarded signal asks it to stop."""

    command: Sequence[str]
    first_delay: float = FIRST_DELAY
    max_delay: float = MAX_DELAY
    spawn: Spawn = _spawn
    clock: Callable[[], float] = time.monotonic
    log: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True)
    stopping: threading.Event = field(default_factory=threading.Event)
    child: subprocess.Popen[bytes] | None = None

    def run(self) -> int:
        """The exit status to leave with: the worker's last one (128 + signal if killed)."""
        delay = self.first_delay
        while True:
            started = self.clock()
            self.child = self.spawn(self.command)
            code = exit_status(self.child.wait())
            if code in (0, EXIT_WORKER_CONFIG) or self.stopping.is_set():
                return code
            self.log(f"hango worker: the worker exited with status {code}; "
                     f"starting it again in {delay:g} s")  # fmt: skip
            if self.stopping.wait(delay):
                return code
            ran = self.clock() - started
            delay = self.first_delay if ran >= STABLE_RUN else min(delay * 2, self.max_delay)

    def forward(self, signum: int, _frame: FrameType | None = None) -> None:
        """Signal handler: pass the signal on and stop restarting."""
        self.stopping.set()
        if self.child is not None and self.child.poll() is None:
            self.child.send_signal(signum)


def exit_status(returncode: int) -> int:
    """``Popen.returncode`` as a shell would report it (-9 → 137)."""
    return returncode if returncode >= 0 else 128 - returncode


def supervise(command: Sequence[str]) -> int:
    supervisor = Supervisor(command)
    for signum in FORWARDED:
        signal.signal(signum, supervisor.forward)
    return supervisor.run()


def add_parser(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "worker",
        help=summary("worker"),
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    parser.set_defaults(run=run, passthrough=True)


def run(args: argparse.Namespace) -> int:
    return supervise(celery_worker_command(args.extra))
