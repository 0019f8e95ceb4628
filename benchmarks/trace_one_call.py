"""Where a one-call job's submit -> result goes, step by step, beside `task.delay().get()` (throughput.py's (d)).

Run (from the repository root)::

    python benchmarks/trace_one_call.py [--samples 15]

Not a test: the numbers depend on the machine. It starts a private `redis-server`, an agentq worker and a bare
Celery worker (both `--pool prefork --concurrency 2`, as throughput.py does), then runs one-call agentq jobs and
`delay().get()` tasks in turn under Redis `MONITOR`, and cuts each sample at the commands that mark its steps
(MONITOR's timestamps are the server's; it slows every command a little). Printed: the median milliseconds of each
step, agentq's and Celery's:

agentq: the client's work before its first command (validation, planning, the task's message built for the
admission step) | the job's write and admission step (one pipeline; the step pushes the task and its `task-sent`
event) | broker -> the worker's consumer (its `unacked` entry) | consumer -> the pool child's claim | claim -> commit
(claim.lua, the call, rendering the commit) | commit -> the client's read of the record (the commit pushes the
job's end signal, the client's BLMOVE wakes and its pipelined HGETALL runs) | that read -> `result()` returns.
Celery: delay() before its LPUSH | broker -> consumer | consumer -> the result's SETEX (the child ran the task) |
SETEX -> get() returns.

One run on a loaded two-core machine (medians of 25, ms): agentq 2.36 client, 0.67 write + admission, 1.76 broker,
2.48 consumer -> claim, 2.50 claim -> commit, 0.29 commit -> read, 0.52 read -> returned (13.85 in all); Celery 1.27
delay(), 0.81 broker, 5.55 consumer -> SETEX, 2.34 SETEX -> returned (13.57). No step waits on a timer: the client
blocks on the job's end signal (BLMOVE), the admission step pushes the task itself, and the give-back of the call's
place (`GIVE_BACK_S` later) and the task's ack come after the job's end. The worker's part (consumer -> commit ->
the client awake) is no slower than Celery's; the difference is the client's CPU before its first command (about
1 ms against delay()'s 0.35: the job's validation and planning, its rendering, the task's message and `task-sent`
event built through kombu for the admission step to push).
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import benchmarks.throughput as bench  # noqa: E402

AGENTQ_STEPS = ["client before its first command", "write + admission step", "broker -> consumer",
                "consumer -> child's claim", "claim -> commit", "commit -> client's read", "read -> returned"]
BARE_STEPS = ["delay() before its LPUSH", "broker -> consumer", "consumer -> result SETEX", "SETEX -> get() returned"]

Line = tuple[float, str, str, str]  # (server time, client or "lua", command, first argument)


def _first(lines: list[Line], after: float, test: object) -> float:
    return next(t for t, client, name, key in lines if t >= after and test(client, name, key))  # type: ignore[operator]


def _noted(name: str, key: str) -> bool:
    """Whether a command notes a delivered task unacknowledged: agentq's Redis transport's HSET (its time in the
    entry), kombu's own ZADD into its index."""
    return (name == "HSET" and key == "unacked") or (name == "ZADD" and key == "unacked_index")


def agentq_steps(lines: list[Line], start: float, end: float, claim: str, commit: str) -> list[float]:
    written = _first(lines, start, lambda c, n, k: c != "lua" and n == "EVALSHA")
    pushed = _first(lines, written, lambda c, n, k: c == "lua" and n == "LPUSH")
    received = _first(lines, pushed, lambda c, n, k: _noted(n, k))
    claimed = _first(lines, received, lambda c, n, k: n == "EVALSHA" and k == claim)
    committed = _first(lines, claimed, lambda c, n, k: n == "EVALSHA" and k == commit)
    read = _first(lines, committed, lambda c, n, k: c != "lua" and n == "HGETALL" and k.endswith(":job"))
    marks = [start, written, pushed, received, claimed, committed, read, end]
    return [(b - a) * 1000 for a, b in itertools.pairwise(marks)]


def bare_steps(lines: list[Line], start: float, end: float) -> list[float]:
    pushed = _first(lines, start, lambda c, n, k: n == "LPUSH")
    received = _first(lines, pushed, lambda c, n, k: _noted(n, k))
    stored = _first(lines, received, lambda c, n, k: n == "SETEX")
    marks = [start, pushed, received, stored, end]
    return [(b - a) * 1000 for a, b in itertools.pairwise(marks)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=15)
    args = parser.parse_args(argv)

    import redis

    from agentq.embedded import RedisServer
    from agentq.settings import Settings

    log_dir = Path(tempfile.mkdtemp(prefix="agentq-trace-"))
    dump = log_dir / "monitor.txt"
    with RedisServer() as server:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTQ_")}
        env.update({"AGENTQ_REDIS_URL": server.url, "AGENTQ_MAX_CALLS": "10000", "BENCH_COUNTER": str(log_dir / "c"),
                    "PYTHONPATH": os.pathsep.join([str(bench.BENCH), str(ROOT)]), "PYTHONUNBUFFERED": "1"})
        os.environ.update({k: env[k] for k in ("AGENTQ_REDIS_URL", "AGENTQ_MAX_CALLS", "BENCH_COUNTER")})
        pool = ["--pool", "prefork", "--concurrency", "2"]
        workers = [bench.WorkerProcess("agentq-worker", [sys.executable, "-m", "agentq.cli", "worker", "-m",
                                                         "bench_activities", *pool, "--loglevel", "WARNING"],
                                       env, log_dir),
                   bench.WorkerProcess("bare-worker", [sys.executable, str(bench.BENCH / "bench_bare.py"), *pool],
                                       env, log_dir)]
        try:
            aq, bare = bench.AgentQ(Settings()), bench.Bare(log_dir / "c")
            while "noop" not in aq.client._parts.fleet.live_activities():
                for worker in workers:
                    worker.check()
                time.sleep(0.1)
            for i in range(5):
                aq.one()
                bare.one(i)
            marks: list[tuple[str, float, float]] = []

            def samples() -> None:
                for i in range(args.samples):
                    for side in ("agentq", "bare"):
                        time.sleep(0.03)  # the previous sample's stragglers (its ack, the give-back) end first
                        start = time.time()
                        if side == "agentq":
                            aq.one()
                        else:
                            bare.one(i)
                        marks.append((side, start, time.time()))

            os.environ["BENCH_MONITOR_DUMP"] = str(dump)
            admin = redis.Redis.from_url(server.url, decode_responses=True)
            bench.monitored(server.url, admin, samples)
            admin.close()
            registered = aq.store.scripts.registered  # type: ignore[attr-defined]  # `AgentQ` has a StateStore
            scripts = {name: script.sha for name, script in registered.items()}
        finally:
            for worker in workers:
                worker.stop()
    lines: list[Line] = []
    for text in dump.read_text().splitlines():
        parts = text.split(" ", 3)
        if len(parts) >= 3 and parts[0] != "----":
            lines.append((float(parts[0]), parts[1], parts[2], parts[3] if len(parts) > 3 else ""))
    claim, commit = scripts["claim"], scripts["commit"]
    agentq = [agentq_steps(lines, s, e, claim, commit) for side, s, e in marks if side == "agentq"]
    celery = [bare_steps(lines, s, e) for side, s, e in marks if side == "bare"]
    for title, names, rows in (("one-call agentq job, submit -> result", AGENTQ_STEPS, agentq),
                               ("delay().get()", BARE_STEPS, celery)):
        total = statistics.median(sum(row) for row in rows)
        print(f"\n{title}: median of {len(rows)} under MONITOR, {total:.2f} ms in all")
        for k, name in enumerate(names):
            print(f"  {statistics.median(row[k] for row in rows):6.2f} ms  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
