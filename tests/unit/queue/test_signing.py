"""Results prove their origin: a keyed MAC bound to the job's key (issue 26, item 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hango.core.errors import ConfigError
from hango.core.settings import load_settings
from hango.providers.scripted import ScriptedProvider
from hango.queue.keys import JobKey
from hango.queue.signing import ResultSigner, signer_from_settings
from hango.summarizers.llm import LLMSummarizer
from hango.summarizers.offload import InlineOffloader
from hango.wiring.queue import make_queued_ports
from tests.memory_history import MemoryHistory

SECRET = "s" * 16 + "0123456789abcdef"
KEY = JobKey("summary", "s1", 3, (1, 4), "9f2c")
PAYLOAD = '{"text": "a summary", "summarizer": "worker:llm"}'


def test_a_signed_result_opens_under_its_own_key_only() -> None:
    signer = ResultSigner(SECRET)
    stored = signer.sign(KEY.result, PAYLOAD)
    assert signer.open(KEY.result, stored) == PAYLOAD
    for other in (
        JobKey("summary", "s2", 3, (1, 4), "9f2c"),  # another session
        JobKey("summary", "s1", 4, (1, 4), "9f2c"),  # another turn
        JobKey("summary", "s1", 3, (1, 5), "9f2c"),  # another range
        JobKey("offload", "s1", 3, (1, 4), "9f2c"),  # another kind
    ):
        assert signer.open(other.result, stored) is None


@pytest.mark.parametrize(
    "forged",
    [
        PAYLOAD,  # written plain, as before signing
        "hmac-sha256:" + "0" * 64 + ":" + PAYLOAD,
        ResultSigner("another secret, also 32 chars long").sign(KEY.result, PAYLOAD),
        ResultSigner(SECRET).sign(KEY.result, PAYLOAD).replace("a summary", "a forgery"),
        "hmac-sha256:nocolon",
        "",
    ],
)
def test_a_forged_or_tampered_value_does_not_open(forged: str) -> None:
    assert ResultSigner(SECRET).open(KEY.result, forged) is None


def test_queue_mode_without_a_secret_is_a_start_up_error(tmp_path: Path) -> None:
    for secret, says in ((None, "is not set"), ("short", r"is too short \(5 characters\)")):
        settings = load_settings(
            redis_url="redis://127.0.0.1:1/0", queue_secret=secret, home=tmp_path
        )
        with pytest.raises(ConfigError, match=f"HANGO_QUEUE_SECRET {says}") as caught:
            signer_from_settings(settings)
        assert caught.value.variable == "HANGO_QUEUE_SECRET"
        with pytest.raises(ConfigError, match="HANGO_QUEUE_SECRET"):
            make_queued_ports(
                settings,
                history=MemoryHistory(),
                fallback_summarizer=LLMSummarizer(ScriptedProvider()),
                fallback_offloader=InlineOffloader(MemoryHistory()),
            )


def test_a_worker_without_the_secret_refuses_to_start_naming_it(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("HANGO_")}
    env.update(
        HANGO_REDIS_URL="redis://127.0.0.1:1/0",  # never contacted: it exits before
        PYTHONPATH=str(Path(__file__).resolve().parents[3]),
    )
    refused = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "hango_worker", "worker", "-Q", "offload"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
        cwd=tmp_path,
    )
    assert refused.returncode == 78 and "Traceback" not in refused.stderr
    last = refused.stderr.strip().splitlines()[-1]
    assert last.startswith("hango worker: HANGO_QUEUE_SECRET is not set"), refused.stderr
