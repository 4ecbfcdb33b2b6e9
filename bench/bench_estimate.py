"""How long ``estimate_request`` takes on a long session, cold and after one new message.

The request is synthetic (no transcript data): ~400 messages and ~150k tokens of tool
batches (some parallel), tool results of varied sizes, a three-block system prompt and a
set of tool definitions. For each estimator it measures

- cold: a fresh estimator (empty cache) over the whole request;
- warm: the same estimator after it has seen the request, on the request grown by one
  message (the agent loop's case: it keeps its message objects within a turn);
- rebuilt: a warm estimator on an equal request whose objects were rebuilt (as when
  reloaded from storage): the identity cache misses and it costs a cold run.

Each figure is the median of several runs, in milliseconds. Target: warm/cold <= 5%.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from hango.core.messages import (
    Message,
    Request,
    TextBlock,
    ToolDefinition,
    ToolResultBlock,
    ToolUseBlock,
)
from hango.tokens import Estimator, HeuristicEstimator, TiktokenEstimator
from hango.tokens.tiktoken_estimator import DEFAULT_ENCODINGS

MESSAGES = 400
COLD_RUNS = 7
WARM_RUNS = 51
SEED = 20260

_WORDS = tuple(
    " ".join(
        (
            "def return self import from class if else for while in not and or None True",
            "request message token session value result error path file line test assert",
            "the a of to is that with as on by be this are was it an at which can will",
        )
    ).split(" ")
)
_TOOLS = ("read_file", "grep", "glob", "edit_file", "write_file", "run_shell", "list_dir")


def _text(rng: random.Random, words: int) -> str:
    lines = []
    while words > 0:
        n = min(words, rng.randint(4, 14))
        indent = "    " * rng.randint(0, 3)
        lines.append(
            indent + " ".join(rng.choice(_WORDS) for _ in range(n)) + f"  # {rng.randint(0, 9999)}"
        )
        words -= n
    return "\n".join(lines)


def _tool_batch(rng: random.Random, index: int) -> tuple[Message, Message]:
    calls = rng.choices((1, 2, 3, 4), weights=(6, 2, 1, 1))[0]
    uses = [
        ToolUseBlock(
            id=f"toolu_{index:04d}_{k}",
            name=rng.choice(_TOOLS),
            input={
                "path": f"src/pkg_{rng.randint(0, 40)}/mod_{rng.randint(0, 99)}.py",
                "limit": 400,
            },
        )
        for k in range(calls)
    ]
    results = [
        ToolResultBlock(tool_use_id=use.id, content=_text(rng, int(rng.lognormvariate(4.65, 0.9))))
        for use in uses
    ]
    preface = [TextBlock(text=_text(rng, rng.randint(5, 40)))] if rng.random() < 0.4 else []
    return Message(role="assistant", content=(*preface, *uses)), Message(
        role="user", content=tuple(results)
    )


def synthetic_request() -> Request:
    rng = random.Random(SEED)
    messages: list[Message] = [Message(role="user", content=_text(rng, 120))]
    while len(messages) < MESSAGES - 1:
        messages.extend(_tool_batch(rng, len(messages)))
    messages.append(Message(role="assistant", content=_text(rng, 60)))
    system = tuple(TextBlock(text=_text(rng, words)) for words in (3_000, 1_500, 600))
    tools = tuple(
        ToolDefinition(
            name=name,
            description=_text(rng, 80),
            input_schema={
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": _text(rng, 12)},
                    "limit": {"type": "integer", "description": _text(rng, 8)},
                },
                "required": ["path"],
            },
        )
        for name in _TOOLS
    )
    return Request(
        model="claude-sonnet-4-6",
        max_tokens=8_000,
        messages=tuple(messages),
        system=system,
        tools=tools,
    )


@dataclass(frozen=True)
class Row:
    estimator: str
    tokens: int
    cold_ms: float
    warm_ms: float
    rebuilt_ms: float

    @property
    def warm_over_cold(self) -> float:
        return self.warm_ms / self.cold_ms


def _median_ms(runs: int, action: Callable[[], object]) -> float:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def measure(name: str, build: Callable[[], Estimator], request: Request) -> Row:
    cold_ms = _median_ms(COLD_RUNS, lambda: build().estimate_request(request))
    warm = build()
    tokens = warm.estimate_request(request)
    grown = [
        request.model_copy(
            update={"messages": (*request.messages, Message(role="user", content=f"next step {i}"))}
        )
        for i in range(WARM_RUNS)
    ]
    pending = iter(grown)
    warm_ms = _median_ms(WARM_RUNS, lambda: warm.estimate_request(next(pending)))
    rebuilt = [Request.model_validate(request.to_api()) for _ in range(COLD_RUNS)]
    pending_rebuilt = iter(rebuilt)
    rebuilt_ms = _median_ms(COLD_RUNS, lambda: warm.estimate_request(next(pending_rebuilt)))
    return Row(name, tokens, cold_ms, warm_ms, rebuilt_ms)


def run() -> list[Row]:
    request = synthetic_request()
    encoding = DEFAULT_ENCODINGS.get()
    builders: list[tuple[str, Callable[[], Estimator]]] = [("heuristic", HeuristicEstimator)]
    if encoding is not None:
        builders.append(("tiktoken", lambda: TiktokenEstimator(encoding)))
    return [measure(name, build, request) for name, build in builders]


def main() -> None:
    request = synthetic_request()
    print(
        f"request: {len(request.messages)} messages, "
        f"{sum(1 for m in request.messages for _ in m.tool_uses())} tool calls, "
        f"{len(request.tool_definitions())} tools, {len(request.system_blocks())} system blocks"
    )
    print(f"median of {COLD_RUNS} cold / {WARM_RUNS} warm runs, milliseconds")
    header = (
        f"{'estimator':<10} {'tokens':>8} {'cold ms':>9} {'warm ms':>9} "
        f"{'warm/cold':>10} {'rebuilt ms':>11}"
    )
    print(header)
    print("-" * len(header))
    for row in run():
        print(
            f"{row.estimator:<10} {row.tokens:>8,} {row.cold_ms:>9.2f} {row.warm_ms:>9.3f} "
            f"{row.warm_over_cold:>9.1%} {row.rebuilt_ms:>11.2f}"
        )


if __name__ == "__main__":
    main()
