"""What a host application installs: ranges, extras, the one constraints file, the licence,
and the migrations found through the package."""

from __future__ import annotations

import importlib.resources
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from hango.store.repository import migrations_dir

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _requirements() -> list[Requirement]:
    """Every requirement of the base install and of each extra, but the extras' own."""
    specs = list(PROJECT["dependencies"])
    for extra in PROJECT["optional-dependencies"].values():
        specs.extend(extra)
    return [r for spec in specs if (r := Requirement(spec)).name != PROJECT["name"]]


def test_no_requirement_is_an_exact_pin() -> None:
    for requirement in _requirements():
        operators = {spec.operator for spec in requirement.specifier}
        assert not operators & {"==", "==="}, f"{requirement} is pinned (use constraints.txt)"


def test_the_base_install_carries_no_opentelemetry_sdk_and_no_database_driver() -> None:
    base = {Requirement(spec).name for spec in PROJECT["dependencies"]}
    assert "opentelemetry-api" in base
    assert not {"opentelemetry-sdk", "psycopg2", "psycopg2-binary", "flower"} & base
    extras = PROJECT["optional-dependencies"]
    assert {"postgres", "otel", "flower", "gateway", "all"} <= set(extras)
    assert extras["all"] == ["hango-context[postgres,otel,flower,gateway]"]


def test_every_installed_requirement_is_pinned_in_the_constraints_file() -> None:
    pinned = {
        line.split("==")[0].strip().lower().replace("_", "-")
        for line in (ROOT / "constraints.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    }
    for requirement in _requirements():
        assert requirement.name.lower() in pinned, f"{requirement.name} not in constraints.txt"


def test_the_licence_file_is_the_declared_mit_licence_and_ships() -> None:
    assert PROJECT["license"] == "MIT"
    assert PROJECT["license-files"] == ["LICENSE"]
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")


def test_migrations_are_found_through_the_package_from_any_directory(tmp_path: Path) -> None:
    decoy = tmp_path / "migrations"
    decoy.mkdir()
    (decoy / "env.py").write_text("raise SystemExit('the decoy ran')\n")
    code = "from hango.store.repository import migrations_dir; print(migrations_dir())"
    found = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert Path(found) == migrations_dir() == importlib.resources.files("hango.migrations")
    assert (Path(found) / "env.py").is_file() and Path(found) != decoy


def test_a_package_without_env_py_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.resources, "files", lambda _name: Path("/nonexistent"))
    with pytest.raises(FileNotFoundError, match=r"hango\.migrations holds no Alembic env\.py"):
        migrations_dir()
