"""Separate `agentq worker` processes for integration tests, always stopped after the test.

    def test_x(worker_procs):
        a = worker_procs.start(serve=["procA"])          # `agentq worker -m tests.integration.procs_activities`
        worker_procs.wait_live(a, ["procA"])              # until its heartbeat announces the activities
        ...

The fixture `worker_procs` (tests/integration/conftest.py and tests/e2e/conftest.py provide it) gives each
test a `WorkerProcs` bound to the session's private Redis (`redis_url`, flushed before the test). Every process
is started in its own session (process group); teardown sends SIGTERM (Celery's warm shutdown), waits, then
SIGKILLs the group so no prefork child outlives the test. Worker output goes to a log file in `tmp_path`, shown
when a wait times out.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentq.store.fleet import RedisFleet
from agentq.store.state import StateStore

ROOT = Path(__file__).resolve().parents[2]
MODULE = "tests.integration.procs_activities"
TOOLS_DIR = Path(__file__).resolve().parent / "tools"

# Short timings so crash recovery happens within seconds (see test_reliability.py for what each one drives).
FAST_ENV = {"AGENTQ_HEARTBEAT_S": "1", "AGENTQ_LEASE_S": "2", "AGENTQ_VISIBILITY_TIMEOUT_S": "3"}


def base_env(redis_url: str, **extra: str) -> dict[str, str]:
    """The environment of an agentq process started by a test: private Redis, short timings, repo importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTQ_", "PROCS_"))}
    env.update(FAST_ENV)
    env.update({"AGENTQ_REDIS_URL": redis_url, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"})
    env.update(extra)
    return env


def cli(redis_url: str | None, *args: str, timeout: float = 30.0, input: str | None = None,
        **env: str) -> subprocess.CompletedProcess:
    """Run `python -m agentq.cli ARGS` to completion (AGENTQ_REDIS_URL unset when `redis_url` is None)."""
    environment = base_env(redis_url or "", **env)
    if redis_url is None:
        environment.pop("AGENTQ_REDIS_URL")
    return subprocess.run([sys.executable, "-m", "agentq.cli", *args], env=environment, cwd=str(ROOT),
                          capture_output=True, text=True, timeout=timeout, input=input)


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.05,
             on_timeout: Callable[[], str] | None = None) -> Any:
    """Poll `predicate` until it returns something truthy; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            detail = on_timeout() if on_timeout else ""
            pytest.fail(f"timed out after {timeout} s waiting for {what}{detail}", pytrace=False)
        time.sleep(interval)


class WorkerProc:
    def __init__(self, popen: subprocess.Popen, log_path: Path, serve: list[str]):
        self.popen = popen
        self.log_path = log_path
        self.serve = serve

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL the worker's main process only (a prefork pool's children are left to the teardown)."""
        if self.alive():
            os.kill(self.pid, signal.SIGKILL)
            self.popen.wait(10)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (warm shutdown), then SIGKILL the whole process group this worker leads."""
        if self.alive():
            self.popen.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)  # the group of the session this worker started
        if self.alive():
            self.popen.wait(5)


class WorkerProcs:
    def __init__(self, redis_url: str, tmp_path: Path):
        self.redis_url = redis_url
        self.tmp_path = tmp_path
        self.store = StateStore(redis_url)
        self.procs: list[WorkerProc] = []

    def start(self, serve: Iterable[str] | None = None, *, pool: str = "threads", concurrency: int = 2,
              args: Iterable[str] = (), module: str | None = MODULE, command: str = "worker",
              **env: str) -> WorkerProc:
        """Start `agentq worker` serving the activities `serve` of procs_activities (default: all of them), or
        those of another `module`; `command="dispatcher"` starts `agentq dispatcher` (with `module=None`, one that
        serves no activity)."""
        serve = list(serve or [])
        log_path = self.tmp_path / f"{command}-{len(self.procs)}-{'_'.join(serve) or 'all'}.log"
        args = self._named(args, env)
        line = [sys.executable, "-m", "agentq.cli", command, *(["-m", module] if module else []), "--pool", pool,
                "--concurrency", str(concurrency), "--loglevel", "WARNING", *args]
        with open(log_path, "wb") as log:
            popen = subprocess.Popen(line, env=base_env(self.redis_url, PROCS_ACTIVITIES=",".join(serve), **env),
                                     cwd=str(ROOT), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        proc = WorkerProc(popen, log_path, serve)
        self.procs.append(proc)
        return proc

    def _named(self, args: Iterable[str], env: dict[str, str]) -> list[str]:
        """`args` with a node name of the process's own: two workers on one host need two, and on a RabbitMQ
        shared with other test runs (`PROCS_QUEUE_PREFIX` set) a name no other run uses, since a node's pidbox
        queue is exclusive there and a second holder of the name dies with RESOURCE_LOCKED."""
        args = list(args)
        if any(a == "--hostname" or a.startswith("--hostname=") for a in args):
            return args
        prefix = env.get("PROCS_QUEUE_PREFIX")
        if prefix:
            return [*args, "--hostname", f"{prefix}-{len(self.procs)}@%h"]
        return [*args, "--hostname", f"procs-{len(self.procs)}@%h"] if self.procs else args

    def dispatcher(self, args: Iterable[str] = (), **env: str) -> WorkerProc:
        """Start `agentq dispatcher` with its own defaults (pool, concurrency) unless `args` say otherwise."""
        args = self._named(args, env)
        log_path = self.tmp_path / f"dispatcher-{len(self.procs)}.log"
        line = [sys.executable, "-m", "agentq.cli", "dispatcher", "--loglevel", "WARNING", *args]
        with open(log_path, "wb") as log:
            popen = subprocess.Popen(line, env=base_env(self.redis_url, **env), cwd=str(ROOT), stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        proc = WorkerProc(popen, log_path, [])
        self.procs.append(proc)
        return proc

    def wait_dispatcher(self, proc: WorkerProc, timeout: float = 30.0) -> dict:
        """Wait until the dispatcher `proc` announces itself (it serves the engine queue)."""

        def live() -> dict | None:
            if not proc.alive():
                pytest.fail(f"dispatcher {proc.pid} exited with {proc.popen.returncode}:\n{proc.output()}",
                            pytrace=False)
            found = self.announcement(proc)
            return found if found and found.get("engine") else None

        return wait_for(live, timeout, f"dispatcher {proc.pid} to announce itself",
                        on_timeout=lambda: f"\n--- dispatcher output ---\n{proc.output()}")

    def announcement(self, proc: WorkerProc) -> dict | None:
        return next((w.to_dict() for w in RedisFleet(self.store).live_workers() if w.pid == proc.pid), None)

    def wait_live(self, proc: WorkerProc, activities: Iterable[str], timeout: float = 20.0) -> dict:
        """Wait until `proc` announces `activities` in the store; returns its announcement."""
        wanted = set(activities)

        def live() -> dict | None:
            if not proc.alive():
                pytest.fail(f"worker {proc.pid} exited with {proc.popen.returncode}:\n{proc.output()}", pytrace=False)
            found = self.announcement(proc)
            return found if found and wanted <= {a["name"] for a in found["activities"]} else None

        return wait_for(live, timeout, f"worker {proc.pid} to announce {sorted(wanted)}",
                        on_timeout=lambda: f"\n--- worker output ---\n{proc.output()}")

    def close(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()
        self.store.redis.close()


@pytest.fixture
def worker_procs(redis_url: str, tmp_path: Path) -> Iterator[WorkerProcs]:
    procs = WorkerProcs(redis_url, tmp_path)
    try:
        yield procs
    finally:
        procs.close()


def ledger_runs(ledger: Path) -> Counter:
    """How many times each charge started, from an activity ledger's `start <tag> <pid> <time>` lines (the outage
    tests' activities write it, outside the store)."""
    if not ledger.exists():
        return Counter()
    return Counter(line.split()[1] for line in ledger.read_text().splitlines() if line.startswith("start "))


ENGINE_QUEUE = "agentq.engine"


def take_engine_tasks(broker: Any) -> int:
    """Take every message off the engine queue's lists (kombu names one per priority step), as a dispatcher killed
    before it recorded them, or dispatchers whose records of them a restart lost; how many were taken."""
    taken = 0
    for key in broker.keys(f"{ENGINE_QUEUE}*"):
        if broker.type(key) == b"list":
            taken += broker.llen(key)
            broker.delete(key)
    return taken
