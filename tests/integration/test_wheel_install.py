"""The wheel, installed the way a user installs it: a fresh venv (no system site-packages,
no editable checkout), run from a directory holding its own ``shared/`` package and
``worker.py``, with a fresh HOME and no ``HANGO_*`` variables.

One venv for every check of issue 21's "Done when": installing is the slow part.
"""

from __future__ import annotations

import email.parser
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from sqlalchemy import create_engine, text

from tests.integration.conftest import create_database, drop_database
from tests.integration.redis_server import own_redis, redis_server_available

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
DECOY = "raise SystemExit('the user\\'s own {} was imported instead of hango\\'s')\n"


@dataclass
class Installed:
    wheel: Path
    bin: Path
    project: Path
    env: dict[str, str]
    # What ran while only the base install was there (no extra: no OTel SDK, no driver).
    base_only: dict[str, subprocess.CompletedProcess[str]] = field(default_factory=dict)

    def run(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        command = [str(self.bin / args[0]), *args[1:]]
        return subprocess.run(
            command,
            cwd=self.project,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def _clean_env(home: Path) -> dict[str, str]:
    """The machine's environment without this checkout's venv or any HANGO_/OTEL_ setting."""
    dropped = ("HANGO_", "OTEL_", "VIRTUAL_ENV", "PYTHONPATH", "ANTHROPIC_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
    env.update(HOME=str(home), XDG_DATA_HOME="", NO_COLOR="1")
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin)
    return env


def _checked(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, (
        f"{result.args}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )
    return result


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    base = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "-w",
            str(base / "dist"),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = (base / "dist").glob("hango_context-*.whl")
    venv = base / "venv"
    subprocess.run(["python3", "-m", "venv", str(venv)], check=True, timeout=120)
    project = base / "project"
    (project / "shared").mkdir(parents=True)
    (project / "shared" / "__init__.py").write_text(DECOY.format("shared package"))
    (project / "worker.py").write_text(DECOY.format("worker.py"))
    installed = Installed(wheel, venv / "bin", project, _clean_env(base / "home"))
    _pip_install(installed, str(wheel))
    installed.base_only = _base_only_checks(installed)
    _pip_install(installed, f"{wheel}[postgres]")
    return installed


def _pip_install(installed: Installed, requirement: str) -> None:
    constraints = str(ROOT / "constraints.txt")
    _checked(installed.run("pip", "install", "-q", "-c", constraints, requirement, timeout=600))


def _base_only_checks(installed: Installed) -> dict[str, subprocess.CompletedProcess[str]]:
    """The README's embedding example and the offline simulation, on the base install."""
    readme = (ROOT / "README.md").read_text()
    example = re.search(r"## Embedding.*?```python\n(.*?)```", readme, re.S)
    assert example is not None
    (installed.project / "example.py").write_text(example.group(1))
    extras = ("opentelemetry.sdk", "psycopg2", "flower")
    missing = f"import importlib.util as u; print([m for m in {extras} if u.find_spec(m)])"
    return {
        "extras": installed.run("python", "-c", missing),
        "example": installed.run("python", "example.py"),
        "simulate": installed.run("hango", "simulate", "--turns", "3", "--json", "-q"),
    }


def test_the_base_install_embeds_and_simulates_without_any_extra(installed: Installed) -> None:
    ran = installed.base_only
    assert _checked(ran["extras"]).stdout.strip() == "[]"  # neither the SDK nor the driver
    assert _checked(ran["example"]).stdout.split() == ["1", "2", "1", "It", "has", "3", "words."]
    assert '"turns": 3' in _checked(ran["simulate"]).stdout


def test_the_venv_is_not_the_checkout(installed: Installed) -> None:
    where = _checked(installed.run("python", "-c", "import hango; print(hango.__file__)"))
    assert "site-packages" in where.stdout and str(ROOT) not in where.stdout
    cfg = (installed.bin.parent / "pyvenv.cfg").read_text()
    assert "include-system-site-packages = false" in cfg


def test_version_and_the_public_api_from_a_directory_with_its_own_shared(
    installed: Installed,
) -> None:
    assert _checked(installed.run("hango", "--version")).stdout.split()[-1] == "0.1.0"
    code = "import hango; print(hango.build_agent.__module__, hango.Tool.__name__)"
    printed = _checked(installed.run("python", "-c", code)).stdout.split()
    assert printed == ["hango.wiring.agent", "Tool"]


def test_simulate_migrated_its_own_sqlite_in_the_user_data_dir(installed: Installed) -> None:
    assert (Path(installed.env["HOME"]) / ".local/share/hango/hango.db").is_file()


@pytest.fixture
def fresh_pg() -> Iterator[str]:
    url = create_database()
    try:
        yield url
    finally:
        drop_database(url)


def test_migrate_a_fresh_postgresql_database(installed: Installed, fresh_pg: str) -> None:
    _checked(installed.run("hango", "migrate", "--database-url", fresh_pg))
    engine = create_engine(fresh_pg)
    try:
        with engine.connect() as conn:
            revision = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
    finally:
        engine.dispose()
    heads = sorted((ROOT / "migrations" / "versions").glob("*.py"))
    assert revision is not None and heads[-1].name.startswith(revision)


def test_alembic_upgrade_head_with_the_repository_alembic_ini(
    installed: Installed, fresh_pg: str
) -> None:
    """As the image's migrate service runs it: alembic.ini beside, the scripts in the wheel."""
    shutil.copy(ROOT / "alembic.ini", installed.project / "alembic.ini")
    env = {**installed.env, "HANGO_DATABASE_URL": fresh_pg}
    upgraded = subprocess.run(
        [str(installed.bin / "alembic"), "upgrade", "head"],
        cwd=installed.project, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert upgraded.returncode == 0, upgraded.stderr[-3000:]
    current = subprocess.run(
        [str(installed.bin / "alembic"), "current", "--verbose"],
        cwd=installed.project, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert "(head)" in _checked(current).stdout
    assert "site-packages/hango/migrations/versions/" in current.stdout


@pytest.mark.skipif(not redis_server_available(), reason="needs redis-server")
def test_the_worker_app_starts_and_answers_a_ping(
    installed: Installed, fresh_pg: str, tmp_path: Path
) -> None:
    _checked(installed.run("hango", "migrate", "--database-url", fresh_pg))
    with own_redis(tmp_path, append_only=False) as redis_server:
        env = {
            **installed.env,
            "HANGO_REDIS_URL": redis_server.url,
            "HANGO_DATABASE_URL": fresh_pg,
            "HANGO_WORKER_SUMMARIZER": "simulated",
            # Queue mode refuses to start without the secret that signs every result.
            "HANGO_QUEUE_SECRET": secrets.token_hex(32),
        }
        node = f"wheeltest-{os.getpid()}@{socket.gethostname()}"
        worker = subprocess.Popen(
            [
                str(installed.bin / "celery"),
                "-A",
                "hango_worker",
                "worker",
                "-Q",
                "summarize",
                "-P",
                "solo",
                "-n",
                node,
                "--loglevel",
                "WARNING",
            ],
            cwd=installed.project,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            answered = _ping_until_answered(installed, env, node, worker)
        finally:
            worker.terminate()
            output, _ = worker.communicate(timeout=60)
        assert answered, output[-3000:]


def _ping_until_answered(
    installed: Installed, env: dict[str, str], node: str, worker: subprocess.Popen[str]
) -> bool:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and worker.poll() is None:
        ping = subprocess.run(
            [
                str(installed.bin / "celery"),
                "-A",
                "hango_worker",
                "inspect",
                "ping",
                "-d",
                node,
                "--timeout",
                "3",
            ],
            cwd=installed.project,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if ping.returncode == 0 and "pong" in ping.stdout:
            return True
        time.sleep(1)
    return False


def test_the_wheel_carries_the_licence_and_pins_nothing(installed: Installed) -> None:
    with zipfile.ZipFile(installed.wheel) as wheel:
        names = wheel.namelist()
        metadata_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = email.parser.Parser().parsestr(wheel.read(metadata_name).decode())
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert metadata["License-Expression"] == "MIT"
    requirements = [Requirement(spec) for spec in metadata.get_all("Requires-Dist") or []]
    assert requirements
    for requirement in requirements:
        pinned = {s.operator for s in requirement.specifier} & {"==", "==="}
        assert not pinned, str(requirement)
    assert any(n.startswith("hango/migrations/versions/0001_") for n in names)
