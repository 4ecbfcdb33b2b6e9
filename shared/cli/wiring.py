"""What every command needs before it runs: settings, telemetry, a provider, a queue check.

Flags override the ``HANGO_*`` environment (a flag left unset leaves the environment's
value); the settings are then built once and passed down, as everywhere in the product.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hango.core.errors import ConfigError, QueueUnavailableError
from hango.core.settings import Settings, load_settings
from hango.history.base import HistoryBackend
from hango.history.local import LocalHistory
from hango.middleware.observer import LoopObserver
from hango.providers.base import Provider
from hango.telemetry.names import PURPOSE_CHAT, PURPOSE_SUMMARIZE
from hango.telemetry.observer import TelemetryObserver
from hango.telemetry.provider import instrument_provider
from hango.telemetry.setup import TelemetryHandle, setup_telemetry

if TYPE_CHECKING:
    from hango.store import Store

SERVICE_NAME = "hango"
WORKER_PING_TIMEOUT = 3.0


def settings_with(**overrides: Any) -> Settings:
    """The settings from the environment, with every override that is not ``None``."""
    return load_settings(**{key: value for key, value in overrides.items() if value is not None})


def store_settings(args: Any) -> Settings:
    """The settings with the store flags of a command (``add_store_options``) applied."""
    return settings_with(
        database_url=args.database_url, history_root=getattr(args, "history_root", None)
    )


def existing_store(settings: Settings) -> Store | None:
    """The store, or ``None`` when it is a SQLite file that was never created."""
    from sqlalchemy.engine import make_url

    from hango.store import Store

    url = make_url(settings.database_url)
    database = url.database
    on_disk = url.get_backend_name() == "sqlite" and database and database != ":memory:"
    if on_disk and not Path(str(database)).expanduser().exists():
        return None
    store = Store.from_url(settings.database_url)
    if not on_disk:
        store.require_schema(migrate=settings.auto_migrate)
    return store


def with_window(settings: Settings, max_input_tokens: int | None) -> dict[str, Any]:
    """``model_profiles`` with the model's window replaced by ``max_input_tokens``."""
    profiles = {
        name: p.model_dump(exclude_none=True) for name, p in settings.model_profiles.items()
    }
    if max_input_tokens is not None:
        profiles[settings.model] = {
            **profiles.get(settings.model, {}),
            "max_input_tokens": max_input_tokens,
        }
    return profiles


def anthropic_provider(settings: Settings) -> Provider:
    """The real API's provider; a clear error up front when there is no key."""
    if settings.anthropic_api_key is None:
        raise ConfigError(
            "no Anthropic API key: set ANTHROPIC_API_KEY (or HANGO_ANTHROPIC_API_KEY)",
            variable="ANTHROPIC_API_KEY",
        )
    from hango.providers.anthropic import AnthropicProvider

    return AnthropicProvider.from_settings(settings)


@contextmanager
def telemetry(*, instrument_celery: bool = False) -> Iterator[TelemetryHandle]:
    """OpenTelemetry export as the ``OTEL_*`` environment asks (nothing when it asks nothing)."""
    handle = setup_telemetry(SERVICE_NAME, celery_role="producer" if instrument_celery else None)
    try:
        yield handle
    finally:
        handle.shutdown()


def instrumented(
    handle: TelemetryHandle, provider: Provider, summarizer: Provider
) -> tuple[Provider, Provider, LoopObserver]:
    """The agent's and the summarizer's providers as spans, plus the loop's observer."""
    chat = instrument_provider(provider, handle.telemetry, purpose=PURPOSE_CHAT)
    summary = instrument_provider(summarizer, handle.telemetry, purpose=PURPOSE_SUMMARIZE)
    return chat, summary, TelemetryObserver(handle.telemetry)


def require_worker(settings: Settings) -> None:
    """Fail clearly unless Redis is configured and at least one worker answers a ping."""
    if not settings.redis_url:
        raise QueueUnavailableError("--queue needs HANGO_REDIS_URL (e.g. redis://127.0.0.1:6379/0)")
    from hango.queue.dispatch import producer_app

    app = producer_app(settings)
    try:
        replies = app.control.ping(timeout=WORKER_PING_TIMEOUT)
    except Exception as error:  # kombu raises its own connection errors
        raise QueueUnavailableError(
            f"cannot reach the broker at HANGO_REDIS_URL: {type(error).__name__}: {error}"
        ) from None
    finally:
        app.close()
    if not replies:
        raise QueueUnavailableError(
            f"no Celery worker answered within {WORKER_PING_TIMEOUT:.0f}s on HANGO_REDIS_URL"
        )


def history_file(history: HistoryBackend, virtual_path: str) -> str:
    """The path to show for a history file: the real file for the local backend."""
    if isinstance(history, LocalHistory):
        return str(Path(history.root) / virtual_path.lstrip("/"))
    return f"{virtual_path} (in the database's history table)"
