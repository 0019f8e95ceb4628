"""Recovery after a killed worker: how long a call waits before another attempt starts, agentq and bare Celery.

Run (from the repository root)::

    python benchmarks/recovery.py [--profiles default,fast] [--max-wait 90] [--seconds 6]

Not a test: the numbers depend on the machine and on the settings. It starts a private `redis-server` (the
broker and the state store) and real worker processes (`agentq worker -m benchmarks.recovery_workers`, and
`celery -A benchmarks.recovery_workers:bare worker` for bare Celery on an app built by agentq's `create_app`
with the same settings), submits one call (one task) that sleeps `--seconds`, waits until it started, SIGKILLs
something mid-run, and measures the time from the kill to the start of the next attempt:

(a) the pool child running it dies (prefork, one worker): Celery requeues the task at once (reject on worker
    lost); agentq's next delivery then waits for the dead attempt's lease (`AGENTQ_LEASE_S`) before it takes
    the call over. Bound: about the lease.
(b) the whole worker process dies (threads pool; a second worker is idle). Bare Celery: its unacknowledged task
    is restored by a live worker once it is older than the visibility timeout, looked for every
    `AGENTQ_UNACKED_RESTORE_S`; bound: the visibility timeout plus one sweep. agentq (the broker being the store's
    Redis, a call's delivery is not noted unacknowledged): the live worker's admission sweep, every heartbeat,
    finds the call running with its lease gone and its task held nowhere, and sends it again; bound: the lease
    plus two heartbeats (the dead worker may have held the sweep's turn for one).

Profiles (prefetch 1 in both, set explicitly; see config/README.md, "Recovering fast from a killed worker"):

- default: the defaults of agentq/settings.py — visibility timeout 3600 s, sweep 60 s, lease 30 s.
- fast: visibility timeout 60 s, sweep 2 s, lease 10 s — for fleets whose activities all end well within 60 s.

A case that has not recovered after `--max-wait` seconds is shown as `> max-wait` with its bound.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentq.client import Client  # noqa: E402
from agentq.embedded import RedisServer  # noqa: E402
from agentq.settings import Settings  # noqa: E402
from benchmarks.recovery_workers import BARE_QUEUE, BARE_TASK  # noqa: E402

PROFILES: dict[str, dict[str, str]] = {
    "default": {"AGENTQ_PREFETCH_MULTIPLIER": "1"},
    "fast": {"AGENTQ_PREFETCH_MULTIPLIER": "1", "AGENTQ_VISIBILITY_TIMEOUT_S": "60",
             "AGENTQ_UNACKED_RESTORE_S": "2", "AGENTQ_LEASE_S": "10"},
}


@dataclass
class Case:
    profile: str
    system: str  # agentq | celery
    kill: str  # child | worker
    recovered_s: float | None  # kill -> next attempt started; None: not within max-wait
    finished: bool  # the call (task) then ran to its end
    bound_s: float


class Fleet:
    """Worker processes of one case, each in its own process group; all killed at the end."""

    def __init__(self, redis_url: str, env: dict[str, str], logs: Path):
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTQ_")}
        self.env.update(env, AGENTQ_REDIS_URL=redis_url, AGENTQ_HEARTBEAT_S="1", PYTHONPATH=str(ROOT),
                        PYTHONUNBUFFERED="1")
        self.logs = logs
        self.procs: list[subprocess.Popen] = []

    def start(self, system: str, pool: str) -> subprocess.Popen:
        if system == "agentq":
            command = [sys.executable, "-m", "agentq.cli", "worker", "-m", "benchmarks.recovery_workers"]
        else:
            command = [sys.executable, "-m", "celery", "-A", "benchmarks.recovery_workers:bare", "worker",
                       "-Q", BARE_QUEUE, "-n", f"bare-{uuid.uuid4().hex[:6]}@%h", "--without-mingle",
                       "--without-gossip"]
        command += ["--pool", pool, "--concurrency", "1", "--loglevel", "WARNING"]
        log = open(self.logs / f"{system}-{len(self.procs)}.log", "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(command, env=self.env, cwd=str(ROOT), stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        self.procs.append(proc)
        return proc

    def stop(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def starts(admin: Any, tag: str) -> list[tuple[int, float]]:
    return [(int(pid), float(at)) for pid, at in (e.split() for e in admin.lrange(f"recovery:starts:{tag}", 0, -1))]


def wait_until(predicate: Any, timeout: float, interval: float = 0.02) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    return None


def run_case(redis_url: str, admin: Any, profile: str, system: str, kill: str, *, seconds: float,
             max_wait: float, logs: Path) -> Case:
    env = PROFILES[profile]
    overrides: dict[str, Any] = {k.removeprefix("AGENTQ_").lower(): v for k, v in env.items()}  # parsed by Settings
    settings = Settings(redis_url=redis_url, **overrides)
    sweep = settings.unacked_restore_s or min(60.0, max(0.5, settings.visibility_timeout_s / 4))
    if kill == "child":
        bound = settings.lease_s if system == "agentq" else 0.0
    elif system == "agentq":
        bound = settings.lease_s + 2 * settings.heartbeat_s
    else:
        bound = settings.visibility_timeout_s + sweep
    admin.flushall()
    fleet = Fleet(redis_url, env, logs)
    tag = uuid.uuid4().hex[:8]
    try:
        pool = "prefork" if kill == "child" else "threads"
        workers = [fleet.start(system, pool) for _ in range(1 if kill == "child" else 2)]
        with Client(settings=settings) as client:
            if system == "agentq":
                if not wait_until(lambda: len(client._parts.fleet.live_workers()) >= len(workers), 60):
                    raise RuntimeError(f"the {system} workers did not start; see {logs}")
                time.sleep(1.0)  # their consumers are up shortly after their first announcement
                client.submit({"calls": [{"_tool": "recoverySleep", "seconds": seconds, "tag": tag,
                                          "_outputPath": "†state.r"}]})
            else:
                time.sleep(3.0)  # bare workers announce nothing: give them the time agentq's took
                client._parts.app.send_task(BARE_TASK, args=[tag, seconds], queue=BARE_QUEUE)
            first = wait_until(lambda: starts(admin, tag), 60)
            if not first:
                raise RuntimeError(f"the {system} call never started; see {logs}")
            time.sleep(1.0)  # mid-run
            victim_pid = first[0][0]
            killed_at = time.time()
            if kill == "child":
                os.kill(victim_pid, signal.SIGKILL)
            else:
                os.killpg(victim_pid, signal.SIGKILL)  # the worker that ran it leads its process group
            again = wait_until(lambda: len(starts(admin, tag)) >= 2, max_wait, interval=0.05)
            recovered = starts(admin, tag)[1][1] - killed_at if again else None
            finished = bool(again) and bool(wait_until(
                lambda: admin.llen(f"recovery:ends:{tag}") >= 1, seconds + 30))
    finally:
        fleet.stop()
    return Case(profile, system, kill, recovered, finished, bound)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profiles", default="default,fast", help="comma-separated: default, fast")
    parser.add_argument("--max-wait", type=float, default=90.0, help="seconds to wait for a recovery")
    parser.add_argument("--seconds", type=float, default=6.0, help="how long the call (task) runs")
    args = parser.parse_args(argv)
    profiles = [p.strip() for p in args.profiles.split(",") if p.strip()]
    unknown = [p for p in profiles if p not in PROFILES]
    if unknown:
        parser.error(f"unknown profile(s) {unknown}; choose from {sorted(PROFILES)}")
    cases: list[Case] = []
    with RedisServer() as server, tempfile.TemporaryDirectory(prefix="agentq-recovery-") as logs:
        import redis

        admin = redis.Redis.from_url(server.url, decode_responses=True)
        for profile in profiles:
            for kill in ("child", "worker"):
                for system in ("celery", "agentq"):
                    case = run_case(server.url, admin, profile, system, kill, seconds=args.seconds,
                                    max_wait=args.max_wait, logs=Path(logs))
                    cases.append(case)
                    print(f"  {profile:8} {kill:7} {system:7} {_seconds(case.recovered_s, args.max_wait)}",
                          file=sys.stderr, flush=True)
        admin.close()
    print(f"\nRecovery after SIGKILL mid-call: kill -> next attempt started (the call runs {args.seconds:g} s)\n")
    print(f"{'profile':9} {'killed':16} {'bare Celery':>12} {'agentq':>10} {'agentq - Celery':>16} {'bound':>9}")
    for profile in profiles:
        for kill, label in (("child", "pool child"), ("worker", "worker process")):
            celery = next(c for c in cases if (c.profile, c.kill, c.system) == (profile, kill, "celery"))
            agentq = next(c for c in cases if (c.profile, c.kill, c.system) == (profile, kill, "agentq"))
            ours, theirs = agentq.recovered_s, celery.recovered_s
            delta = f"{ours - theirs:+.1f} s" if ours is not None and theirs is not None else "-"
            print(f"{profile:9} {label:16} {_seconds(celery.recovered_s, args.max_wait):>12} "
                  f"{_seconds(agentq.recovered_s, args.max_wait):>10} {delta:>16} {f'~{agentq.bound_s:g} s':>9}")
    unfinished = [c for c in cases if c.recovered_s is not None and not c.finished]
    if unfinished:
        print(f"\n{len(unfinished)} case(s) recovered but did not finish: {unfinished}")
    print("\nprefetch multiplier 1 in every case; 'bound' is what the settings allow for agentq "
          "(child: the lease; worker: the lease + two heartbeats; bare Celery's worker: visibility timeout + one "
          "sweep).")
    return 0


def _seconds(value: float | None, max_wait: float) -> str:
    return f"{value:.1f} s" if value is not None else f"> {max_wait:g} s"


if __name__ == "__main__":
    sys.exit(main())
