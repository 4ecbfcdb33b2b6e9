"""Every Celery connection of the product uses the Redis transport that survives a restart.

The behaviour itself (a worker with a task in flight outliving a Redis restart) needs a
real server and worker: tests/integration/test_redis_restart.py.
"""

from __future__ import annotations

import pytest
from kombu import Connection

from hango.core.settings import load_settings
from hango.queue.dispatch import producer_app
from hango.queue.redis_transport import Transport


@pytest.mark.parametrize("url", ["redis://127.0.0.1:6379/3", "rediss://127.0.0.1:6380/0"])
def test_the_product_apps_connect_through_the_fixed_transport_and_keep_the_scheme(
    url: str,
) -> None:
    app = producer_app(load_settings(redis_url=url))
    try:
        connection = app.connection_for_write()
        assert isinstance(connection.transport, Transport)
        # Flower chooses its queue-length reader by this scheme.
        assert connection.as_uri().startswith(url.split("://")[0] + "://")
    finally:
        app.close()


def test_a_plain_kombu_connection_in_the_same_process_gets_it_too() -> None:
    producer_app(load_settings(redis_url="redis://127.0.0.1:6379/3")).close()
    assert isinstance(Connection("redis://127.0.0.1:6379/3").transport, Transport)
