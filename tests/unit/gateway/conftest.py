from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakeapi import FakeAnthropicAPI
from tests.gateway_support import RunningGateway, running_gateway


@pytest.fixture
def upstream() -> Iterator[FakeAnthropicAPI]:
    with FakeAnthropicAPI() as api:
        yield api


@pytest.fixture
def gateway(upstream: FakeAnthropicAPI, tmp_path: Path) -> Iterator[RunningGateway]:
    with running_gateway(upstream.base_url, tmp_path) as running:
        yield running
