"""The gateway's own part of a call's time to first byte: its turn, up to the upstream call.

``bench_gateway`` measures time to first byte end to end, gateway against direct; on a
shared machine its added figure moves by tens of milliseconds from run to run. This
probe times only the part the gateway adds on the way up: in the turn's thread, from the
turn's start (``Gateway.serve``) to the upstream body being ready (``upstream_body``
returned; the exchange sends it next), as wall time and as the thread's CPU time (which
the machine's load moves much less). Store work done in other threads (the lease tried
while the body arrives, the run and the append beside the upstream call) is not in it:
that is the point of doing it there. The setup is ``bench_gateway``'s steady call (the
loopback upstream in this process: its time is not measured here).

Run: ``python -m bench.probe_gateway_turn [--sizes 400 2000 10000] [--calls 25]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2

import hango.gateway.provider as provider_module
import hango.gateway.upstream as upstream_module
from bench.bench_call_peers import synthetic_history
from bench.bench_gateway import HUGE_WINDOW, body_of, streamed, tool_round
from hango.gateway.service import Gateway
from tests.fakeapi import FakeAnthropicAPI
from tests.gateway_support import running_gateway


class TurnTimer:
    """Wraps ``Gateway.serve`` and the provider's ``upstream_body`` to time the span."""

    def __init__(self) -> None:
        self.spans: list[tuple[float, float]] = []  # (cpu ms, wall ms)
        self._started = threading.local()

    def install(self) -> None:
        serve, body = Gateway.serve, upstream_module.upstream_body
        Gateway.serve = self._around_serve(serve)  # type: ignore[method-assign]
        # The name the provider calls (imported into its module).
        provider_module.upstream_body = self._after_body(body)  # type: ignore[attr-defined]

    def _around_serve(self, serve: Callable[..., None]) -> Callable[..., None]:
        def timed(gateway: Gateway, *args: Any) -> None:
            self._started.at = (time.thread_time(), time.perf_counter())
            serve(gateway, *args)

        return timed

    def _after_body(self, body: Callable[..., bytes]) -> Callable[..., bytes]:
        def timed(*args: Any, **kwargs: Any) -> bytes:
            out = body(*args, **kwargs)
            started = getattr(self._started, "at", None)
            if started is not None:  # the first call of the turn only
                cpu, wall = time.thread_time() - started[0], time.perf_counter() - started[1]
                self.spans.append((cpu * 1000, wall * 1000))
                self._started.at = None
            return out

        return timed


def probe(timer: TurnTimer, size: int, calls: int) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory() as scratch,
        FakeAnthropicAPI(window=HUGE_WINDOW, tokenizer=lambda body: 1000) as upstream,
        running_gateway(upstream.base_url, Path(scratch), max_input_tokens=HUGE_WINDOW) as gw,
        httpx2.Client(timeout=600) as client,
    ):
        history = synthetic_history(size)
        streamed(client, gw.url, body_of(history), "probe")  # stores the session
        timer.spans.clear()
        for n in range(calls):
            tool_round(history, n)
            streamed(client, gw.url, body_of(history), "probe")
    cpu, wall = zip(*timer.spans, strict=True)
    return {
        "messages": len(history),
        "turn_to_upstream_cpu_ms": round(statistics.median(cpu), 2),
        "turn_to_upstream_wall_ms": round(statistics.median(wall), 2),
        "calls": len(timer.spans),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sizes", type=int, nargs="+", default=[400, 2000, 10000])
    parser.add_argument("--calls", type=int, default=25)
    args = parser.parse_args(argv)
    timer = TurnTimer()
    timer.install()
    for size in args.sizes:
        print(json.dumps(probe(timer, size, args.calls)), flush=True)


if __name__ == "__main__":
    main()
