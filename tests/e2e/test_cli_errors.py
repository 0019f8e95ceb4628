"""Bad input to the `agentq` command (docs/protocol.md#the-job-record): one clear line on stderr, a non-zero exit, never
a traceback, and nothing written to Redis.

Each command runs as a separate process, as a user runs it. Tests that could write anything point the command at
the session's private Redis and compare its keys before and after.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest
import redis

from tests.e2e.test_cli import ROOT, agentq


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound once by the OS, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def all_keys(url: str) -> list[str]:
    client = redis.Redis.from_url(url, decode_responses=True)
    try:
        return sorted(client.scan_iter(match="*"))
    finally:
        client.close()


def one_error_line(result: subprocess.CompletedProcess) -> str:
    """The one line a failing command printed on stderr (asserting there is exactly one, and no traceback)."""
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and result.stderr.endswith("\n"), result.stderr
    assert lines[0].startswith("agentq: error: "), lines[0]
    return lines[0]


@pytest.fixture
def job_file(tmp_path):
    path = tmp_path / "job.json"
    path.write_text(json.dumps({"calls": []}), encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------ an unreachable Redis


@pytest.mark.parametrize("command", [("submit", "{job}"), ("status", "job_1"), ("result", "job_1"),
                                     ("result", "job_1", "--wait", "--timeout", "1"), ("events", "job_1"),
                                     ("cancel", "job_1")])
def test_an_unreachable_redis_is_one_line_naming_the_url(command, job_file):
    port = closed_port()
    url = f"redis://127.0.0.1:{port}/0"
    args = [a.replace("{job}", str(job_file)) for a in command]
    result = agentq(*args, env={"AGENTQ_REDIS_URL": url}, timeout=60)
    line = one_error_line(result)
    assert line.startswith(f"agentq: error: cannot reach the state store at {url}"), line
    assert result.stdout == ""


# --------------------------------------------------------------------------------------- unreadable files


def test_a_job_file_that_is_not_utf8(tmp_path, redis_url):
    path = tmp_path / "latin1.json"
    path.write_bytes('{"calls": [], "note": "café"}'.encode("latin-1"))
    before = all_keys(redis_url)
    line = one_error_line(agentq("submit", str(path), env={"AGENTQ_REDIS_URL": redis_url}))
    assert str(path) in line and "is not UTF-8" in line, line
    assert all_keys(redis_url) == before


def test_non_utf8_on_stdin(redis_url):
    environment = {k: v for k, v in os.environ.items() if not k.startswith("AGENTQ_")}
    environment["AGENTQ_REDIS_URL"] = redis_url
    before = all_keys(redis_url)
    result = subprocess.run([sys.executable, "-m", "agentq.cli", "submit", "-"], cwd=ROOT, env=environment,
                            input=b'{"calls": [], "x": "\xff"}', capture_output=True, timeout=60)
    result = subprocess.CompletedProcess(result.args, result.returncode, result.stdout.decode(),
                                         result.stderr.decode())
    line = one_error_line(result)
    assert "job file - is not UTF-8" in line, line
    assert all_keys(redis_url) == before


def test_a_missing_job_file_names_the_file(tmp_path, redis_url):
    path = tmp_path / "no-such-job.json"
    before = all_keys(redis_url)
    line = one_error_line(agentq("submit", str(path), env={"AGENTQ_REDIS_URL": redis_url}))
    assert line == f"agentq: error: cannot read job file {path}: No such file or directory", line
    assert "/: No such file" not in line
    assert all_keys(redis_url) == before


def test_a_directory_given_as_the_job_file(tmp_path, redis_url):
    before = all_keys(redis_url)
    line = one_error_line(agentq("submit", str(tmp_path), env={"AGENTQ_REDIS_URL": redis_url}))
    assert f"cannot read job file {tmp_path}" in line, line
    assert all_keys(redis_url) == before


@pytest.mark.parametrize("opening", ["[", '{"a":'])
def test_a_job_nested_10000_deep_is_one_error_naming_the_limit(tmp_path, redis_url, opening):
    closing = "]" if opening == "[" else "}"
    path = tmp_path / "deep.json"
    path.write_text('{"calls": [], "context": ' + opening * 10_000 + "1" + closing * 10_000 + "}", encoding="utf-8")
    before = all_keys(redis_url)
    result = agentq("submit", str(path), env={"AGENTQ_REDIS_URL": redis_url})
    line = one_error_line(result)
    assert "RecursionError" not in result.stderr and "recursion" not in result.stderr.lower()
    assert "nested deeper than 64 levels (AGENTQ_MAX_DEPTH)" in line, line
    assert all_keys(redis_url) == before
    # the same job through stdin
    result = agentq("submit", "-", env={"AGENTQ_REDIS_URL": redis_url}, stdin=path.read_text(encoding="utf-8"))
    assert "AGENTQ_MAX_DEPTH" in one_error_line(result)
    assert all_keys(redis_url) == before


# -------------------------------------------------------------------------------------------- closed pipes


def _fake_job_with_events(url: str, job_id: str, count: int, *, finished: bool) -> None:
    """A job hash and `count` events on its stream (far more than a pipe's buffer holds)."""
    client = redis.Redis.from_url(url, decode_responses=True)
    try:
        prefix = f"agentq:{{{job_id}}}"
        client.hset(f"{prefix}:job", mapping={"id": job_id, "status": "succeeded" if finished else "running",
                                              "kind": "plan"})
        pipe = client.pipeline(transaction=False)
        for n in range(count):
            pipe.xadd(f"{prefix}:events", {"e": json.dumps({"event": "thought", "job_id": job_id, "n": n,
                                                            "note": "x" * 200})})
        if finished:
            pipe.xadd(f"{prefix}:events", {"e": json.dumps({"event": "job.finished", "job_id": job_id,
                                                            "status": "succeeded", "error": None})})
        pipe.execute()
    finally:
        client.close()


@pytest.mark.parametrize("follow", [False, True])
def test_events_into_a_reader_that_goes_away_is_quiet(redis_url, tmp_path, follow):
    """`agentq events ID [--follow]` whose reader closes after one line: the command stops without a traceback.
    The stream holds ~1 MB of events, so the command is still writing when the reader goes away."""
    _fake_job_with_events(redis_url, "job_pipe", 5000, finished=True)
    environment = {k: v for k, v in os.environ.items() if not k.startswith("AGENTQ_")}
    environment["AGENTQ_REDIS_URL"] = redis_url
    stderr_path = tmp_path / "stderr.txt"
    with open(stderr_path, "wb") as stderr:
        process = subprocess.Popen([sys.executable, "-m", "agentq.cli", "events", "job_pipe",
                                    *(["--follow"] if follow else [])],
                                   cwd=ROOT, env=environment, stdout=subprocess.PIPE, stderr=stderr)
        first = process.stdout.readline()
        process.stdout.close()
        code = process.wait(timeout=60)
    assert json.loads(first)["n"] == 0
    errors = stderr_path.read_text()
    assert "Traceback" not in errors and "BrokenPipeError" not in errors, errors
    assert errors == "", errors
    assert code == 141


def test_a_shell_pipeline_into_head_is_quiet(redis_url):
    """`agentq events ID | head -1` and `agentq demo | head -1`, as typed in a shell."""
    _fake_job_with_events(redis_url, "job_head", 5000, finished=False)
    environment = {k: v for k, v in os.environ.items() if not k.startswith("AGENTQ_")}
    for command, env in ((f"{sys.executable} -m agentq.cli events job_head | head -1",
                          {"AGENTQ_REDIS_URL": redis_url}),
                         (f"{sys.executable} -m agentq.cli demo | head -1", {}),
                         (f"{sys.executable} -m agentq.cli demo --json | head -c 10", {})):
        result = subprocess.run(["bash", "-c", command + "; exit ${PIPESTATUS[0]}"], cwd=ROOT,
                                env={**environment, **env}, capture_output=True, text=True, timeout=120)
        assert "Traceback" not in result.stderr, (command, result.stderr)
        assert result.stderr == "", (command, result.stderr)
        assert result.returncode in (0, 141), (command, result.returncode)
        assert result.stdout, command
