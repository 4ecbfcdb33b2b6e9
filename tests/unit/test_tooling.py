"""Lint and strict type checking are part of the test suite, so one command checks all."""

from __future__ import annotations

import ast
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, check=False
    )


def test_ruff_is_clean() -> None:
    result = _run("ruff", "check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict_is_clean() -> None:
    result = _run("mypy")
    assert result.returncode == 0, result.stdout + result.stderr


def test_layer_contracts_hold() -> None:
    # import-linter reads the contracts from pyproject.toml ([tool.importlinter]).
    result = subprocess.run(
        [str(Path(sys.executable).with_name("lint-imports"))],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def _body_lengths(path: Path) -> list[int]:
    """Lines of each function's body in ``path``, its docstring left out."""
    lengths = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        body = node.body
        if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]  # the docstring
        if body and node.end_lineno is not None:
            lengths.append(node.end_lineno - body[0].lineno + 1)
    return lengths


def test_function_bodies_stay_short() -> None:
    # Short functions are the house style: nine in ten of the library's bodies fit in 15
    # lines, and a change that makes long ones is asked to split them.
    lengths = [n for path in sorted((ROOT / "shared").rglob("*.py")) for n in _body_lengths(path)]
    p90 = statistics.quantiles(lengths, n=10)[-1]
    assert p90 <= 15, f"function body p90 is {p90:.1f} lines over {len(lengths)} functions"
