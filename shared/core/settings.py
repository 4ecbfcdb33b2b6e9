"""The one settings object, built once from ``HANGO_*`` at start-up and passed down.

Nothing else in the product reads ``os.environ`` for its own configuration. A bad value
fails here, at start-up, with a :class:`~hango.core.errors.ConfigError` naming the variable.

Where state lives is decided here, once: ``HANGO_HOME`` (default a per-user data directory)
holds the default database and history root, as absolute paths, so every command finds
the same state from whatever directory it runs in.
"""

from __future__ import annotations

import difflib
import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import platformdirs
from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict, SettingsError

from hango.core.errors import ConfigError
from hango.core.price import Price

ENV_PREFIX = "HANGO_"
APP_NAME = "hango"
# HANGO_* variables that are not settings: read by docker-compose.yml, the benchmarks, the
# tests and the README's example. Any other HANGO_* name is most likely a typo.
NOT_SETTINGS = frozenset({
    "HANGO_POSTGRES_PORT", "HANGO_REDIS_PORT", "HANGO_FLOWER_PORT",
    "HANGO_SUMMARIZE_CONCURRENCY", "HANGO_OFFLOAD_CONCURRENCY",
    "HANGO_BENCH_REDIS_URL", "HANGO_CORPUS_DIR", "HANGO_TEST_PG_ADMIN_URL",
    "HANGO_TEST_REDIS_HOST", "HANGO_EXAMPLE_LIVE",
    "HANGO_UPSTREAM_URL", "HANGO_GATEWAY_SECRET",  # read by `hango serve` itself
})  # fmt: skip

log = logging.getLogger(__name__)
DATABASE_FILE = "hango.db"
HISTORY_DIR = "history"

# The schemes the store has drivers for; anything else fails at start-up, not at first use.
SUPPORTED_DATABASES = ("sqlite:///PATH", "postgresql://USER:PASSWORD@HOST:PORT/DB")
_SUPPORTED_SCHEMES = re.compile(r"^(sqlite|postgres|postgresql|postgresql\+psycopg2)://")
_SQLITE_FILE = re.compile(r"^sqlite(?:\+pysqlite)?:///(?P<path>[^?]*)(?P<query>\?.*)?$")

ModelName = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]


class ProfileOverride(BaseModel):
    """One entry of ``HANGO_MODEL_PROFILES``."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    # strict: JSON ``true`` is not a window of 1 token.
    max_input_tokens: int = Field(gt=0, strict=True)
    trigger_frac: float | None = Field(default=None, gt=0, le=1)
    keep_frac: float | None = Field(default=None, gt=0, lt=1)
    summarizer_model: ModelName | None = None
    # USD per million tokens: {"base_input", "cache_write_5m", "cache_read", "output"}.
    price: Price | None = None
    min_cacheable_tokens: int | None = Field(default=None, ge=0, strict=True)


class Settings(BaseSettings):
    """Every knob of the product. Field ``x`` is read from ``HANGO_X``."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        frozen=True,
        extra="ignore",
        populate_by_name=True,
        # ``HANGO_X=`` means "not set" (as in compose files), not an empty model name or
        # a history root of ``.``; and no timeout or fraction may be inf or nan.
        env_ignore_empty=True,
        allow_inf_nan=False,
    )

    # Models already warned about as unknown: the profiles a command builds from these
    # settings (its report's and the agent's) say it once between them.
    _unknown_models_warned: set[str] = PrivateAttr(default_factory=set)

    model: ModelName = "claude-sonnet-4-6"
    model_profiles: dict[ModelName, ProfileOverride] = Field(default_factory=dict)
    summarizer_model: ModelName | None = None
    context_trigger_frac: float = Field(default=0.85, gt=0, le=1)
    context_keep_frac: float = Field(default=0.10, gt=0, lt=1)
    context_target_frac: float = Field(default=0.60, gt=0, lt=1)
    replay_max_bytes: int = Field(default=64 * 1024 * 1024, gt=0)
    # No summary is dispatched ahead of the trigger below this share of the window; past it
    # the session's pace decides when (with the pace off: at once). Off at/above the trigger.
    context_presummarize_frac: float = Field(default=0.40, gt=0, le=1)
    context_presummarize_pace: bool = True
    # ``auto`` prices both routes of an in-process summary per compaction; ``range`` (the
    # summarizer over the evicted range) or ``prefix`` (the agent's warm cache) forces one.
    summary_route: Literal["auto", "range", "prefix"] = "auto"
    tool_arg_max_tokens: int = Field(default=2000, gt=0)
    tool_arg_clear_at_least: int = Field(default=10_000, ge=0)
    tool_result_offload_tokens: int = Field(default=20000, gt=0)
    estimator: Literal["tiktoken", "heuristic"] = "tiktoken"

    # One turn at a time per session (store/leases.py): a crashed holder's lease expires
    # after the ttl; a second run_turn waits session_busy_timeout, then SessionBusyError.
    session_lease_ttl: float = Field(default=30.0, gt=0)
    session_busy_timeout: float = Field(default=60.0, ge=0)

    # `hango serve` answers the history tool itself: at most this many internal rounds
    # (upstream calls answering it) per client request; 0 never offers the tool.
    gateway_history_rounds: int = Field(default=4, ge=0)

    home: Path = Field(default_factory=lambda: user_data_dir())
    # Both default to a place inside ``home`` (filled in by ``_state_in_home``).
    database_url: str = ""
    auto_migrate: bool = False
    redis_url: str | None = None
    history_backend: Literal["local", "postgres"] = "local"
    history_root: Path = Path()

    anthropic_api_key: SecretStr | None = Field(
        default=None,
        validation_alias=AliasChoices("HANGO_ANTHROPIC_API_KEY", "ANTHROPIC_API_KEY"),
    )
    anthropic_base_url: str | None = None
    provider_timeout: float = Field(default=120.0, gt=0)
    provider_max_retries: int = Field(default=2, ge=0)
    count_tokens_timeout: float = Field(default=2.0, gt=0)
    count_tokens_band: float = Field(default=0.10, ge=0, le=1)
    summarizer_timeout: float = Field(default=60.0, gt=0)
    queue_deadline: float = Field(default=90.0, gt=0)

    # The worker system (shared/queue, worker/). The limits nest:
    # summarizer_timeout < worker_soft_time_limit < worker_time_limit < queue_visibility_timeout,
    # checked when the Celery configuration is built (hango.queue.celery_config).
    # anthropic | extractive | simulated | package.module:factory
    worker_summarizer: str = "anthropic"
    # Seconds the simulation's scripted summarizer takes per summary (worker and in-process).
    simulated_summarizer_latency: float = Field(default=0.0, ge=0)
    worker_soft_time_limit: float = Field(default=90.0, gt=0)
    worker_time_limit: float = Field(default=120.0, gt=0)
    queue_visibility_timeout: float = Field(default=600.0, gt=0)
    queue_restore_interval: int = Field(default=10, gt=0)
    queue_lease_ttl: float = Field(default=15.0, gt=0)
    queue_enqueue_ttl: float = Field(default=30.0, gt=0)
    queue_result_ttl: float = Field(default=7 * 24 * 3600.0, gt=0)
    # Signs every committed result (hango.queue.signing); required with HANGO_REDIS_URL.
    queue_secret: SecretStr | None = None

    @model_validator(mode="before")
    @classmethod
    def _state_in_home(cls, data: Any) -> Any:
        """The database and history root default to absolute places inside ``home``."""
        if not isinstance(data, dict):
            return data
        home = Path(data.get("home") or user_data_dir()).expanduser().absolute()
        filled = {**data, "home": home}
        if not data.get("database_url"):
            filled["database_url"] = f"sqlite:///{home / DATABASE_FILE}"
        if not data.get("history_root"):
            filled["history_root"] = home / HISTORY_DIR
        return filled

    @field_validator("database_url", mode="after")
    @classmethod
    def _supported_database(cls, value: str) -> str:
        if not _SUPPORTED_SCHEMES.match(value):
            scheme = value.split("://", 1)[0]
            raise ValueError(
                f"unsupported database {scheme!r}: use {' or '.join(SUPPORTED_DATABASES)}"
            )
        path = sqlite_path(value)
        if path is not None and not path.is_absolute():
            # Absolute, so the same database is found from every directory and in hints.
            found = _SQLITE_FILE.match(value)
            assert found is not None
            return f"sqlite:///{path.expanduser().absolute()}{found.group('query') or ''}"
        return value

    @field_validator("history_root", mode="after")
    @classmethod
    def _absolute_root(cls, value: Path) -> Path:
        # Stored in records and hints as given: a relative root would mean another
        # directory for every command run from elsewhere.
        return value.expanduser().absolute()

    @field_validator("anthropic_api_key", mode="before")
    @classmethod
    def _strip_key(cls, value: object) -> object:
        # A key pasted with a trailing newline makes the HTTP client refuse the header and
        # quote it in its error; stripping it here is kinder and keeps it out of errors.
        return value.strip() if isinstance(value, str) else value

    @property
    def database_in_home(self) -> bool:
        """Whether the database is a SQLite file inside ``home`` (whose directories are ours)."""
        path = sqlite_path(self.database_url)
        return path is not None and path.is_relative_to(self.home)

    @model_validator(mode="after")
    def _backend_needs_database(self) -> Settings:
        if self.history_backend == "postgres" and not self.database_url.startswith("postgres"):
            raise ValueError("history_backend 'postgres' needs a PostgreSQL HANGO_DATABASE_URL")
        return self


def user_data_dir() -> Path:
    """The per-user data directory for hango (XDG on Linux, the platform's own elsewhere)."""
    return platformdirs.user_data_path(APP_NAME, appauthor=False)


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite URL; ``None`` for other databases, memory and ``file:`` URIs."""
    found = _SQLITE_FILE.match(url)
    if found is None:
        return None
    path = found.group("path")
    return None if not path or path == ":memory:" or path.startswith("file:") else Path(path)


def env_name(field: str) -> str:
    return ENV_PREFIX + field.upper()


def load_settings(**overrides: Any) -> Settings:
    """Build the settings from the environment (and explicit overrides), or fail clearly;
    warn of each ``HANGO_*`` variable that is no setting, naming the closest one."""
    _report_unknown_variables(os.environ)
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise _config_error(exc) from None
    except SettingsError as exc:
        found = re.search(r'field "([a-z_]+)"', str(exc))
        variable = env_name(found.group(1) if found else "model_profiles")
        raise ConfigError(
            f"{variable}: not valid JSON ({exc.__cause__ or exc})", variable=variable
        ) from None


def unknown_variables(environ: Mapping[str, str]) -> dict[str, str | None]:
    """Each ``HANGO_*`` name in ``environ`` that nothing reads, with the closest setting."""
    known = {env_name(name) for name in Settings.model_fields} | NOT_SETTINGS
    unknown = sorted(n for n in environ if n.startswith(ENV_PREFIX) and n not in known)
    return {name: _closest_setting(name) for name in unknown}


def _closest_setting(name: str) -> str | None:
    # Compared without the shared prefix, which would make every pair look alike.
    fields = [field.upper() for field in Settings.model_fields]
    found = difflib.get_close_matches(name.removeprefix(ENV_PREFIX), fields, n=1, cutoff=0.6)
    return env_name(found[0]) if found else None


def _report_unknown_variables(environ: Mapping[str, str]) -> None:
    for name, closest in unknown_variables(environ).items():
        hint = f"did you mean {closest}?" if closest else "see the README's configuration table"
        log.warning("%s is not a hango setting and is ignored (%s)", name, hint)


def _config_error(exc: ValidationError) -> ConfigError:
    first = exc.errors()[0]
    loc = [str(part) for part in first["loc"]]
    variable = env_name(loc[0]) if loc else "HANGO_HISTORY_BACKEND"
    if loc and loc[0] == "anthropic_api_key":
        variable = "ANTHROPIC_API_KEY"
    where = ".".join(loc[1:])
    detail = f" at {where}" if where else ""
    given = first.get("input")
    shown = "" if isinstance(given, dict) or given is None else f" (got {given!r})"
    message = str(first["msg"]).removeprefix("Value error, ")
    return ConfigError(f"{variable}{detail}: {message}{mask_password(shown)}", variable=variable)


def mask_password(text: str) -> str:
    """``text`` with the password of every URL in it replaced by ``***``."""
    return re.sub(r"(://[^:/@\s]+:)[^@\s]*@", r"\1***@", text)
