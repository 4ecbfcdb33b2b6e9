"""The CLI on a brand-new PostgreSQL database: it names `hango migrate` instead of failing
on a missing table, migrates on first use when asked, and names the database (password
masked) when a session is not there."""

from __future__ import annotations

import json
import re
import shlex

import pytest

from hango.cli import main
from hango.cli.errors import EXIT_DATABASE, EXIT_SESSION

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def offline_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HANGO_REDIS_URL", raising=False)
    monkeypatch.delenv("HANGO_AUTO_MIGRATE", raising=False)
    monkeypatch.setenv("HANGO_ESTIMATOR", "heuristic")


def test_an_unmigrated_database_names_hango_migrate(
    capsys: pytest.CaptureFixture[str], fresh_pg_url: str
) -> None:
    for argv in (["sessions", "list"], ["simulate", "--turns", "1"]):
        assert main([*argv, "--database-url", fresh_pg_url]) == EXIT_DATABASE
        err = capsys.readouterr().err
        advice = re.search(r"`(hango migrate[^`]*)`", err)
        assert advice is not None and err.count("\n") == 1, err
        assert "relation" not in err
        # The advice names the database given, so it runs as printed.
        assert shlex.split(advice.group(1))[2:] == ["--database-url", fresh_pg_url]
    assert main(shlex.split(advice.group(1))[1:]) == 0
    assert main(["sessions", "list", "--database-url", fresh_pg_url]) == 0


def test_migrate_on_first_use_when_asked(
    capsys: pytest.CaptureFixture[str], fresh_pg_url: str
) -> None:
    argv = ["simulate", "--turns", "2", "--json", "--database-url", fresh_pg_url, "--migrate"]
    assert main(argv) == 0, capsys.readouterr().err
    session = json.loads(capsys.readouterr().out)["session_id"]
    assert main(["sessions", "list", "--json", "--database-url", fresh_pg_url]) == 0
    assert [s["id"] for s in json.loads(capsys.readouterr().out)] == [session]
    assert main(["migrate", "--database-url", fresh_pg_url]) == 0
    assert "already at the latest schema revision" in capsys.readouterr().err


def test_not_found_names_the_database_with_the_password_masked(
    capsys: pytest.CaptureFixture[str], pg_url: str
) -> None:
    with_password = pg_url.replace("postgres@", "postgres:pw-secret@", 1)
    assert main(["sessions", "show", "nobody", "--database-url", with_password]) == EXIT_SESSION
    err = capsys.readouterr().err
    assert "no session 'nobody' in postgresql" in err
    assert "pw-secret" not in err and "***" in err
