"""The compose file and the Dockerfile, checked by parsing (no Docker needed).

Beyond the base services, the wiring rules hold for every service anyone adds: each
dependency exists and uses a valid condition, a ``service_healthy`` dependency has a
healthcheck, and every build points at a Dockerfile that exists.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from hango.core.settings import load_settings

REPO_ROOT = Path(__file__).resolve().parents[2]
CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())
    assert isinstance(loaded, dict)
    return loaded


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, Any]:
    found = compose["services"]
    assert isinstance(found, dict)
    return found


def command_text(service: dict[str, Any]) -> str:
    command = service["command"]
    return command if isinstance(command, str) else " ".join(command)


def healthcheck_text(service: dict[str, Any]) -> str:
    test = service["healthcheck"]["test"]
    return test if isinstance(test, str) else " ".join(test)


def test_uses_the_compose_specification_without_version(compose: dict[str, Any]) -> None:
    assert "version" not in compose
    assert {"postgres", "redis", "migrate"} <= set(compose["services"])


def test_postgres_is_healthchecked_with_pg_isready(services: dict[str, Any]) -> None:
    postgres = services["postgres"]
    assert "pg_isready" in healthcheck_text(postgres)
    assert "start_period" in postgres["healthcheck"]
    assert {"POSTGRES_USER", "POSTGRES_DB"} <= set(postgres["environment"])


def test_redis_persists_and_never_evicts(services: dict[str, Any]) -> None:
    redis = services["redis"]
    assert "--appendonly yes" in command_text(redis)
    assert "--maxmemory-policy noeviction" in command_text(redis)
    assert healthcheck_text(redis) == "CMD redis-cli ping"


def test_migrate_runs_alembic_once_postgres_is_healthy(services: dict[str, Any]) -> None:
    migrate = services["migrate"]
    assert command_text(migrate) == "alembic upgrade head"
    assert migrate["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert migrate["restart"] == "no"
    assert migrate["build"]["context"] == "."


def interpolated(value: str, env: dict[str, str]) -> str:
    """``value`` as Compose interpolates it: ``${VAR:?message}`` fails when VAR is unset
    or empty, ``${VAR:-default}`` falls back to the default."""

    def one(found: re.Match[str]) -> str:
        name, kind, rest = found.group(1), found.group(2), found.group(3)
        if env.get(name):
            return env[name]
        if kind == ":?":
            raise LookupError(f"{name}: {rest}")
        return rest or ""

    return re.sub(r"\$\{(\w+)(:\?|:-)?([^}]*)\}", one, value)


def test_hango_environment_is_a_valid_configuration(services: dict[str, Any]) -> None:
    raw = services["migrate"]["environment"]
    env = {"REDIS_PASSWORD": "s3cret", "HANGO_QUEUE_SECRET": "q" * 32}
    environment = {name: interpolated(str(value), env) for name, value in raw.items()}
    # The result-signing secret comes from the environment: compose refuses to start without.
    with pytest.raises(LookupError, match="HANGO_QUEUE_SECRET"):
        interpolated(str(raw["HANGO_QUEUE_SECRET"]), {})
    assert environment["HANGO_DATABASE_URL"].startswith("postgresql+psycopg2://")
    assert "@postgres:5432/" in environment["HANGO_DATABASE_URL"]
    assert environment["HANGO_REDIS_URL"] == "redis://:s3cret@redis:6379/0"
    settings = load_settings(
        database_url=environment["HANGO_DATABASE_URL"],
        redis_url=environment["HANGO_REDIS_URL"],
        history_backend=environment["HANGO_HISTORY_BACKEND"],
        worker_summarizer=environment["HANGO_WORKER_SUMMARIZER"],
    )
    assert settings.history_backend == "postgres"
    assert interpolated(raw["HANGO_WORKER_SUMMARIZER"], {"HANGO_WORKER_SUMMARIZER": "simulated"})


def test_redis_requires_a_password_from_the_environment(services: dict[str, Any]) -> None:
    redis = services["redis"]
    for text_with_secret in (command_text(redis), redis["environment"]["REDISCLI_AUTH"]):
        with pytest.raises(LookupError, match="REDIS_PASSWORD"):
            interpolated(text_with_secret, {})
    assert "--requirepass s3cret" in interpolated(command_text(redis), {"REDIS_PASSWORD": "s3cret"})
    with pytest.raises(LookupError, match="REDIS_PASSWORD"):
        interpolated(services["migrate"]["environment"]["HANGO_REDIS_URL"], {})


def test_every_dependency_exists_and_waits_on_a_valid_condition(
    services: dict[str, Any],
) -> None:
    for name, service in services.items():
        depends_on = service.get("depends_on", {})
        assert isinstance(depends_on, dict), f"{name}: use the long depends_on form"
        for dependency, rule in depends_on.items():
            assert dependency in services, f"{name} depends on unknown {dependency}"
            assert rule["condition"] in CONDITIONS, f"{name} -> {dependency}"
            if rule["condition"] == "service_healthy":
                assert "healthcheck" in services[dependency], f"{dependency} has no healthcheck"
            if rule["condition"] == "service_completed_successfully":
                assert services[dependency].get("restart", "no") == "no", dependency


def test_every_build_has_its_dockerfile(services: dict[str, Any]) -> None:
    built = {name: service["build"] for name, service in services.items() if "build" in service}
    assert "migrate" in built
    for name, build in built.items():
        context = REPO_ROOT / (build if isinstance(build, str) else build["context"])
        dockerfile = (
            "Dockerfile" if isinstance(build, str) else build.get("dockerfile", "Dockerfile")
        )
        assert (context / dockerfile).is_file(), name


def test_dockerfile_installs_every_extra_from_the_constraints_on_python_311_slim() -> None:
    lines = (REPO_ROOT / "Dockerfile").read_text().splitlines()
    instructions = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    assert instructions[0] == "FROM python:3.11-slim"
    # The image runs PostgreSQL-backed services, exports telemetry and runs flower: [all],
    # at the exact versions CI tested.
    assert any(
        line.startswith('RUN pip install -c constraints.txt ".[all]"') for line in instructions
    )
    copied = " ".join(line for line in instructions if line.startswith("COPY"))
    needed_files = ("pyproject.toml", "README.md", "LICENSE", "alembic.ini", "constraints.txt")
    for needed in (*needed_files, "shared", "worker", "migrations"):
        assert needed in copied, needed
    assert "WORKDIR /app" in instructions


def _published(service: dict[str, Any]) -> list[str]:
    return [str(port) for port in service.get("ports", [])]


def test_ports_are_loopback_and_do_not_clash_with_local_services(
    services: dict[str, Any],
) -> None:
    """A developer's own PostgreSQL (5432) and Redis (6379) keep their ports."""
    for name, service in services.items():
        for port in _published(service):
            assert port.startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"
            host_port = port.split(":")[1]
            assert not host_port.endswith(("5432", "6379")), f"{name} takes {host_port}"
            assert "-5432}" not in host_port and "-6379}" not in host_port


def test_grafana_has_no_anonymous_access_and_takes_its_password_from_the_environment(
    services: dict[str, Any],
) -> None:
    environment = services["grafana"]["environment"]
    assert str(environment.get("GF_AUTH_ANONYMOUS_ENABLED", "false")).lower() == "false"
    assert "GF_AUTH_ANONYMOUS_ORG_ROLE" not in environment
    assert environment["GF_SECURITY_ADMIN_PASSWORD"].startswith("${GRAFANA_ADMIN_PASSWORD")
    assert environment["GF_SECURITY_ADMIN_PASSWORD"] != "${GRAFANA_ADMIN_PASSWORD:-admin}"


def test_flower_credentials_come_from_the_environment_with_no_default(
    services: dict[str, Any],
) -> None:
    configured = services["flower"]["environment"]["FLOWER_BASIC_AUTH"]
    with pytest.raises(LookupError, match="FLOWER_BASIC_AUTH"):
        interpolated(configured, {})
    assert interpolated(configured, {"FLOWER_BASIC_AUTH": "me:pw"}) == "me:pw"


def test_the_docs_print_no_credentials_and_bind_flower_to_loopback() -> None:
    for doc in ("README.md", "docs/worker.md"):
        text = (REPO_ROOT / doc).read_text()
        assert not re.findall(r"(?:basic-auth=|-u )(\w+:[\w-]+)", text), doc
        for command in re.findall(r"^celery -A hango_worker flower.*$", text, re.M):
            assert "--address=127.0.0.1" in command, (doc, command)
