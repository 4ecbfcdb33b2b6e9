"""The library keeps no process-global state and leans on no interpreter internals.

What is remembered from call to call belongs to an object a caller made (a loop, a
middleware, a provider), so two loops in one process never see each other's memos and a
body handed out cannot be changed behind a later call. Checked over the source of
``shared/`` (the ``hango`` package), module by module.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared"

# Classes whose instances remember values: one at module level is a process-wide cache.
MEMO_CLASSES = frozenset(
    {"IdentityCache", "HeldMemo", "RecentlyUsed", "OrderedDict", "defaultdict", "WeakKeyDictionary"}
    | {"WeakValueDictionary", "dict", "list", "set"}
)
CACHING_DECORATORS = frozenset({"lru_cache", "cache", "cached_property"})
# Reference counts and the collector are the interpreter's, not the library's, to steer.
FORBIDDEN_CALLS = frozenset({("sys", "getrefcount"), ("gc", "disable"), ("gc", "freeze")})


def modules() -> list[Path]:
    return sorted(SHARED.rglob("*.py"))


def _name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def module_caches(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """Module-level names bound to an empty container or a memo, and cached functions."""
    for node in tree.body:
        value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
        if isinstance(value, ast.Call) and _name(value) in MEMO_CLASSES:
            if _name(value) not in {"dict", "list", "set"} or not (value.args or value.keywords):
                yield node.lineno, ast.unparse(node).splitlines()[0]
        elif isinstance(value, ast.Dict | ast.List | ast.Set) and not _elements(value):
            yield node.lineno, ast.unparse(node).splitlines()[0]
        elif isinstance(node, ast.FunctionDef):
            for decorator in node.decorator_list:
                if _name(decorator) in CACHING_DECORATORS:
                    yield node.lineno, f"@{_name(decorator)} def {node.name}"


def _elements(value: ast.Dict | ast.List | ast.Set) -> list[object]:
    return list(value.keys) if isinstance(value, ast.Dict) else list(value.elts)


def forbidden_calls(tree: ast.Module) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if (node.value.id, node.attr) in FORBIDDEN_CALLS:
                yield node.lineno, f"{node.value.id}.{node.attr}"
        elif isinstance(node, ast.ImportFrom) and node.module in {"sys", "gc"}:
            for alias in node.names:
                if (node.module, alias.name) in FORBIDDEN_CALLS:
                    yield node.lineno, f"from {node.module} import {alias.name}"


def findings(check: object) -> list[str]:
    found = []
    for path in modules():
        tree = ast.parse(path.read_text(), filename=str(path))
        for line, text in check(tree):  # type: ignore[operator]
            found.append(f"{path.relative_to(SHARED.parent)}:{line}: {text}")
    return found


def test_no_module_level_caches_under_shared() -> None:
    assert findings(module_caches) == []


def test_no_reference_counts_or_collector_switches_under_shared() -> None:
    assert findings(forbidden_calls) == []


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("_MEMO: IdentityCache[int, int] = IdentityCache()", 1),
        ("_SEEN = {}", 1),
        ("_LAST = []", 1),
        ("_TABLE = dict()", 1),
        ("@functools.lru_cache(maxsize=8)\ndef f(x): return x", 1),
        ("KNOWN = frozenset({'a'})", 0),
        ("ORDER = {'a': 1}", 0),
        ("_TABLE = dict(a=1)", 0),
    ],
)
def test_the_cache_rule_tells_a_cache_from_a_constant(source: str, expected: int) -> None:
    assert len(list(module_caches(ast.parse(source)))) == expected


@pytest.mark.parametrize(
    "source", ["import sys\nsys.getrefcount(x)", "import gc\ngc.disable()", "from gc import freeze"]
)
def test_the_call_rule_finds_each_forbidden_call(source: str) -> None:
    assert len(list(forbidden_calls(ast.parse(source)))) == 1
