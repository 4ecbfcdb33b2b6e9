"""What each in-band call of ``bench_call`` decides, and what it costs, round by round.

``bench_call``'s in-band session starts at 0.74 of its window and every timed round
appends a tool round, so it walks toward the trigger and meets different pre-summary
decisions on the way: none due, a ready one whose extension is not due yet, a ready one
weighed for an extension on every call. Its median then depends on how many rounds are
timed. This probe times the rounds one by one (``bench_call``'s steps: a collection before
each call, the steady call and deepagents' hook beside it) and prints, per round, which of
the pre-summary decisions ran and with what answer, and whether truncation stepped.

    .venv/bin/python -m bench.probe_band [--size 400] [--rounds 20]
"""

from __future__ import annotations

import argparse
import functools
import gc
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import bench_call as bc
from bench import bench_call_peers as peers
from hango.middleware.base import StateHolder
from hango.middleware.presummary import Presummaries

HOOK = "deepagents.wrap_model_call"
# What a call in the band may ask about the session's pre-summary, in order (``dispatch``
# is asked only when the start rule says one is due).
DECISIONS = ("dispatch", "_extension_due", "_outgrown", "_short_of", "_start")


def recording(owner: type, name: str, seen: list[str]) -> Callable[..., Any]:
    """``owner.name``, noting in ``seen`` each call and its answer; the original returned."""
    original = getattr(owner, name)

    @functools.wraps(original)
    def noted(*args: Any, **kwargs: Any) -> Any:
        answer = original(*args, **kwargs)
        seen.append(name.strip("_") + ("" if answer is None else f"={answer}"))
        return answer

    setattr(owner, name, noted)
    return original


def rounds(size: int, count: int) -> list[tuple[dict[str, float], list[str]]]:
    """Per round: CPU ms of each contestant, and what the in-band call decided."""
    history = peers.synthetic_history(size)
    seen: list[str] = []
    originals = [(Presummaries, n, recording(Presummaries, n, seen)) for n in DECISIONS]
    originals.append(
        (StateHolder, "truncate_before", recording(StateHolder, "truncate_before", seen))
    )
    try:
        with tempfile.TemporaryDirectory() as scratch, peers.no_network():
            root = Path(scratch)
            steps = {
                bc.STEADY: bc.steady(bc.made(root / "steady", history, True)),
                bc.BAND: bc.in_band(bc.made(root / "band", history, True)),
                HOOK: ((lambda: None), peers.peer_steady_calls(history)[HOOK]),
            }
            for prepare, call in steps.values():  # the untimed warm-up round, as bench_call
                prepare()
                call()
            found = []
            for _ in range(count):
                times, decided = {}, []
                for name, (prepare, call) in steps.items():
                    prepare()
                    seen.clear()
                    gc.collect()
                    started = time.process_time()
                    call()
                    times[name] = (time.process_time() - started) * 1000
                    if name == bc.BAND:
                        decided = list(seen)
                found.append((times, decided))
            return found
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    print(f"{args.size} messages, CPU ms per round (a collection before each call)")
    print(f"{'round':>5} {'steady':>7} {'in-band':>8} {'hook':>7}  in-band decisions")
    for index, (times, decided) in enumerate(rounds(args.size, args.rounds)):
        line = f"{index:>5} {times[bc.STEADY]:7.3f} {times[bc.BAND]:8.3f} {times[HOOK]:7.3f}"
        print(f"{line}  {', '.join(decided) or 'not asked (no pre-summary due)'}")


if __name__ == "__main__":
    main()
