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


def test_every_public_name_resolves() -> None:
    assert hango.__all__, "the public API is empty"
    assert set(hango.__all__) == set(hango._EXPORTS)
    for name in hango.__all__:
        assert getattr(hango, name) is not None, name


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_thing"):
        _ = hango.no_such_thing  # type: ignore[attr-defined]


def test_the_readme_example_imports_only_from_the_public_api() -> None:
    example = re.search(r"## Embedding.*?```python\n(.*?)```", README, re.S)
    assert example is not None
    imports = re.findall(r"^(?:from|import) (\S+)", example.group(1), re.M)
    assert imports == ["hango"]


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
