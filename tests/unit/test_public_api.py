"""The public API: one import path for a library user, and it stays cheap to import."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import hango
from tests.conftest import NetworkAccessError, is_loopback

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def test_every_public_name_resolves_to_what_its_module_defines() -> None:
    assert hango.__all__, "the public API is empty"
    for name in hango.__all__:
        value = getattr(hango, name)
        assert value.__name__ == name, name
        assert value.__module__.startswith("hango."), name


EMBEDDING_NEEDS = (
    # registering tools, writing middleware and estimators, telemetry, a scripted provider
    "Tool",
    "ToolOutcome",
    "ToolDefinition",
    "Middleware",
    "ModelCall",
    "Assembly",
    "PassThrough",
    "Estimator",
    "Telemetry",
    "TelemetryHandle",
    "setup_telemetry",
    "TurnContext",
    "ScriptedProvider",
    "text_reply",
    "tool_reply",
    "build_agent",
)


def test_what_an_embedding_needs_is_exported() -> None:
    assert set(EMBEDDING_NEEDS) <= set(hango.__all__)


def test_every_error_the_readme_names_is_exported() -> None:
    named = set(re.findall(r"\b([A-Z]\w+Error)\b", README))
    assert {"SessionBusyError", "TurnLeaseLostError", "ConfigError"} <= named
    assert named <= set(hango.__all__)


def test_every_exported_error_is_a_hango_error() -> None:
    errors = [getattr(hango, n) for n in hango.__all__ if n.endswith("Error")]
    assert len(errors) >= 10
    assert all(issubclass(error, hango.HangoError) for error in errors)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_thing"):
        _ = hango.no_such_thing  # type: ignore[attr-defined]


def test_the_readme_example_imports_only_from_the_public_api() -> None:
    example = re.search(r"## Embedding.*?```python\n(.*?)```", README, re.S)
    assert example is not None
    imports = re.findall(r"^(?:from|import) (\S+)", example.group(1), re.M)
    ours = [name for name in imports if name not in sys.stdlib_module_names]
    assert ours == ["hango"]


def test_importing_the_package_imports_nothing_else_of_it() -> None:
    code = "import sys, hango; print(sorted(m for m in sys.modules if m.startswith('hango.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("address", "allowed"),
    [
        (("127.0.0.1", 6379), True),
        (("127.9.9.9", 1), True),
        (("::1", 5432, 0, 0), True),
        (("localhost", 80), True),
        ("/run/postgresql/.s.PGSQL.5432", True),
        (("10.0.0.1", 443), False),
        (("api.anthropic.com", 443), False),
        (("2001:db8::1", 443, 0, 0), False),
    ],
)
def test_the_network_guard_knows_loopback(address: object, allowed: bool) -> None:
    assert is_loopback(address) is allowed


def test_the_network_guard_refuses_before_connecting() -> None:
    with socket.socket() as sock, pytest.raises(NetworkAccessError, match=r"192\.0\.2\.1"):
        sock.connect(("192.0.2.1", 9))
