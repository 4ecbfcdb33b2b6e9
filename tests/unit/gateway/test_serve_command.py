"""``hango serve`` as a user runs it: a process that listens, forwards and says how it
summarizes."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx2

from tests.fakeapi import FakeAnthropicAPI, text_reply


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_hango_serve_listens_forwards_and_names_its_summarizer(
    upstream: FakeAnthropicAPI, tmp_path: Path
) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if "API_KEY" not in k}
    env.update(HANGO_HOME=str(tmp_path), HANGO_UPSTREAM_URL=upstream.base_url)
    hango = str(Path(sys.executable).parent / "hango")  # the console script pip installed
    command = [hango, "serve", "--port", str(port)]
    process = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx2.get(f"{url}/healthz").status_code == 200:
                    break
            except httpx2.TransportError:
                pass
            assert process.poll() is None and time.monotonic() < deadline, "did not start"
            time.sleep(0.1)
        upstream.push(text_reply("through the command"))
        answer = httpx2.post(
            f"{url}/v1/messages",
            json={"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": [
                {"role": "user", "content": "hi"}]},
            headers={"x-api-key": "sk-ant-command"},
            timeout=30,
        )  # fmt: skip
        assert answer.json()["content"][0]["text"] == "through the command"
    finally:
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=30)
    assert f"hango serve: http://127.0.0.1:{port} -> {upstream.base_url}" in stderr
    assert "summaries: extractive (no operator key" in stderr
    assert (tmp_path / "gateway.secret").stat().st_mode & 0o777 == 0o600
