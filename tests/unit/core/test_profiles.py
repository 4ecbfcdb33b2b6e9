"""Model profiles: the built-in table, overrides, settings defaults, the unknown fallback."""

from __future__ import annotations

import logging
import uuid

import pytest

from hango.core.profiles import (
    FALLBACK_KEEP_LAST,
    FALLBACK_TRIGGER_TOKENS,
    ModelProfile,
    Profiles,
    base_model_id,
)
from hango.core.settings import ProfileOverride, Settings


def settings(**fields: object) -> Settings:
    return Settings.model_validate(fields)


@pytest.mark.parametrize(
    ("model", "window"),
    [
        ("claude-opus-4-8", 1_000_000),
        ("claude-opus-4-6", 1_000_000),
        ("claude-opus-4-5-20251101", 200_000),
        ("claude-sonnet-4-6", 1_000_000),
        ("claude-sonnet-4-5-20250929", 200_000),
        ("claude-sonnet-4-5@20250929", 200_000),
        ("claude-haiku-4-5-20251001", 200_000),
        ("claude-sonnet-5", 1_000_000),
        ("claude-haiku-5-5", 1_000_000),
    ],
)
def test_builtin_windows_by_id_and_dated_id(model: str, window: int) -> None:
    profile = Profiles().resolve(model)
    assert (profile.model, profile.max_input_tokens, profile.known) == (model, window, True)


def test_base_model_id_strips_only_a_snapshot_date() -> None:
    assert base_model_id("claude-sonnet-4-5-20250929") == "claude-sonnet-4-5"
    assert base_model_id("claude-sonnet-4-5") == "claude-sonnet-4-5"
    assert base_model_id("claude-opus-4-8") == "claude-opus-4-8"


def test_settings_fractions_are_the_defaults() -> None:
    profiles = Profiles.from_settings(
        settings(context_trigger_frac=0.7, context_keep_frac=0.2, summarizer_model="claude-x")
    )
    profile = profiles.resolve("claude-sonnet-4-5")
    assert profile.trigger_frac == 0.7
    assert profile.trigger_tokens == 140_000
    assert profile.keep_frac == 0.2
    assert profile.summarizer_model == "claude-x"


def test_the_model_summarizes_itself_when_no_summarizer_is_named() -> None:
    assert Profiles().resolve("claude-opus-4-6").summarizer_model == "claude-opus-4-6"


def test_an_override_wins_over_the_table_and_the_settings() -> None:
    profiles = Profiles.from_settings(
        settings(
            context_trigger_frac=0.7,
            model_profiles={
                "claude-sonnet-4-5": {"max_input_tokens": 1_000_000, "trigger_frac": 0.5},
                "local-llm": {"max_input_tokens": 32_000, "keep_frac": 0.3},
            },
        )
    )
    sonnet = profiles.resolve("claude-sonnet-4-5-20250929")
    assert (sonnet.max_input_tokens, sonnet.trigger_tokens, sonnet.keep_frac) == (
        1_000_000,
        500_000,
        0.10,
    )
    local = profiles.resolve("local-llm")
    assert (local.known, local.trigger_tokens, local.keep_count(10)) == (True, 22_400, 3)


def test_a_dated_override_key_covers_its_base_id() -> None:
    profiles = Profiles(
        overrides={"claude-haiku-4-5-20251001": ProfileOverride(max_input_tokens=123_000)}
    )
    assert profiles.resolve("claude-haiku-4-5").max_input_tokens == 123_000


def test_unknown_model_falls_back_and_logs_once(caplog: pytest.LogCaptureFixture) -> None:
    made = settings()
    profiles = Profiles.from_settings(made)
    mystery, other = f"mystery-model-{uuid.uuid4().hex}", f"other-mystery-{uuid.uuid4().hex}"
    with caplog.at_level(logging.WARNING, logger="hango.core.profiles"):
        first = profiles.resolve(mystery)
        second = profiles.resolve(mystery)
        # Once per settings (a command's report and its agent), not once per Profiles.
        Profiles.from_settings(made).resolve(mystery)
        profiles.resolve(other)
    assert first == second
    assert (first.known, first.trigger_tokens) == (False, FALLBACK_TRIGGER_TOKENS)
    assert first.trigger_tokens == 170_000
    assert first.keep_count(40) == FALLBACK_KEEP_LAST == 6
    assert first.keep_count(4) == 4
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(messages) == 2
    assert mystery in messages[0] and "170000" in messages[0]
    assert other in messages[1]


def test_keep_count_of_a_fraction_rounds_up_and_keeps_at_least_one() -> None:
    profile = Profiles().resolve("claude-sonnet-4-5")
    assert [profile.keep_count(n) for n in (0, 1, 5, 10, 11, 30, 400)] == [0, 1, 1, 1, 2, 3, 40]


def test_trigger_tokens_do_not_lose_a_token_to_float_error() -> None:
    profile = Profiles().resolve("claude-haiku-4-5")
    assert profile.trigger_tokens == 170_000
    assert Profiles(trigger_frac=0.9).resolve("claude-opus-4-8").trigger_tokens == 900_000


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"max_input_tokens": 0}, "max_input_tokens"),
        ({"trigger_frac": 1.5}, "trigger_frac"),
        ({"keep_frac": None, "keep_last": None}, "exactly one"),
        ({"keep_last": 3}, "exactly one"),
        ({"keep_frac": 1.0}, "keep_frac"),
    ],
)
def test_a_profile_rejects_inconsistent_fields(fields: dict[str, object], message: str) -> None:
    valid: dict[str, object] = {
        "model": "m",
        "max_input_tokens": 1000,
        "trigger_frac": 0.8,
        "keep_frac": 0.1,
        "summarizer_model": "m",
        "known": True,
    }
    with pytest.raises(ValueError, match=message):
        ModelProfile(**(valid | fields))  # type: ignore[arg-type]
