"""Deterministic text for the offline simulation: source files, tests and command output.

Everything is a pure function of a seeded :class:`random.Random`, so two runs with the
same seed produce byte-identical sessions. The sizes are chosen to look like a real
coding session on a small window: files of a few thousand tokens (large ``write_file``
arguments for truncation to shorten) and command logs long enough to fill the window.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

NOUNS = (
    "config", "parser", "invoice", "ledger", "session", "cache", "report", "schedule",
    "account", "payload", "token", "order", "catalog", "metric", "budget", "router",
)  # fmt: skip
VERBS = (
    "load", "parse", "validate", "render", "merge", "resolve", "compute", "flush",
    "apply", "collect", "normalize", "export", "summarize", "retry", "index", "encode",
)  # fmt: skip
PACKAGES = ("billing", "inventory", "gateway", "scheduler", "analytics", "accounts")


@dataclass(frozen=True)
class Module:
    """A source file the scripted agent writes, with the names it defines."""

    path: str
    test_path: str
    class_name: str
    functions: tuple[str, ...]


def new_module(rng: random.Random) -> Module:
    package = rng.choice(PACKAGES)
    noun = rng.choice(NOUNS)
    verbs = rng.sample(VERBS, k=rng.randint(5, 9))
    return Module(
        path=f"src/{package}/{noun}.py",
        test_path=f"tests/{package}/test_{noun}.py",
        class_name=noun.capitalize() + rng.choice(("Service", "Store", "Builder", "Engine")),
        functions=tuple(f"{verb}_{noun}" for verb in verbs),
    )


def module_source(module: Module, rng: random.Random) -> str:
    """A plausible Python module: a class and one documented function per name."""
    noun = module.path.rsplit("/", 1)[-1].removesuffix(".py")
    parts = [
        f'"""The {noun} module: {", ".join(module.functions[:3])} and friends."""\n',
        "from __future__ import annotations\n\nimport json\nimport logging\n"
        "from dataclasses import dataclass, field\n\nlog = logging.getLogger(__name__)\n",
        f"\n@dataclass\nclass {module.class_name}:\n"
        f'    """Holds the {noun} records and their index."""\n\n'
        "    records: dict[str, dict[str, object]] = field(default_factory=dict)\n"
        "    limit: int = " + str(rng.randint(10, 500)) + "\n",
    ]
    parts.extend(_function(name, noun, rng) for name in module.functions)
    return "\n".join(parts)


def _function(name: str, noun: str, rng: random.Random) -> str:
    steps = rng.randint(6, 14)
    body = [
        f'    key = f"{noun}-{{index}}-{{item!r:.{rng.randint(8, 40)}}}"\n'
        f"    if key in seen:\n"
        f'        log.debug("{name}: skipping %s at step {step}", key)\n'
        f"        continue\n"
        f"    seen.add(key)\n"
        f"    total += len(key) * {rng.randint(2, 97)}"
        for step in range(steps)
    ]
    loop = "\n".join("    " + line for chunk in body for line in chunk.splitlines() if line.strip())
    return (
        f"\ndef {name}(items: list[object], *, strict: bool = False) -> int:\n"
        f'    """{name.replace("_", " ").capitalize()}: walks the items once, '
        f'skipping duplicates (strict={{strict}})."""\n'
        f"    seen: set[str] = set()\n    total = 0\n"
        f"    for index, item in enumerate(items):\n{loop}\n"
        f"    if strict and total > {rng.randint(1000, 99999)}:\n"
        f'        raise ValueError(f"{name}: total {{total}} over the limit")\n'
        f"    return total\n"
    )


def test_source(module: Module, rng: random.Random) -> str:
    import_path = module.path.removeprefix("src/").removesuffix(".py").replace("/", ".")
    names = ", ".join(module.functions)
    tests = [
        f"\ndef test_{name}_counts_{rng.choice(NOUNS)}() -> None:\n"
        f"    items = [{', '.join(repr(rng.choice(NOUNS)) for _ in range(rng.randint(3, 7)))}]\n"
        f"    assert {name}(items) > 0\n"
        f"    assert {name}([]) == 0\n"
        for name in module.functions
    ]
    return f'"""Tests for {module.path}."""\n\nfrom {import_path} import {names}\n' + "".join(tests)


def pytest_log(test_path: str, names: tuple[str, ...], rng: random.Random, *, fail: bool) -> str:
    """Verbose pytest output; with ``fail`` one test fails with a traceback."""
    cases = [f"test_{rng.choice(names)}_{i}" for i in range(rng.randint(25, 45))]
    lines = [
        _rule(" test session starts "),
        "platform linux -- Python 3.11.7, pytest-8.3.4, pluggy-1.5.0 -- /work/.venv/bin/python",
        f"rootdir: /work\nconfigfile: pyproject.toml\ncollected {len(cases)} items\n",
    ]
    failing = rng.randrange(len(cases)) if fail else -1
    for i, case in enumerate(cases):
        outcome = "FAILED" if i == failing else "PASSED"
        padding = " " * rng.randint(2, 30)
        lines.append(f"{test_path}::{case} {outcome}{padding}[{(i + 1) * 100 // len(cases):3d}%]")
    seconds = f"{rng.uniform(0.5, 9):.2f}s"
    if not fail:
        return "\n".join([*lines, _rule(f" {len(cases)} passed in {seconds} ")])
    case = cases[failing]
    lines += [
        "\n" + _rule(" FAILURES "),
        _rule(f" {case} ", "_"),
        f"\n    def {case}() -> None:\n>       assert {names[0]}(items) > 0",
        "E       AssertionError: assert 0 > 0",
        f"E        +  where 0 = {names[0]}(['{rng.choice(NOUNS)}'])",
        f"\n{test_path}:{rng.randint(5, 80)}: AssertionError",
        _rule(" short test summary info "),
        f"FAILED {test_path}::{case} - AssertionError: assert 0 > 0",
        _rule(f" 1 failed, {len(cases) - 1} passed in {seconds} "),
    ]
    return "\n".join(lines)


def _rule(title: str, fill: str = "=") -> str:
    return title.center(80, fill)


def build_log(target: str, rng: random.Random) -> str:
    """A long, noisy build log that ends in success."""
    steps = rng.randint(60, 120)
    lines = [f"$ make {target}", "mkdir -p build/obj build/lib"]
    for step in range(steps):
        unit = f"{rng.choice(PACKAGES)}/{rng.choice(NOUNS)}_{step}"
        lines.append(
            f"[{(step + 1) * 100 // steps:3d}%] Compiling {unit}.c -> build/obj/{unit}.o "
            f"(-O2 -Wall -fPIC, {rng.randint(120, 9800)} lines)"
        )
        if rng.random() < 0.15:
            lines.append(
                f"  warning: unused variable 'tmp_{rng.randint(1, 99)}' [-Wunused-variable]"
            )
    lines.append(f"Linking build/lib/lib{target}.so ({rng.randint(200, 4000)} KiB)")
    lines.append(f"Build finished: {steps} units, 0 errors, elapsed {rng.uniform(3, 90):.1f}s")
    return "\n".join(lines)


def grep_log(pattern: str, paths: list[str], rng: random.Random) -> str:
    hits = []
    for path in paths or ["src"]:
        for _ in range(rng.randint(5, 25)):
            hits.append(
                f"{path}:{rng.randint(1, 400)}:    {pattern}({rng.choice(NOUNS)}, strict=True)"
            )
    return "\n".join(hits)
