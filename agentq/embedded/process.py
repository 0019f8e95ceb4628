"""The operating-system side of a private Redis server: its address, a free port, the parent-death signal,
reaping the child process, and the tail of its log; and whether a process of this host runs (`pid_alive`: is the
owner of a metrics file or of a node name alive?)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable

HOST = "127.0.0.1"
RESERVED_PORTS = frozenset({6379})  # the conventional port of somebody else's Redis


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the kernel picks it)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((HOST, 0))
            port = sock.getsockname()[1]
        if port not in RESERVED_PORTS:
            return port


def parent_death_signal() -> Callable[[], None] | None:
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


def reap(process: subprocess.Popen[bytes], *, grace: float, stop_timeout: float) -> None:
    """Wait `grace` seconds for `process` to exit, then terminate it, then kill it after `stop_timeout`."""
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.terminate()
        try:
            process.wait(timeout=stop_timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def log_tail(log_path: str, limit: int = 2000) -> str:
    """The last `limit` bytes of a log as text ("" when it cannot be read)."""
    try:
        with open(log_path, "rb") as fh:
            data = fh.read()
    except OSError:
        return ""
    return data[-limit:].decode(errors="replace").strip()


def pid_alive(pid: int) -> bool:
    """Whether a process of this host with that pid runs (one we may not signal counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
