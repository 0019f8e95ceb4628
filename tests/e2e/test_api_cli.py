"""`agentq api` as a user starts it: a separate process, its banner, the generated token, `--no-auth`."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.api_server import ApiServer, free_port

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(120)


class Process:
    def __init__(self, *args: str, env: dict[str, str]):
        environment = {k: v for k, v in os.environ.items() if not k.startswith("AGENTQ_")} | env
        self.proc = subprocess.Popen([sys.executable, "-m", "agentq.cli", *args], cwd=ROOT, env=environment,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []

    def line_matching(self, pattern: str, timeout: float = 30) -> re.Match:
        deadline = time.monotonic() + timeout
        assert self.proc.stderr is not None
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line and self.proc.poll() is not None:
                break
            self.lines.append(line)
            if match := re.search(pattern, line):
                return match
        raise AssertionError(f"no line matching {pattern!r} in {self.lines}")

    def stop(self) -> int:
        """Ctrl-C, as a user stops it: a graceful exit (130, the shell's code for SIGINT), no traceback."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            code = self.proc.wait(20)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        assert self.proc.stderr is not None
        rest = self.proc.stderr.read()
        assert "Traceback" not in rest, rest
        return code


@pytest.fixture
def api_process(redis_url: str) -> Iterator:
    started: list[Process] = []

    def start(*args: str, **env: str) -> tuple[Process, ApiServer]:
        port = free_port()
        process = Process("api", "--port", str(port), *args, env={"AGENTQ_REDIS_URL": redis_url, **env})
        started.append(process)
        client = ApiServer.__new__(ApiServer)  # only its HTTP client, pointed at the process
        client.port, client.token = port, None
        return process, client

    yield start
    for process in started:
        process.stop()


def wait_healthy(api: ApiServer, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if api.request("GET", "/v1/health", token=None).status == 200:
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError("agentq api did not answer /v1/health")


def test_without_tokens_it_makes_one_and_prints_the_page_url_with_it(api_process):
    process, api = api_process()
    token = process.line_matching(r"open (http://127\.0\.0\.1:\d+/)\?token=(\S+)").group(2)
    wait_healthy(api)
    assert api.request("GET", "/v1/jobs", token=None).status == 401
    assert api.request("GET", "/v1/jobs", token="guess").status == 401
    assert api.request("GET", "/v1/jobs", token=token).status == 200
    assert api.request("GET", f"/?token={token}", token=None).status == 303
    assert process.stop() in (0, 130)


def test_configured_tokens_and_no_auth(api_process):
    process, api = api_process(AGENTQ_API_TOKENS="one,two")
    process.line_matching(r"bearer tokens from AGENTQ_API_TOKENS")
    wait_healthy(api)
    assert [api.request("GET", "/v1/jobs", token=t).status for t in ("one", "two", "three")] == [200, 200, 401]
    open_process, open_api = api_process("--no-auth")
    open_process.line_matching(r"authentication is OFF")
    wait_healthy(open_api)
    assert open_api.request("GET", "/v1/jobs", token=None).status == 200


def test_tokens_given_as_a_json_array_authenticate(api_process):
    process, api = api_process(AGENTQ_API_TOKENS='["one", "two"]')
    process.line_matching(r"bearer tokens from AGENTQ_API_TOKENS")
    wait_healthy(api)
    statuses = [api.request("GET", "/v1/jobs", token=t).status for t in ("one", "two", '["one", "two"]')]
    assert statuses == [200, 200, 401]  # two tokens, neither of them the JSON text itself


def test_help_lists_the_options():
    result = subprocess.run([sys.executable, "-m", "agentq.cli", "api", "--help"], cwd=ROOT, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0
    for option in ("--host", "--port", "--no-auth", "--embedded", "--module"):
        assert option in result.stdout


def test_a_tokens_file_gives_tenants_and_one_that_cannot_be_used_stops_the_api_with_one_line(api_process, tmp_path):
    tokens = tmp_path / "tokens.json"
    tokens.write_text('{"acme-token-0123456789": {"tenant": "acme", "role": "read"}}')
    _, api = api_process(AGENTQ_API_TOKENS=f"@{tokens}")
    wait_healthy(api)
    assert api.request("GET", "/v1/me", token="acme-token-0123456789").json() == {"tenant": "acme", "role": "read"}
    tokens.write_text('{"acme-token-0123456789": {"tenant": "acme", "role": "owner"}}')
    result = subprocess.run([sys.executable, "-m", "agentq.cli", "api", "--port", str(free_port())], cwd=ROOT,
                            capture_output=True, text=True, timeout=60,
                            env={**os.environ, "AGENTQ_API_TOKENS": f"@{tokens}"})
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert str(tokens) in lines[0] and "role 'owner' is none of admin, submit, read" in lines[0]
