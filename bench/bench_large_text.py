"""Peak memory and time of estimating one very large tool result (issue 14, defect 13).

Each case runs in a child process of its own, so its peak RSS (``ru_maxrss``) is that of
the case alone: a fresh interpreter, the estimator loaded, then one tool result of
``--mb`` megabytes estimated as part of a message. Shapes:

- ``text``: lines of words (a build log);
- ``solid``: one run of letters without whitespace (a minified bundle, a base64 blob);
- ``memo``: ten texts of ``--mb`` / 5 MB estimated and dropped one after another; the
  figure is what stays allocated afterwards (a value memo would keep them alive).

Usage: ``python -m bench.bench_large_text [--mb 50] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

SHAPES = ("text", "solid", "memo")
ESTIMATORS = ("tiktoken", "heuristic")


def _text(shape: str, size: int, seed: int = 0) -> str:
    if shape == "solid":
        unit = "abcdefghijklmnopqrstuvwxyz"
        return (unit * (size // len(unit) + 1))[:size]
    line = f"step {seed} compiling module_{seed}.c ok warnings=0 elapsed=0.{seed}s\n"
    return (line * (size // len(line) + 1))[:size]


def _message(text: str) -> Any:
    from hango.core.messages import Message, ToolResultBlock

    return Message(role="user", content=(ToolResultBlock(tool_use_id="toolu_big", content=text),))


def run_case(estimator_kind: str, shape: str, megabytes: int) -> dict[str, Any]:
    """One case, in this process: seconds, peak RSS and (memo) what stays allocated."""
    from hango.tokens import make_estimator

    estimator = make_estimator(estimator_kind)  # type: ignore[arg-type]
    estimator.estimate("warm up the encoding")
    size = megabytes * 1_000_000
    started = time.perf_counter()
    retained = None
    if shape == "memo":
        tracemalloc.start()
        for index in range(10):
            estimator.estimate(_text("text", size // 5, seed=index))
        gc.collect()
        retained = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
    else:
        estimator.estimate_message(_message(_text(shape, size)))
    return {
        "estimator": estimator_kind,
        "shape": shape,
        "megabytes": megabytes,
        "seconds": round(time.perf_counter() - started, 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "retained_mb": None if retained is None else round(retained / 1e6, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_large_text")
    parser.add_argument("--mb", type=int, default=50, help="size of the tool result (MB)")
    parser.add_argument("--json", type=Path, help="also write the rows to this file")
    parser.add_argument("--case", nargs=2, metavar=("ESTIMATOR", "SHAPE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.case:
        print(json.dumps(run_case(args.case[0], args.case[1], args.mb)))
        return 0
    rows = []
    for kind in ESTIMATORS:
        for shape in SHAPES:
            command = [sys.executable, "-m", "bench.bench_large_text", "--mb", str(args.mb)]
            done = subprocess.run(
                [*command, "--case", kind, shape], capture_output=True, text=True, timeout=900
            )
            if done.returncode != 0:
                print(done.stderr, file=sys.stderr)
                return done.returncode
            rows.append(json.loads(done.stdout))
            print(json.dumps(rows[-1]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
