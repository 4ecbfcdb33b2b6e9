"""One turn at a time per session, against the real PostgreSQL, from separate processes."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Engine

from hango.store import Store
from tests.lease_checks import assert_turns_serialized, run_processes

pytestmark = pytest.mark.integration


def test_eight_processes_on_one_session_take_turns(
    pg_url: str, pg_engine: Engine, tmp_path: Path
) -> None:
    ran = run_processes(pg_url, "busy", processes=8, turns=3, home=tmp_path)

    assert sorted(ran) == list(range(1, 25))  # unique and consecutive turn numbers
    assert_turns_serialized(Store(pg_engine), "busy", turns=24)
