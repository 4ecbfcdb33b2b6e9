"""Settings: defaults, and start-up errors that name the bad variable."""

from __future__ import annotations

import logging
import os
import re
import uuid
from pathlib import Path

import pytest

from hango.core.errors import ConfigError
from hango.core.settings import Settings, load_settings, unknown_variables


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sees only the variables it sets."""
    for name in list(os.environ):
        if name.startswith("HANGO_") or name == "ANTHROPIC_API_KEY":
            monkeypatch.delenv(name)


def config_error(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> ConfigError:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as caught:
        load_settings()
    return caught.value


def test_defaults_are_embedded_and_sensible(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    settings = load_settings()
    assert settings.home == tmp_path / "data" / "hango"
    assert settings.database_url == f"sqlite:///{tmp_path / 'data' / 'hango' / 'hango.db'}"
    assert settings.database_in_home and not settings.auto_migrate
    assert settings.history_backend == "local"
    assert settings.history_root == tmp_path / "data" / "hango" / "history"
    assert (settings.context_trigger_frac, settings.context_keep_frac) == (0.85, 0.10)
    assert settings.estimator == "tiktoken"
    assert settings.model_profiles == {}
    assert settings.summarizer_model is None


def test_values_are_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HANGO_CONTEXT_TRIGGER_FRAC", "0.7")
    monkeypatch.setenv("HANGO_TOOL_ARG_MAX_TOKENS", "500")
    monkeypatch.setenv(
        "HANGO_MODEL_PROFILES", '{"local-llm": {"max_input_tokens": 32000, "keep_frac": 0.2}}'
    )
    settings = load_settings()
    assert settings.context_trigger_frac == 0.7
    assert settings.tool_arg_max_tokens == 500
    profile = settings.model_profiles["local-llm"]
    assert (profile.max_input_tokens, profile.keep_frac, profile.trigger_frac) == (32000, 0.2, None)


def test_bad_json_in_model_profiles(monkeypatch: pytest.MonkeyPatch) -> None:
    error = config_error(monkeypatch, "HANGO_MODEL_PROFILES", '{"claude-x": {max_input_tokens')
    assert error.variable == "HANGO_MODEL_PROFILES"
    assert str(error).startswith("HANGO_MODEL_PROFILES: not valid JSON")


@pytest.mark.parametrize(
    ("profiles", "where", "says"),
    [
        ('{"m": {"max_input_tokens": 0}}', "m.max_input_tokens", "greater than 0"),
        ('{"m": {"max_input_tokens": true}}', "m.max_input_tokens", "valid integer"),
        ('{"m": {"trigger_frac": 0.5}}', "m.max_input_tokens", "required"),
        ('{"m": {"max_input_tokens": 9, "colour": "red"}}', "m.colour", "Extra inputs"),
        ('{"m": {"max_input_tokens": 9, "keep_frac": 1}}', "m.keep_frac", "less than 1"),
        ('{"m": {"max_input_tokens": 9, "summarizer_model": ""}}', "m.summarizer_model", "1 char"),
    ],
)
def test_a_profile_with_a_bad_field_names_the_variable_and_the_field(
    monkeypatch: pytest.MonkeyPatch, profiles: str, where: str, says: str
) -> None:
    error = config_error(monkeypatch, "HANGO_MODEL_PROFILES", profiles)
    assert error.variable == "HANGO_MODEL_PROFILES"
    assert str(error).startswith(f"HANGO_MODEL_PROFILES at {where}: ")
    assert says in str(error)


def test_model_profiles_must_be_an_object(monkeypatch: pytest.MonkeyPatch) -> None:
    error = config_error(monkeypatch, "HANGO_MODEL_PROFILES", "[1, 2]")
    assert error.variable == "HANGO_MODEL_PROFILES"
    assert "valid dictionary" in str(error)


@pytest.mark.parametrize("value", ["1.5", "0", "-0.1", "nan", "half"])
def test_trigger_fraction_out_of_range(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    error = config_error(monkeypatch, "HANGO_CONTEXT_TRIGGER_FRAC", value)
    assert error.variable == "HANGO_CONTEXT_TRIGGER_FRAC"
    assert str(error).startswith("HANGO_CONTEXT_TRIGGER_FRAC: ")
    assert repr(value) in str(error)


def test_keep_fraction_must_be_below_one(monkeypatch: pytest.MonkeyPatch) -> None:
    error = config_error(monkeypatch, "HANGO_CONTEXT_KEEP_FRAC", "1")
    assert error.variable == "HANGO_CONTEXT_KEEP_FRAC"
    assert "less than 1" in str(error)


def test_unknown_history_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    error = config_error(monkeypatch, "HANGO_HISTORY_BACKEND", "s3")
    assert error.variable == "HANGO_HISTORY_BACKEND"
    assert "'local' or 'postgres'" in str(error)
    assert "'s3'" in str(error)


def test_postgres_history_needs_a_postgres_database(monkeypatch: pytest.MonkeyPatch) -> None:
    error = config_error(monkeypatch, "HANGO_HISTORY_BACKEND", "postgres")
    assert error.variable == "HANGO_HISTORY_BACKEND"
    assert "HANGO_DATABASE_URL" in str(error)
    monkeypatch.setenv("HANGO_DATABASE_URL", "postgresql://postgres@127.0.0.1/postgres")
    assert load_settings().history_backend == "postgres"


@pytest.mark.parametrize("value", ["lots", "12.5", "0"])
def test_tool_arg_max_tokens_must_be_a_positive_integer(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    error = config_error(monkeypatch, "HANGO_TOOL_ARG_MAX_TOKENS", value)
    assert error.variable == "HANGO_TOOL_ARG_MAX_TOKENS"
    assert str(error).startswith("HANGO_TOOL_ARG_MAX_TOKENS: ")
    assert repr(value) in str(error)


def test_unknown_estimator(monkeypatch: pytest.MonkeyPatch) -> None:
    error = config_error(monkeypatch, "HANGO_ESTIMATOR", "bytes")
    assert error.variable == "HANGO_ESTIMATOR"
    assert "'tiktoken' or 'heuristic'" in str(error)


def test_a_timeout_must_be_finite(monkeypatch: pytest.MonkeyPatch) -> None:
    error = config_error(monkeypatch, "HANGO_COUNT_TOKENS_TIMEOUT", "inf")
    assert error.variable == "HANGO_COUNT_TOKENS_TIMEOUT"
    assert "finite" in str(error)


def test_an_empty_variable_means_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HANGO_MODEL", "HANGO_SUMMARIZER_MODEL", "HANGO_HISTORY_ROOT"):
        monkeypatch.setenv(name, "")
    monkeypatch.setenv("HANGO_MODEL_PROFILES", "")
    settings = load_settings()
    assert settings.model == Settings.model_fields["model"].default
    assert settings.model.startswith("claude-")
    assert settings.summarizer_model is None
    assert settings.history_root == settings.home / "history"
    assert settings.model_profiles == {}


def test_a_blank_model_name_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    error = config_error(monkeypatch, "HANGO_MODEL", "   ")
    assert error.variable == "HANGO_MODEL"


def test_explicit_overrides_are_checked_like_the_environment() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(context_trigger_frac=2)
    assert caught.value.variable == "HANGO_CONTEXT_TRIGGER_FRAC"


def test_state_is_found_from_any_directory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The home and the paths in it are absolute: another working directory finds them."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HANGO_HOME", "state")
    first = load_settings()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    monkeypatch.setenv("HANGO_HOME", str(tmp_path / "state"))
    second = load_settings()
    assert first.home == second.home == tmp_path / "state"
    assert (first.database_url, first.history_root) == (second.database_url, second.history_root)


def test_relative_sqlite_and_history_paths_are_made_absolute(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    settings = load_settings(database_url="sqlite:///db/x.db?timeout=3", history_root="h")
    assert settings.database_url == f"sqlite:///{tmp_path / 'db' / 'x.db'}?timeout=3"
    assert settings.history_root == tmp_path / "h"
    assert not settings.database_in_home
    assert load_settings(database_url="sqlite:///:memory:").database_url == "sqlite:///:memory:"


def test_an_unsupported_database_is_one_line_listing_the_supported_ones() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(database_url="mysql://app:s3cret@db/app")
    message = str(caught.value)
    assert caught.value.variable == "HANGO_DATABASE_URL"
    assert "unsupported database 'mysql'" in message
    assert "sqlite:///PATH" in message and "postgresql://" in message
    assert "s3cret" not in message and "\n" not in message


def test_a_mistyped_variable_is_reported_with_the_closest_setting(
    caplog: pytest.LogCaptureFixture,
) -> None:
    environ = {
        "HANGO_MODLE": "claude-haiku-4-5",  # a typo of HANGO_MODEL
        "HANGO_DATABSE_URL": "sqlite:///x.db",  # of HANGO_DATABASE_URL
        "HANGO_ZZZ_QQQ": "1",  # close to nothing
        "HANGO_MODEL": "claude-haiku-4-5",  # a setting
        "HANGO_POSTGRES_PORT": "5433",  # compose's, not a setting: never reported
        "PATH": "/bin",
    }
    assert unknown_variables(environ) == {
        "HANGO_DATABSE_URL": "HANGO_DATABASE_URL",
        "HANGO_MODLE": "HANGO_MODEL",
        "HANGO_ZZZ_QQQ": None,
    }


def test_load_settings_warns_of_each_unknown_variable(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    typo = f"HANGO_SESION_LEASE_TTL_{uuid.uuid4().hex[:6].upper()}"
    monkeypatch.setenv(typo, "5")
    with caplog.at_level(logging.WARNING, logger="hango.core.settings"):
        load_settings()
    said = [r.getMessage() for r in caplog.records if typo in r.getMessage()]
    assert said == [
        f"{typo} is not a hango setting and is ignored (did you mean HANGO_SESSION_LEASE_TTL?)"
    ]


def test_every_hango_variable_the_repository_names_is_known() -> None:
    """A variable the docs, compose or the code read is a setting or a listed non-setting,
    so the typo warning never fires on a name the product itself uses."""
    root = Path(__file__).resolve().parents[3]
    texts = [root / "README.md", root / "docker-compose.yml", *(root / "docs").rglob("*.md")]
    named = {n for path in texts for n in re.findall(r"\bHANGO_[A-Z_]*[A-Z]\b", path.read_text())}
    code = [*root.glob("shared/**/*.py"), *root.glob("worker/*.py"), *root.glob("bench/*.py")]
    read = r"(?:environ\.get\(|environ\[|getenv\()\s*[\"'](HANGO_\w+)"
    named |= {n for path in code for n in re.findall(read, path.read_text())}
    documented_typos = {"HANGO_MODLE"}  # the README's example of a mistyped variable
    assert named - documented_typos, "the scan found nothing"
    assert unknown_variables(dict.fromkeys(named - documented_typos, "")) == {}
