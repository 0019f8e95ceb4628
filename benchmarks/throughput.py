"""agentq against bare Celery, side by side in one run on one private Redis.

Run (from the repository root)::

    python benchmarks/throughput.py            # full run (a few minutes)
    python benchmarks/throughput.py --quick    # smaller sizes, one round (about a minute)

Not a test: the numbers depend on the machine. It starts a private `redis-server` on a free port (never the
machine's shared Redis), then two worker processes on it, each with the same pool and concurrency
(`--pool prefork --concurrency 2` by default): `agentq worker -m bench_activities` (no-op activities) and a
bare Celery worker (`bench_bare.py`: an app from agentq's own `create_app`, started with the same `Worker`
options as `agentq worker`, so serializer, acks, prefetch and broker options are the same; its consumer is Celery's
own, where agentq's workers publish their task events in groups). This process is only the producer and client of
both. Each row is printed as a ratio next to its target:

(a) bare Celery, N no-op tasks with ``ignore_result``: first send -> the N-th task has run (each task appends a
    byte to a file; no Redis traffic of its own).
(b) bare Celery ``group`` of N no-op tasks with the Redis result backend, ``.get()``.
(c) agentq plan job of N independent no-op calls, ``Client.submit(job).result()``. Every call has its own
    output path (``†state.r<i>``), so each one appends to the log, publishes its events and counts towards
    the job's end. Ratios: (c)/(a) (target >= 0.9) and (c)/(b) (target >= 1.3), as throughput.
(c') the same job of calls of `noop_i`, the no-op registered ``idempotent=True`` (run before their claim, one
    settle step each): ratios against (a) and (b) as for (c).
(d) single-call latency, p50 of interleaved samples: a one-call agentq job submit -> record, against
    ``task.delay().get()`` with the Redis result backend (target: ratio <= 1.2); (d') the same for a call of
    the idempotent no-op.
(e) submission alone, ``Client.submit`` of a chain (call k reads what call k-1 writes), a fan-out (one
    writer, N-1 readers of parts of its output) and N independent calls (all sent at submission), at two
    sizes 10x apart (target: time ratio <= 15, i.e. linear). Their calls go to an activity that is known but
    served by no live worker (docs/protocol.md#activities), so nothing runs them; their keys are deleted after each
    sample.
(f) 500 jobs of 4 calls (all submitted, then all awaited) against one job of 2,000 calls: throughput ratio.
(g) Redis bytes per call after a 2,000-call job (the one of (f)): ``MEMORY USAGE key SAMPLES 0`` summed over
    every key of the job (``agentq:{<job>}:*``), shown per key; the ``INFO memory`` used_memory delta from
    before its submission to after its end is printed beside it (it also holds allocator noise and the
    broker's leftovers), and so are the bytes per task of Celery's result backend (``celery-task-meta-*``
    after a group of the same size).
(h) Redis round trips: ``INFO stats`` total_reads_processed deltas (one read event per request or pipeline
    a client sends; every client of the Redis counts: brokers, result backend, agentq's store) per task in
    (a) and per call in (c); agentq adds the difference. ``MONITOR`` (in a separate, untimed window: it slows
    Redis down) counts the requests of agentq's own store, workers and client, per call of a job of up to 400
    calls and for a one-call job; the client's share is counted by wrapping this process's redis-py client. The
    same windows show every command Redis ran by source: each Lua script with its own commands (and its
    EVALSHA), and the rest (kombu's broker commands, agentq's outside scripts, the client's).
    ``INFO commandstats`` deltas name the commands (those run inside Lua scripts are counted there too), and
    ``INFO stats`` total_net_input_bytes / total_net_output_bytes deltas the bytes sent to Redis and read back
    from it (every client counts) per task in (a) and per call in (c), and per one-call job (an unmonitored
    window of one-call jobs: MONITOR's own output would count). ``INFO cpu`` deltas give redis-server's CPU per
    task in (a) and per call in (c) (the Lua steps' work is there), and /proc the CPU of each worker's main
    process (Celery's consumer) apart from its pool children's.
(i) chains of ``--chain`` dependent calls against a Celery ``chain`` (per-step latency), for reference.

CPU: the CPU time of each worker process tree (parent and pool children, from /proc) per task/call, which is
less sensitive to other load on the machine than wall time. Rounds interleave the cases (a, b, c), so a
change in the machine's load hits both sides alike; tables show medians.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(BENCH))

from agentq.client import Client  # noqa: E402
from agentq.embedded import RedisServer  # noqa: E402
from agentq.protocol.records import WorkerAnnouncement  # noqa: E402
from agentq.protocol.tools import ToolRegistry  # noqa: E402
from agentq.settings import Settings  # noqa: E402
from agentq.store.state import StateStore  # noqa: E402

PARK_QUEUE = "bench.park"


# ------------------------------------------------------------------------------------------ processes


def _children(pid: int) -> list[int]:
    found = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return found


def tree_cpu(pid: int) -> float:
    """CPU seconds (user + system) of a process and its descendants alive now (Linux /proc; 0 elsewhere)."""
    total, stack = 0.0, [pid]
    while stack:
        current = stack.pop()
        cpu = own_cpu(current)
        if cpu is None:
            continue
        total += cpu
        stack += _children(current)
    return total


def own_cpu(pid: int) -> float | None:
    """CPU seconds (user + system) of one process (Linux /proc; None where it cannot be read: gone, or no /proc)."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / tick
    except (OSError, IndexError, ValueError):
        return None


class WorkerProcess:
    """A worker process in its own session (so the whole group is stopped), output to a log file."""

    def __init__(self, name: str, command: list[str], env: dict[str, str], log_dir: Path):
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self._log = open(self.log_path, "w")  # noqa: SIM115 (closed in stop)
        self.popen = subprocess.Popen(command, env=env, cwd=str(ROOT), stdout=self._log, stderr=subprocess.STDOUT,
                                      start_new_session=True)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def children(self) -> list[int]:
        return _children(self.pid)

    def cpu(self) -> float:
        return tree_cpu(self.pid)

    def parent_cpu(self) -> float:
        """The worker's main process alone (Celery's consumer: it receives, hands out and acknowledges tasks)."""
        return own_cpu(self.pid) or 0.0

    def check(self) -> None:
        if self.popen.poll() is not None:
            raise RuntimeError(f"{self.name} exited ({self.popen.returncode}); see {self.log_path}:\n"
                               + self.log_path.read_text()[-3000:])

    def stop(self) -> None:
        if self.popen.poll() is None:
            os.killpg(self.pid, signal.SIGTERM)
            try:
                self.popen.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.pid, signal.SIGKILL)
                self.popen.wait(10)
        self._log.close()


# ------------------------------------------------------------------------------------------ Redis counters


class RoundTrips:
    """Counts round trips made through one redis-py client (a pipeline is one) and the commands in them."""

    def __init__(self, client: Any):
        self.trips = 0
        self.commands: Counter[str] = Counter()
        self._lock = threading.Lock()
        original_execute, original_pipeline = client.execute_command, client.pipeline

        def execute_command(*args: Any, **kwargs: Any) -> Any:
            self._count([str(args[0]).upper()])
            return original_execute(*args, **kwargs)

        def pipeline(*args: Any, **kwargs: Any) -> Any:
            pipe = original_pipeline(*args, **kwargs)
            original = pipe.execute

            def execute(*a: Any, **k: Any) -> Any:
                self._count([str(c[0][0]).upper() for c in pipe.command_stack], pipeline=True)
                return original(*a, **k)

            pipe.execute = execute
            return pipe

        client.execute_command = execute_command
        client.pipeline = pipeline

    def _count(self, names: list[str], pipeline: bool = False) -> None:
        with self._lock:
            self.trips += 1
            self.commands[f"pipeline[{'+'.join(sorted(set(names)))}]" if pipeline else names[0]] += 1

    def snapshot(self) -> tuple[int, Counter[str]]:
        with self._lock:
            return self.trips, Counter(self.commands)


@dataclass
class ServerCounters:
    """`INFO stats`, `INFO commandstats` and `INFO cpu` counters of the private Redis: read events, bytes received
    (requests) and sent (replies: what its clients read back), calls by command, and the server's CPU seconds."""

    reads: int = 0
    commands: Counter[str] = field(default_factory=Counter)
    bytes_in: int = 0
    bytes_out: int = 0
    cpu: float = 0.0

    @classmethod
    def read(cls, admin: Any) -> ServerCounters:
        stats = admin.info("stats")
        commands = admin.info("commandstats")
        cpu = admin.info("cpu")
        return cls(int(stats["total_reads_processed"]),
                   Counter({k.removeprefix("cmdstat_").upper(): int(v["calls"]) for k, v in commands.items()}),
                   int(stats["total_net_input_bytes"]), int(stats["total_net_output_bytes"]),
                   float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]))

    def __sub__(self, other: ServerCounters) -> ServerCounters:
        return ServerCounters(self.reads - other.reads, self.commands - other.commands,
                              self.bytes_in - other.bytes_in, self.bytes_out - other.bytes_out, self.cpu - other.cpu)

    def __add__(self, other: ServerCounters) -> ServerCounters:
        return ServerCounters(self.reads + other.reads, self.commands + other.commands,
                              self.bytes_in + other.bytes_in, self.bytes_out + other.bytes_out, self.cpu + other.cpu)


def measured(admin: Any, workers: list[WorkerProcess], fn: Callable[[], Any],
             parents: list[float] | None = None) -> tuple[Any, float, ServerCounters]:
    """`fn()`, the CPU seconds the worker processes spent meanwhile, and the Redis counters' deltas; the seconds
    of the workers' main processes alone are appended to `parents`."""
    before, cpu = ServerCounters.read(admin), sum(w.cpu() for w in workers)
    parent = sum(w.parent_cpu() for w in workers)
    value = fn()
    if parents is not None:
        parents.append(sum(w.parent_cpu() for w in workers) - parent)
    return value, sum(w.cpu() for w in workers) - cpu, ServerCounters.read(admin) - before


@dataclass
class Requests:
    """Requests (round trips) agentq's store sent, seen by MONITOR, and the first command of each."""

    agentq: int = 0
    agentq_commands: Counter[str] = field(default_factory=Counter)
    # every command Redis ran, by source: `lua <script>` for a script's own commands and its EVALSHA, `broker and
    # others` for the rest (kombu's commands, agentq's outside scripts, the client's)
    by_source: Counter[tuple[str, str]] = field(default_factory=Counter)


PIPELINED_US = 60  # a pipeline's next command starts within this many microseconds of the previous one's end


def monitored(url: str, admin: Any, fn: Callable[[], Any],
              scripts: dict[str, str] | None = None) -> tuple[Any, Requests]:
    """`fn()` and the requests agentq's store sent meanwhile, from `MONITOR`.

    A connection that ran EVALSHA or named an `agentq:` key is agentq's store (kombu's broker connections and
    the result backend never do). Commands run by Lua scripts are not requests. Redis runs every command a
    client's request holds (a pipeline) before it reads another client's, so a request is a command plus the
    commands of the same connection that follow it directly, each within `PIPELINED_US` microseconds of the
    previous one's end (the last command its script ran, for EVALSHA): a connection's next request needs a
    whole round trip first. A MULTI ... EXEC block is one request. `scripts` (SHA-1 -> name) names the scripts
    whose commands `Requests.by_source` counts apart.
    """
    import redis

    done = threading.Event()
    seen: list[tuple[float, str, str, str]] = []  # (time, client or "lua", command, first argument)
    marker = f"bench-monitor-end-{time.monotonic_ns()}"
    connection = redis.Redis.from_url(url, decode_responses=True)

    def listen(monitor: Any) -> None:
        while True:
            entry = monitor.next_command()
            words = entry["command"].split(" ", 2)
            if words[0].upper() == "ECHO" and marker in entry["command"]:
                break
            client = "lua" if entry["client_type"] == "lua" else f"{entry['client_address']}:{entry['client_port']}"
            seen.append((entry["time"], client, words[0].upper(), words[1] if len(words) > 1 else ""))
        done.set()

    with connection.monitor() as monitor:
        thread = threading.Thread(target=listen, args=(monitor,), daemon=True)
        thread.start()
        time.sleep(0.2)
        value = fn()
        time.sleep(0.2)
        admin.echo(marker)
        if not done.wait(60):
            raise RuntimeError("MONITOR did not see the end marker")
    connection.close()
    if os.environ.get("BENCH_MONITOR_DUMP"):
        with open(os.environ["BENCH_MONITOR_DUMP"], "a") as dump:
            for entry in seen:
                dump.write(f"{entry[0]:.6f} {entry[1]} {entry[2]} {entry[3][:60]}\n")
            dump.write("----\n")
    agentq = {client for _, client, name, key in seen if name == "EVALSHA" or key.startswith("agentq:")}
    requests = Requests()
    script = ""
    for _, client, name, key in seen:
        if client != "lua":
            script = (scripts or {}).get(key.strip('"'), key[:8]) if name == "EVALSHA" else ""
        requests.by_source[(f"lua {script}" if script else "broker and others", name)] += 1
    previous_client, previous_end = "", 0.0
    in_multi: set[str] = set()
    for when, client, name, _ in seen:
        if client == "lua":  # run by the previous command's script: that request is still running
            previous_end = when
            continue
        follows = client == previous_client and (when - previous_end) * 1e6 < PIPELINED_US
        previous_client, previous_end = client, when
        if client in in_multi:
            if name in ("EXEC", "DISCARD"):
                in_multi.discard(client)
            continue
        if name == "MULTI":
            in_multi.add(client)
        elif follows:
            continue
        if client in agentq:
            requests.agentq += 1
            requests.agentq_commands[name] += 1
    return value, requests


def delete_matching(admin: Any, pattern: str) -> None:
    keys = list(admin.scan_iter(match=pattern, count=1000))
    for start in range(0, len(keys), 1000):
        admin.delete(*keys[start:start + 1000])


def job_key_bytes(admin: Any, job_id: str) -> dict[str, int]:
    """MEMORY USAGE (SAMPLES 0: every element) of each key of the job, by the key's last part."""
    sizes: dict[str, int] = {}
    for key in admin.scan_iter(match=f"agentq:{{{job_id}}}:*", count=1000):
        sizes[key.rsplit(":", 1)[-1] if ":lease:" not in key else "lease"] = int(
            admin.memory_usage(key, samples=0) or 0)
    return sizes


# ------------------------------------------------------------------------------------------ the two sides


class Bare:
    """The producer side of bare Celery (the worker is `bench_bare.py` in its own process)."""

    def __init__(self, counter: Path):
        from benchmarks import bench_bare

        self.module = bench_bare
        self.app = bench_bare.app
        self.counter = counter

    def fire_and_drain(self, n: int) -> float:
        with open(self.counter, "w"):
            pass  # truncated: the worker's children append one byte per task
        start = time.perf_counter()
        with self.app.producer_or_acquire() as producer:
            for i in range(n):
                self.app.send_task("bench.noop", args=[i], queue=self.module.QUEUE, producer=producer,
                                   ignore_result=True)
        deadline = time.monotonic() + 600
        while os.path.getsize(self.counter) < n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {os.path.getsize(self.counter)} of {n} bare tasks ran")
            time.sleep(0.001)
        return time.perf_counter() - start

    def group(self, n: int, *, forget: bool = True) -> tuple[float, Any]:
        from celery import group

        start = time.perf_counter()
        result = group(self.module.noop_result.s(i) for i in range(n)).apply_async(queue=self.module.QUEUE)
        values = result.get(timeout=600, disable_sync_subtasks=False)
        elapsed = time.perf_counter() - start
        assert values == list(range(n)), "group returned wrong results"
        if forget:
            result.forget()
        return elapsed, result

    def chain(self, length: int) -> float:
        from celery import chain

        inc = self.module.inc
        start = time.perf_counter()
        result = chain(inc.s(0), *(inc.s() for _ in range(length - 1))).apply_async(queue=self.module.QUEUE)
        value = result.get(timeout=600, disable_sync_subtasks=False)
        elapsed = time.perf_counter() - start
        assert value == length, f"chain returned {value}"
        return elapsed

    def one(self, i: int) -> float:
        start = time.perf_counter()
        result = self.module.noop_result.delay(i)
        value = result.get(timeout=60, disable_sync_subtasks=False)
        elapsed = time.perf_counter() - start
        assert value == i
        result.forget()
        return elapsed


def independent_job(n: int, tool: str = "noop") -> dict:
    return {"calls": [{"_tool": tool, "i": i, "_outputPath": f"†state.r{i}"} for i in range(n)]}


def chain_job(length: int, tool: str = "inc") -> dict:
    calls = [{"_tool": tool, "x": 0, "_outputPath": "†state.s0"}]
    calls += [{"_tool": tool, "x": f"†state.s{k - 1}", "_outputPath": f"†state.s{k}"} for k in range(1, length)]
    return {"calls": calls}


def fan_out_job(n: int, tool: str = "park") -> dict:
    calls = [{"_tool": tool, "x": 0, "_outputPath": "†state.root"}]
    calls += [{"_tool": tool, "x": f"†state.root.r{i}", "_outputPath": f"†out.o{i}"} for i in range(1, n)]
    return {"calls": calls}


def parked_independent_job(n: int) -> dict:
    return {"calls": [{"_tool": "park", "x": i, "_outputPath": f"†state.r{i}"} for i in range(n)]}


class AgentQ:
    def __init__(self, settings: Settings):
        from benchmarks.bench_activities import PARK_TOOL

        tools = ToolRegistry()
        tools.register("park", PARK_TOOL)
        self.client = Client(settings=settings, tools=tools)
        store = self.client._parts.store
        assert isinstance(store, StateStore), "the benchmark counts the Redis state store's round trips"
        self.store: StateStore = store
        self.trips = RoundTrips(self.store.redis)

    def park(self) -> None:
        """Make `park` a known activity with no live worker: its calls wait on `bench.park`
        (docs/protocol.md#activities)."""
        announcement = {"id": "bench-park", "queues": [PARK_QUEUE],
                        "activities": [{"name": "park", "task": "agentq.activity.park", "queue": PARK_QUEUE}]}
        self.client._parts.fleet.announce_worker("bench-park", WorkerAnnouncement.from_dict(announcement), ttl_s=60)
        self.client._parts.fleet.retire_worker("bench-park")

    def run(self, job: dict) -> tuple[float, float, dict]:
        start = time.perf_counter()
        handle = self.client.submit(job)
        submitted = time.perf_counter()
        record = handle.result(timeout=600)
        elapsed = time.perf_counter() - start
        if record["status"] != "succeeded":
            raise RuntimeError(f"agentq job failed: {record.get('error')}")
        return elapsed, submitted - start, record

    def one(self, tool: str = "noop") -> float:
        elapsed, _, record = self.run(independent_job(1, tool))
        assert record["state"] == {"r0": 0}
        return elapsed

    def submission(self, admin: Any, job: dict) -> float:
        start = time.perf_counter()
        handle = self.client.submit(job)
        elapsed = time.perf_counter() - start
        delete_matching(admin, f"agentq:{{{handle.id}}}:*")
        delete_matching(admin, f"{PARK_QUEUE}*")
        return elapsed

    def many(self, jobs: int, size: int) -> float:
        start = time.perf_counter()
        handles = [self.client.submit(independent_job(size)) for _ in range(jobs)]
        for handle in handles:
            if handle.result(timeout=600)["status"] != "succeeded":
                raise RuntimeError("a small agentq job failed")
        return time.perf_counter() - start


# ------------------------------------------------------------------------------------------ main


def median(samples: list[float]) -> float:
    return statistics.median(samples)


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class Sizes:
    n: int
    repeat: int
    samples: int
    scale: tuple[int, int]
    jobs: int  # small jobs of `job_size` calls, against one job of jobs * job_size
    job_size: int
    chain: int
    chains: int


FULL = Sizes(n=1500, repeat=3, samples=200, scale=(1_000, 10_000), jobs=500, job_size=4, chain=50, chains=5)
QUICK = Sizes(n=500, repeat=2, samples=60, scale=(300, 3_000), jobs=100, job_size=4, chain=20, chains=3)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes and one round (about a minute)")
    parser.add_argument("--n", type=int, help="tasks/calls in (a), (b), (c)")
    parser.add_argument("--repeat", type=int, help="rounds of (a), (b), (c); tables show the median")
    parser.add_argument("--pool", default="prefork", choices=["prefork", "threads", "solo"])
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--keep-logs", action="store_true", help="print where the worker logs are kept")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    if args.n:
        sizes.n = args.n
    if args.repeat:
        sizes.repeat = max(1, args.repeat)
    n = sizes.n
    big = sizes.jobs * sizes.job_size

    import redis

    log_dir = Path(tempfile.mkdtemp(prefix="agentq-bench-"))
    counter = log_dir / "bare.counter"
    with RedisServer() as server:
        url = server.url
        admin = redis.Redis.from_url(url, decode_responses=True)
        max_calls = max(10_000, n, big, *sizes.scale)
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTQ_")}
        env.update({"AGENTQ_REDIS_URL": url, "AGENTQ_MAX_CALLS": str(max_calls), "BENCH_COUNTER": str(counter),
                    "PYTHONPATH": os.pathsep.join([str(BENCH), str(ROOT)]), "PYTHONUNBUFFERED": "1"})
        os.environ.update({k: env[k] for k in ("AGENTQ_REDIS_URL", "AGENTQ_MAX_CALLS", "BENCH_COUNTER")})
        settings = Settings(max_job_bytes=50_000_000)
        print(f"private redis-server on {url}; pool={args.pool} concurrency={args.concurrency} "
              f"prefetch multiplier={settings.prefetch_multiplier}; n={n} rounds={sizes.repeat}"
              f"{' (quick)' if args.quick else ''}", flush=True)
        pool = ["--pool", args.pool, "--concurrency", str(args.concurrency)]
        workers = [
            WorkerProcess("agentq-worker", [sys.executable, "-m", "agentq.cli", "worker", "-m", "bench_activities",
                                            *pool, "--loglevel", "WARNING"], env, log_dir),
            WorkerProcess("bare-worker", [sys.executable, str(BENCH / "bench_bare.py"), *pool], env, log_dir),
        ]
        agentq_worker, bare_worker = workers
        results: dict[str, Any] = {}
        try:
            bare = Bare(counter)
            aq = AgentQ(settings)
            deadline = time.monotonic() + 60
            while "noop" not in aq.client._parts.fleet.live_activities():
                for w in workers:
                    w.check()
                if time.monotonic() > deadline:
                    raise RuntimeError("the agentq worker did not announce itself")
                time.sleep(0.1)
            aq.park()
            results = run_cases(url, admin, bare, aq, sizes, agentq_worker, bare_worker)
        finally:
            for w in workers:
                w.stop()
            admin.close()
    report(results, sizes)
    if args.keep_logs:
        print(f"\nworker logs: {log_dir}")
    return 0


def run_cases(url: str, admin: Any, bare: Bare, aq: AgentQ, sizes: Sizes, agentq_worker: WorkerProcess,
              bare_worker: WorkerProcess) -> dict[str, Any]:
    n = sizes.n
    r: dict[str, Any] = {"a": [], "b": [], "c": [], "c_i": [], "stats_a": ServerCounters(), "stats_b": ServerCounters(),
                         "stats_c": ServerCounters(), "client_c": (0, Counter()), "parent_a": [], "parent_c": []}

    # warm up both sides (imports, connections, scripts, caches)
    bare.fire_and_drain(min(n, 200))
    bare.group(min(n, 50))
    bare.chain(5)
    bare.one(0)
    aq.run(independent_job(min(n, 200)))
    aq.run(chain_job(5))
    aq.one()
    aq.run(independent_job(min(n, 200), "noop_i"))
    aq.one("noop_i")

    for round_ in range(sizes.repeat):
        elapsed, cpu, stats = measured(admin, [bare_worker], lambda: bare.fire_and_drain(n), r["parent_a"])
        r["a"].append((elapsed, cpu))
        r["stats_a"] += stats
        (elapsed, _), cpu, stats = measured(admin, [bare_worker], lambda: bare.group(n))
        r["b"].append((elapsed, cpu))
        r["stats_b"] += stats
        k0, kc0 = aq.trips.snapshot()
        (elapsed, submit, record), cpu, stats = measured(admin, [agentq_worker], lambda: aq.run(independent_job(n)),
                                                         r["parent_c"])
        k1, kc1 = aq.trips.snapshot()
        assert len(record["state"]) == n, "agentq wrote the wrong number of results"
        r["c"].append((elapsed, cpu, submit))
        r["stats_c"] += stats
        r["client_c"] = (r["client_c"][0] + k1 - k0, r["client_c"][1] + (kc1 - kc0))
        (elapsed, submit, record), cpu, _ = measured(admin, [agentq_worker],
                                                     lambda: aq.run(independent_job(n, "noop_i")))
        assert len(record["state"]) == n, "agentq wrote the wrong number of results"
        r["c_i"].append((elapsed, cpu, submit))
        print(f"  round {round_ + 1}: (a) {r['a'][-1][0]:.2f} s  (b) {r['b'][-1][0]:.2f} s  "
              f"(c) {r['c'][-1][0]:.2f} s  (c') {r['c_i'][-1][0]:.2f} s", flush=True)

    # (h) requests by client kind, from MONITOR (slows Redis down: not during the timed rounds)
    m = min(n, 400)
    for name, job_size in (("h_job", m), ("h_one", 1)):
        k0, _ = aq.trips.snapshot()

        def run_job(size: int = job_size) -> tuple[float, float, dict]:
            return aq.run(independent_job(size))

        _, requests = monitored(url, admin, run_job,
                                {s.sha: name for name, s in aq.store.scripts.registered.items()})
        k1, _ = aq.trips.snapshot()
        r[name] = (requests, k1 - k0)
    r["h_size"] = m
    ones = max(10, sizes.samples // 3)  # one-call jobs, unmonitored (MONITOR's own output would count as bytes)
    _, _, r["h_one_stats"] = measured(admin, [agentq_worker], lambda: [aq.one() for _ in range(ones)])
    r["h_ones"] = ones

    # (d) single-call latency, interleaved
    r["d_bare"], r["d_agentq"], r["d_agentq_i"] = [], [], []
    k0, kc0 = aq.trips.snapshot()
    for i in range(sizes.samples):
        r["d_bare"].append(bare.one(i))
        r["d_agentq"].append(aq.one())
    k1, kc1 = aq.trips.snapshot()
    for i in range(sizes.samples):
        r["d_bare"].append(bare.one(i))
        r["d_agentq_i"].append(aq.one("noop_i"))
    r["client_d"] = ((k1 - k0) / sizes.samples, Counter({k: v / sizes.samples for k, v in (kc1 - kc0).items()}))
    print(f"  single call: p50 bare {median(r['d_bare']) * 1000:.2f} ms, agentq {median(r['d_agentq']) * 1000:.2f} ms, "
          f"idempotent {median(r['d_agentq_i']) * 1000:.2f} ms", flush=True)

    # (e) submission alone, at two sizes
    small, large = sizes.scale
    r["e"] = {}
    for name, make in (("chain", lambda k: chain_job(k, "park")), ("fan-out", fan_out_job),
                       ("independent", parked_independent_job)):
        times = {}
        for size in (small, large):
            job = make(size)
            times[size] = median([aq.submission(admin, job) for _ in range(3 if size == small else 1)])
        r["e"][name] = times
        print(f"  submission of a {name}: {small} calls {times[small]:.3f} s, {large} calls {times[large]:.3f} s",
              flush=True)

    # (f) many small jobs against one big one, and (g) the big job's bytes
    before_memory = int(admin.info("memory")["used_memory"])
    (elapsed, _, record) = aq.run(independent_job(sizes.jobs * sizes.job_size))
    after_memory = int(admin.info("memory")["used_memory"])
    r["f_big"] = elapsed
    r["g_keys"] = job_key_bytes(admin, record["id"])
    r["g_memory"] = after_memory - before_memory
    r["f_small"] = aq.many(sizes.jobs, sizes.job_size)
    print(f"  {sizes.jobs} jobs of {sizes.job_size}: {r['f_small']:.2f} s; one job of "
          f"{sizes.jobs * sizes.job_size}: {r['f_big']:.2f} s", flush=True)
    _, result = bare.group(sizes.jobs * sizes.job_size, forget=False)
    meta = [int(admin.memory_usage(f"celery-task-meta-{child.id}", samples=0) or 0) for child in result.results]
    r["g_celery"] = sum(meta) / len(meta)
    result.forget()

    # (i) chains
    r["i_celery"], r["i_agentq"] = [], []
    for _ in range(sizes.chains):
        r["i_celery"].append(bare.chain(sizes.chain))
        elapsed, _, record = aq.run(chain_job(sizes.chain))
        assert record["state"][f"s{sizes.chain - 1}"] == sizes.chain, "agentq chain computed the wrong value"
        r["i_agentq"].append(elapsed)
    return r


def report(r: dict[str, Any], sizes: Sizes) -> None:
    if not r:
        return
    n, rounds = sizes.n, sizes.repeat
    rows: list[tuple[str, str, str, str]] = []

    def row(name: str, value: str, target: str = "", ok: bool | None = None) -> None:
        rows.append((name, value, target, "" if ok is None else ("ok" if ok else "MISSED")))

    ta, cpu_a = median([x[0] for x in r["a"]]), median([x[1] for x in r["a"]])
    tb, cpu_b = median([x[0] for x in r["b"]]), median([x[1] for x in r["b"]])
    ra, rb = n / ta, n / tb

    def cpu(seconds: float, count: int) -> str:
        return f"worker cpu {seconds / count * 1e6:,.0f} us each"

    row(f"(a) bare Celery, {n} no-op tasks, ignore_result", f"{ta:.3f} s  {ra:,.0f}/s  {cpu(cpu_a, n)}")
    row(f"(b) bare Celery group of {n}, results, .get()", f"{tb:.3f} s  {rb:,.0f}/s  {cpu(cpu_b, n)}")
    for case, label, what in (("c", "(c)", "independent calls"), ("c_i", "(c')", "calls of an idempotent activity")):
        tc, cpu_c, submit_c = (median([x[i] for x in r[case]]) for i in range(3))
        rc = n / tc
        row(f"{label} agentq plan job, {n} {what}", f"{tc:.3f} s  {rc:,.0f}/s  {cpu(cpu_c, n)}",
            f"(submit {submit_c * 1000:.0f} ms)")
        row(f"    {label}/(a) throughput", f"{rc / ra:.2f}x   worker cpu per call {cpu_a / cpu_c:.2f}x", ">= 0.90x",
            rc / ra >= 0.9)
        row(f"    {label}/(b) throughput", f"{rc / rb:.2f}x   worker cpu per call {cpu_b / cpu_c:.2f}x", ">= 1.30x",
            rc / rb >= 1.3)

    pb, pa = median(r["d_bare"]), median(r["d_agentq"])
    row("(d) single call p50: delay().get(), results in Redis",
        f"{pb * 1000:.2f} ms  (p90 {percentile(r['d_bare'], 0.9) * 1000:.2f} ms)")
    row("(d) single call p50: one-call agentq job, submit -> record",
        f"{pa * 1000:.2f} ms  (p90 {percentile(r['d_agentq'], 0.9) * 1000:.2f} ms)")
    row("    (d) agentq / Celery p50", f"{pa / pb:.2f}x", "<= 1.20x", pa / pb <= 1.2)
    pi = median(r["d_agentq_i"])
    row("(d') single call p50: one-call job of an idempotent activity",
        f"{pi * 1000:.2f} ms  (p90 {percentile(r['d_agentq_i'], 0.9) * 1000:.2f} ms)")
    row("    (d') agentq / Celery p50", f"{pi / pb:.2f}x", "<= 1.20x", pi / pb <= 1.2)

    small, large = sizes.scale
    for name, times in r["e"].items():
        ratio = times[large] / times[small]
        row(f"(e) submission of a {name}: {large:,} / {small:,} calls",
            f"{ratio:.1f}  ({times[small] * 1000:.0f} ms, {times[large] * 1000:.0f} ms; "
            f"{times[large] / large * 1e6:.0f} us/call)", "<= 15", ratio <= 15)

    big = sizes.jobs * sizes.job_size
    small_rate, big_rate = big / r["f_small"], big / r["f_big"]
    row(f"(f) {sizes.jobs} jobs of {sizes.job_size} calls", f"{r['f_small']:.3f} s  {small_rate:,.0f} calls/s")
    row(f"(f) one job of {big} calls", f"{r['f_big']:.3f} s  {big_rate:,.0f} calls/s")
    row("    (f) small jobs / one job, throughput", f"{small_rate / big_rate:.2f}x")

    total = sum(r["g_keys"].values())
    row(f"(g) Redis bytes per call, {big}-call job (MEMORY USAGE)", f"{total / big:,.0f} B", "<= 1,600",
        total / big <= 1600)
    row("    INFO used_memory delta per call (cross-check)", f"{r['g_memory'] / big:,.0f} B")
    row("    Celery result backend per task (celery-task-meta)", f"{r['g_celery']:,.0f} B")

    reads_a, reads_c = r["stats_a"].reads / (n * rounds), r["stats_c"].reads / (n * rounds)
    reads_b = r["stats_b"].reads / (n * rounds)
    row("(h) Redis round trips per task (a) / group (b) / call (c)", f"{reads_a:.2f} / {reads_b:.2f} / {reads_c:.2f}")
    row("    added by agentq per call, (c) - (a)", f"{reads_c - reads_a:+.2f}")
    client_trips, _ = r["client_c"]
    row("    client round trips per submit+result, (c) job / (d) job",
        f"{client_trips / rounds:.1f} / {r['client_d'][0]:.1f}")

    m = r["h_size"]
    (job, client_job), (one, client_one) = r["h_job"], r["h_one"]
    worker_job, worker_one = job.agentq - client_job, one.agentq - client_one
    row(f"    MONITOR: agentq's store per call, {m}-call job (workers + client)",
        f"{job.agentq / m:.2f} ({worker_job / m:.2f} + {client_job / m:.2f})")
    row("    MONITOR: agentq's store, one-call job (workers + client)",
        f"{one.agentq} ({worker_one} + {client_one})")
    row("    Celery's broker traffic per call in (c): (c) - agentq's store", f"{reads_c - job.agentq / m:.2f}")
    commands_a = sum(r["stats_a"].commands.values()) / (n * rounds)
    commands_c = sum(r["stats_c"].commands.values()) / (n * rounds)
    row("    Redis commands per task (a) / call (c), inside Lua included", f"{commands_a:.2f} / {commands_c:.2f}",
        "<= 20 per call", commands_c <= 20)
    cpu_redis_a, cpu_redis_c = (r[k].cpu / (n * rounds) * 1e6 for k in ("stats_a", "stats_c"))
    row("    redis-server CPU per task (a) / call (c)", f"{cpu_redis_a:,.0f} / {cpu_redis_c:,.0f} us")
    parent_a, parent_c = (median(r[k]) / n * 1e6 for k in ("parent_a", "parent_c"))
    tree_a, tree_c = (median([x[1] for x in r[k]]) / n * 1e6 for k in ("a", "c"))
    row("    worker main process CPU per task (a) / call (c)", f"{parent_a:,.0f} / {parent_c:,.0f} us  "
        f"(pool children: {tree_a - parent_a:,.0f} / {tree_c - parent_c:,.0f} us)")
    in_a, out_a = r["stats_a"].bytes_in / (n * rounds), r["stats_a"].bytes_out / (n * rounds)
    in_c, out_c = r["stats_c"].bytes_in / (n * rounds), r["stats_c"].bytes_out / (n * rounds)
    row("(h) Redis bytes sent / read back per task (a)", f"{in_a:,.0f} / {out_a:,.0f} B")
    row(f"(h) Redis bytes sent / read back per call (c), {n}-call job", f"{in_c:,.0f} / {out_c:,.0f} B")
    ones, one_stats = r["h_ones"], r["h_one_stats"]
    row("(h) one-call job, per job: Redis commands, bytes sent / read back",
        f"{sum(one_stats.commands.values()) / ones:.1f}, {one_stats.bytes_in / ones:,.0f} / "
        f"{one_stats.bytes_out / ones:,.0f} B")

    ic, ia = median(r["i_celery"]), median(r["i_agentq"])
    steps = sizes.chain
    row(f"(i) Celery chain of {steps}, results, .get()", f"{ic * 1000:.1f} ms  {ic / steps * 1000:.2f} ms/step")
    row(f"(i) agentq chain of {steps} dependent calls", f"{ia * 1000:.1f} ms  {ia / steps * 1000:.2f} ms/step")
    row("    (i) agentq / Celery", f"{ia / ic:.2f}x")

    widths = [max(len(x[i]) for x in rows) for i in range(3)]
    print()
    print(f"{'case':<{widths[0]}}  {'measured':<{widths[1]}}  {'target':<{widths[2]}}")
    print("-" * (sum(widths) + 12))
    for name, value, target, mark in rows:
        print(f"{name:<{widths[0]}}  {value:<{widths[1]}}  {target:<{widths[2]}}  {mark}")

    print(f"\n(g) bytes of the {big}-call job's keys (MEMORY USAGE ... SAMPLES 0), per call:")
    for key, size in sorted(r["g_keys"].items(), key=lambda kv: -kv[1]):
        print(f"  {size / big:9,.0f}  {key}")

    print("\n(h) INFO commandstats per task (a) and per call (c), inside-Lua commands included:")
    calls = n * rounds
    sa, sc = r["stats_a"].commands, r["stats_c"].commands
    names = sorted(set(sa) | set(sc), key=lambda k: -(sc[k] / calls))
    print(f"  {'command':<22}{'(a) bare':>10}{'(c) agentq':>12}{'added':>9}")
    for name in names:
        pa_, pc_ = sa[name] / calls, sc[name] / calls
        if pa_ < 0.0005 and pc_ < 0.0005:
            continue
        print(f"  {name:<22}{pa_:>10.3f}{pc_:>12.3f}{pc_ - pa_:>+9.3f}")
    total_a, total_c = sum(sa.values()) / calls, sum(sc.values()) / calls
    print(f"  {'total':<22}{total_a:>10.3f}{total_c:>12.3f}{total_c - total_a:>+9.3f}")
    print(f"\n(h) agentq's store requests by first command, {m}-call job, per call (workers and client):")
    for name, count in sorted(job.agentq_commands.items(), key=lambda kv: -kv[1]):
        print(f"  {count / m:7.3f}  {name}")
    print("    the same for a one-call job:")
    for name, count in sorted(one.agentq_commands.items(), key=lambda kv: -kv[1]):
        print(f"  {count:7.0f}  {name}")
    for label, requests, calls in ((f"a {m}-call job, per call", job, m), ("a one-call job", one, 1)):
        print(f"\n(h) every Redis command by source, MONITOR, {label} (a script's own commands with it):")
        sources: Counter[str] = Counter()
        for (source, _), count in requests.by_source.items():
            sources[source] += count
        for source, total in sorted(sources.items(), key=lambda kv: -kv[1]):
            names = sorted(((n, c) for (s, n), c in requests.by_source.items() if s == source), key=lambda kv: -kv[1])
            print(f"  {total / calls:7.2f}  {source}: " + ", ".join(f"{n} {c / calls:.2f}" for n, c in names
                                                                  if c / calls >= 0.005))
        print(f"  {sum(sources.values()) / calls:7.2f}  total")
    print("\n    the client's round trips for one single-call job (d), submit + result:")
    for name, count in sorted(r["client_d"][1].items(), key=lambda kv: -kv[1]):
        print(f"  {count:7.2f}  {name}")


if __name__ == "__main__":
    raise SystemExit(main())
