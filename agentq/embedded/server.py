"""`RedisServer`: a private `redis-server` on a free 127.0.0.1 port (see the package docstring for its uses)."""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from typing import BinaryIO

from agentq.embedded import executable as executables
from agentq.embedded import process as processes
from agentq.embedded import resp
from agentq.embedded.process import HOST, RESERVED_PORTS
from agentq.errors import ConfigurationError

__all__ = ["LOG_NAME", "RedisServer"]

LOG_NAME = "redis-server.log"
_START_ATTEMPTS = 5
_PASSWORD = re.compile(r"[A-Za-z0-9_-]+")  # what secrets.token_urlsafe makes
_READY = "ready"
_ADDRESS_IN_USE = "address-in-use"


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

    While it runs (or is halted), the server has an exit hook registered: interpreter exit stops it, so a server
    its owner forgot does not outlive the program. `stop()` removes the hook.
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
        if port is not None and (port in RESERVED_PORTS or not 0 < port < 65536):
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
        self._exit_hook = False  # whether `stop` is registered to run at interpreter exit

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
            executable = self._executable or executables.find_redis_executable()
            self._executable = executable
            if self._halted:
                return self._resume(executable)
            return self._start_fresh(executable)

    def stop(self) -> None:
        """Shut the server down (SHUTDOWN NOSAVE, then terminate, then kill) and remove its files; idempotent."""
        with self._lock:
            self._set_exit_hook(False)
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

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"port={self._port}" if self.running else "stopped"
        return f"<RedisServer {state} executable={self._executable!r}>"

    # --- starting -----------------------------------------------------------------------------------------

    def _start_fresh(self, executable: str) -> RedisServer:
        """Start on a fresh port (retried on another one when it was taken meanwhile) or on the fixed one."""
        last_log = ""
        attempts = 1 if self._fixed_port is not None else _START_ATTEMPTS
        for _attempt in range(attempts):
            outcome, last_log = self._start_once(executable)
            if outcome == _READY:
                self._set_exit_hook(True)
                return self
            if outcome != _ADDRESS_IN_USE:
                break
        else:
            outcome = f"every free port it tried was taken before it could bind ({attempts} attempts)"
            if self._fixed_port is not None:
                outcome = f"port {self._fixed_port} is taken"
        raise ConfigurationError(
            f"could not start a private Redis server with {executable}: {outcome}"
            + (f"\n--- server log (tail) ---\n{last_log}" if last_log else "")
        )

    def _start_once(self, executable: str) -> tuple[str, str]:
        """One attempt on one fresh port: ("ready", "") or (reason, log tail) after cleaning up."""
        self._tempdir = tempfile.mkdtemp(prefix="agentq-redis-")
        port = self._fixed_port if self._fixed_port is not None else processes.free_port()
        self._port = port
        outcome = self._launch(executable)
        if outcome == _READY:
            return outcome, ""
        tail = processes.log_tail(os.path.join(self._tempdir, LOG_NAME))
        self._cleanup()
        if "address already in use" in f"{outcome}\n{tail}".lower():
            return _ADDRESS_IN_USE, tail
        return outcome, tail

    def _resume(self, executable: str) -> RedisServer:
        """Start a halted server again on its port, in its folder."""
        outcome = self._launch(executable)
        if outcome != _READY:
            tail = processes.log_tail(os.path.join(self._tempdir or "", LOG_NAME))
            self._reap()
            raise ConfigurationError(
                f"could not start the private Redis server again on port {self._port}: "
                f"{outcome}" + (f"\n--- server log (tail) ---\n{tail}" if tail else "")
            )
        self._halted = False
        self._set_exit_hook(True)
        return self

    def _launch(self, executable: str) -> str:
        """Run the server on `self._port` in `self._tempdir` and wait until it answers: "ready" or why not."""
        assert self._tempdir is not None and self._port is not None
        port = self._port
        log_path = os.path.join(self._tempdir, LOG_NAME)
        self._log_file = open(log_path, "ab")  # noqa: SIM115 - closed in _reap
        try:
            self._process = subprocess.Popen(
                self._command_line(executable, port, self._tempdir),
                stdin=subprocess.DEVNULL,
                stdout=self._log_file,
                stderr=subprocess.STDOUT,
                cwd=self._tempdir,
                start_new_session=True,  # Ctrl-C in a terminal reaches us, and we shut it down in order
                preexec_fn=processes.parent_death_signal(),
            )
        except OSError as exc:
            return f"cannot execute it ({exc})"
        return self._wait_ready(port)

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

    def _wait_ready(self, port: int) -> str:
        assert self._process is not None
        deadline = time.monotonic() + self._startup_timeout
        delay = 0.005
        while time.monotonic() < deadline:
            code = self._process.poll()
            if code is not None:
                return f"it exited with status {code} before answering PING"
            pid = resp.server_pid(port, self._password)
            if pid is not None:
                if pid == self._process.pid:
                    return _READY
                return "another Redis answered on its port (address already in use)"
            time.sleep(delay)
            delay = min(delay * 2, 0.1)
        return f"it did not answer PING on port {port} within {self._startup_timeout:g}s"

    # --- stopping -----------------------------------------------------------------------------------------

    def _set_exit_hook(self, wanted: bool) -> None:
        """Register `stop` to run at interpreter exit (while the server runs or is halted), or remove it."""
        if wanted and not self._exit_hook:
            atexit.register(self.stop)
        elif not wanted and self._exit_hook:
            atexit.unregister(self.stop)
        self._exit_hook = wanted

    def _shutdown_process(self) -> None:
        process = self._process
        if process is not None and process.poll() is None and self._port is not None:
            with contextlib.suppress(OSError, ValueError):
                # On success the server closes the connection without a reply (NOSAVE: no RDB snapshot; an
                # append-only file is flushed all the same).
                resp.command(self._port, "SHUTDOWN", "NOSAVE", password=self._password, timeout=self._stop_timeout)

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
            processes.reap(process, grace=self._stop_timeout if asked_to_stop else 0.0, stop_timeout=self._stop_timeout)
        if self._log_file is not None:
            with contextlib.suppress(OSError):
                self._log_file.close()
            self._log_file = None
