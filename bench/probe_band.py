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
import tempfile
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
DECISIONS = ("dispatch", "_outgrown_when_due", "_outgrown", "_short_of", "_start")


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
    """Per round: CPU ms of each contestant (``bench_call.interleave``'s timing), and what
    the in-band call decided."""
    history = peers.synthetic_history(size)
    seen: list[str] = []
    decided: list[list[str]] = []
    originals = [(Presummaries, n, recording(Presummaries, n, seen)) for n in DECISIONS]
    originals.append(
        (StateHolder, "truncate_before", recording(StateHolder, "truncate_before", seen))
    )
    try:
        with tempfile.TemporaryDirectory() as scratch, peers.no_network():
            root = Path(scratch)
            band_prepare, band_call = bc.in_band(bc.made(root / "band", history, True))

            def prepare_band() -> None:
                band_prepare()
                seen.clear()

            steps = {
                bc.STEADY: bc.steady(bc.made(root / "steady", history, True)),
                bc.BAND: (prepare_band, band_call),
                # Prepared right after the in-band call, out of every timed span: its
                # decisions are noted then.
                HOOK: (lambda: decided.append(list(seen)), peers.peer_steady_calls(history)[HOOK]),
            }
            samples = bc.interleave(steps, count)
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)
    # The first entry is interleave's untimed warm-up round.
    return [
        ({name: samples[name][i] * 1000 for name in steps}, decided[i + 1]) for i in range(count)
    ]


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
