"""The soak's processes: a redis-server with its append-only file (`appendfsync everysec`), worker processes
(prefork and threads), dispatchers and `agentq api`, each a real process in a session of its own.

`Fleet` starts them, kills them (`kill -9`, recorded with the time and every pid of the process group, so the
checks can tell which handler runs a kill interrupted), starts them again, and stops everything at the end. Like a
supervisor (systemd, Kubernetes), it also starts again, within half a second, a process that exited on its own
(counted: a Celery worker exits when a pool child dies before it is up, `WorkerLostError`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from agentq.embedded import RedisServer
from benchmarks.soaking.hooks import WEBHOOK_SECRET

ROOT = Path(__file__).resolve().parents[2]
MODULE = "benchmarks.soaking.activities"
TOKENS = {"acme": "soak-token-acme-0001", "globex": "soak-token-globex-001", "admin": "soak-token-admin-0001"}
TENANTS = {"acme": {"weight": 3, "max_running_calls": 6}, "globex": {"weight": 1}}

# timings that make recovery a matter of seconds (a lease above the longest Redis pause the soak injects)
FAST = {"AGENTQ_HEARTBEAT_S": "1", "AGENTQ_LEASE_S": "5", "AGENTQ_VISIBILITY_TIMEOUT_S": "10",
        "AGENTQ_UNACKED_RESTORE_S": "2", "AGENTQ_STORE_RETRY_S": "60", "AGENTQ_PREFETCH_MULTIPLIER": "1",
        "AGENTQ_BATCH_POLL_S": "0.5", "AGENTQ_BATCH_MAX_AGE_S": "0.3",
        "AGENTQ_WEBHOOK_BACKOFF_S": "0.5", "AGENTQ_WEBHOOK_POLL_S": "0.2", "AGENTQ_WEBHOOK_TIMEOUT_S": "3"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Proc:
    role: str  # worker-prefork | worker-threads | dispatcher | api
    line: list[str]
    log: Path
    popen: subprocess.Popen | None = None
    restarts: int = 0  # started again after the soak killed it
    exits: int = 0  # started again after it exited on its own (a worker whose pool child died as it started)

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def group(self) -> list[int]:
        """The pids of the process and its children (a prefork pool's), from /proc."""
        return [self.pid, *_children(self.pid)]

    def children(self) -> list[int]:
        return self.group()[1:]


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for tasks in Path(f"/proc/{pid}/task").glob("*/children"):
        with contextlib.suppress(OSError):
            found += [int(child) for child in tasks.read_text().split()]
    return [p for child in found for p in (child, *_children(child))]


@dataclass
class Kill:
    at: float  # unix time
    role: str
    pids: list[int]


@dataclass
class Fleet:
    workdir: Path
    fake_url: str
    hook_host: str = "127.0.0.1"
    workers: int = 4
    redis: RedisServer | None = None
    procs: list[Proc] = field(default_factory=list)
    kills: list[Kill] = field(default_factory=list)
    api_port: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)  # a kill and the supervisor's restarts
    stopping: threading.Event = field(default_factory=threading.Event)

    @property
    def ledger(self) -> Path:
        return self.workdir / "ledger.txt"

    @property
    def url(self) -> str:
        assert self.redis is not None
        return self.redis.url

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTQ_", "ANTHROPIC_", "SOAK_"))}
        env.update(FAST)
        env.update({"AGENTQ_REDIS_URL": self.url, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1",
                    "AGENTQ_LLM": "anthropic", "ANTHROPIC_BASE_URL": self.fake_url, "ANTHROPIC_API_KEY": "sk-soak",
                    "AGENTQ_TENANTS": json.dumps(TENANTS), "AGENTQ_WEBHOOK_ALLOWLIST": self.hook_host,
                    "AGENTQ_WEBHOOK_SECRET": WEBHOOK_SECRET, "AGENTQ_API_TOKENS": f"@{self.workdir / 'tokens.json'}",
                    "AGENTQ_MODULE_DIRS": str(ROOT / "benchmarks" / "soaking" / "modules"),
                    "SOAK_LEDGER": str(self.ledger), "SOAK_MARKS": str(self.workdir / "marks")})
        return env

    def start(self) -> None:
        (self.workdir / "marks").mkdir(parents=True, exist_ok=True)
        (self.workdir / "tokens.json").write_text(json.dumps({
            TOKENS["acme"]: {"tenant": "acme", "role": "submit"},
            TOKENS["globex"]: {"tenant": "globex", "role": "submit"},
            TOKENS["admin"]: {"tenant": "ops", "role": "admin"}}))
        self.redis = RedisServer(appendonly=True, extra_args=("--appendfsync", "everysec")).start()
        cli = [sys.executable, "-m", "agentq.cli"]
        for i in range(self.workers):
            pool = "prefork" if i % 2 == 0 else "threads"
            self.procs.append(Proc(f"worker-{pool}", [*cli, "worker", "-m", MODULE, "--pool", pool, "--concurrency",
                                                      "3", "--loglevel", "WARNING", "--hostname", f"soak-w{i}@%h"],
                                   self.workdir / f"worker-{i}.log"))
        for i in range(2):
            self.procs.append(Proc("dispatcher", [*cli, "dispatcher", "--loglevel", "WARNING", "--hostname",
                                                  f"soak-d{i}@%h"], self.workdir / f"dispatcher-{i}.log"))
        self.api_port = free_port()
        self.procs.append(Proc("api", [*cli, "api", "--port", str(self.api_port)], self.workdir / "api.log"))
        for proc in self.procs:
            self.launch(proc)

    def _supervise(self) -> None:
        while not self.stopping.wait(0.5):
            with self.lock:
                for proc in self.procs:
                    if proc.popen is not None and not proc.alive() and not self.stopping.is_set():
                        proc.exits += 1
                        self.launch(proc)

    def launch(self, proc: Proc) -> None:
        with open(proc.log, "ab") as log:
            proc.popen = subprocess.Popen(proc.line, env=self.env(), cwd=str(ROOT), stdout=log,
                                          stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, timeout: float = 90.0) -> None:
        """Until every worker and dispatcher announced itself and the API answers; then the supervisor starts."""
        from agentq.store.fleet import RedisFleet
        from agentq.store.state import StateStore

        store = StateStore(self.url)
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                dead = [p for p in self.procs if not p.alive()]
                if dead:
                    raise RuntimeError(f"{dead[0].role} exited at start:\n{dead[0].log.read_text()[-3000:]}")
                live = {w.pid for w in RedisFleet(store).live_workers()}
                if all(p.pid in live for p in self.procs if p.role != "api") and self._api_up():
                    threading.Thread(target=self._supervise, daemon=True, name="supervisor").start()
                    return
                time.sleep(0.2)
        finally:
            store.redis.close()
        raise RuntimeError(f"the fleet did not come up within {timeout} s; logs in {self.workdir}")

    def _api_up(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.api_url}/v1/health", timeout=2) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    def of(self, role: str) -> list[Proc]:
        return [p for p in self.procs if p.role.startswith(role)]

    def kill(self, proc: Proc, *, child: int | None = None) -> Kill:
        """`kill -9` the process and its children (or only `child`, one of its pool's), recorded; the process
        itself is started again at once (a supervisor would)."""
        with self.lock:
            pids = [child] if child is not None else proc.group()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            kill = Kill(time.time(), f"{proc.role}{' child' if child else ''}", pids)
            self.kills.append(kill)
            if child is None:
                assert proc.popen is not None
                proc.popen.wait(10)
                proc.restarts += 1
                self.launch(proc)
        return kill

    def stop(self) -> None:
        """Everything is checked by now: each process group is killed outright (no shutdown to wait for)."""
        self.stopping.set()
        with self.lock:
            self._kill_all()
        if self.redis is not None:
            self.redis.stop()

    def _kill_all(self) -> None:
        for proc in reversed(self.procs):
            if proc.popen is None:
                continue
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(5)

