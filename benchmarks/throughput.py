"""Throughput of agentq against bare Celery on the same broker, in one run against one private Redis.

Run (from the repository root)::

    python benchmarks/throughput.py [--n 2000] [--chain 50] [--concurrency 8] [--pool threads] [--repeat 3]

Not a test: the numbers depend on the machine. It starts a private `redis-server` on a free port (never the
machine's shared Redis) and measures, in rounds that interleave the cases (so a change in the machine's load
hits bare Celery and agentq alike; the table shows medians):

(a) bare Celery, N no-op tasks with ``ignore_result``: the time from the first send until the worker has
    executed all N (an in-process counter + event inside the task: no extra Redis traffic in the baseline).
(b) bare Celery ``group`` of N no-op tasks with the Redis result backend, gathered with ``.get()``.
(c) an agentq plan job of N independent no-op calls, submit -> job succeeded (``Client.submit(...).result()``).
    Every call has an output path, ``"_outputPath": "†state.r<i>"``: each call is awaited and its result is
    written to its own key of the job's state, so every call appends one message to the log, publishes its
    events and counts towards the job's end, as a fan-out job does.
(d) a chain of ``--chain`` dependent calls: in agentq call k reads ``†state.s<k-1>`` and writes
    ``†state.s<k>`` (each call waits on the previous one's output); in Celery a ``chain`` of the same
    number of tasks (each gets the previous result) with the Redis result backend, ``.get()``.

The worker is the same for every case: a Celery ``WorkController`` in a thread of this process
(``agentq.runtime.worker.InProcessWorker`` for agentq; the same controller, pool class (the app-bound threads
pool), concurrency, prefetch and broker settings for bare Celery, which uses an app built by the same
``create_app`` factory: JSON, acks late, prefetch multiplier 1, task events on; settings come from the
environment as for any agentq process, so ``AGENTQ_TASK_EVENTS=false`` measures both without the four event
messages of each task and ``AGENTQ_PREFETCH_MULTIPLIER=4`` with more prefetch). Both workers run side by side,
each on its own queues and kombu event loop. Producers, the workers and the client share one Python process (and its
GIL), exactly like agentq's embedded mode, so throughput follows CPU per task: the table also shows the
process's CPU time per task/call, which is less sensitive to other load on the machine than wall time.
In this setting every blocking Redis round trip a task makes costs far more CPU than it does alone (the GIL
changes hands around it): measure a bare task that sends two PINGs to see what the two round trips of a
claim and a commit cost before agentq does any work.

Redis traffic: ``INFO commandstats`` deltas per task/call (commands run inside Lua scripts are counted by
Redis too), and the round trips agentq's own code makes, counted by wrapping ``execute_command`` and pipeline
``execute`` of the agentq state store's Redis clients (the worker runtime's and the client's). Celery's
broker traffic (kombu) and the result backend use their own connections and are not counted as agentq's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentq.client import Client  # noqa: E402
from agentq.protocol.activities import ActivityRegistry  # noqa: E402
from agentq.protocol.tools import ToolRegistry  # noqa: E402
from agentq.runtime.app import Runtime, create_app  # noqa: E402
from agentq.runtime.redis_server import RedisServer  # noqa: E402
from agentq.runtime.worker import InProcessWorker  # noqa: E402
from agentq.settings import Settings  # noqa: E402

BARE_QUEUE = "bench.bare"


# ------------------------------------------------------------------------------------------ helpers


class RoundTrips:
    """Counts round trips (and the commands in them) made through one redis-py client."""

    def __init__(self, client: Any, scripts: dict[str, str]):
        self.client = client
        self.scripts = scripts  # sha -> script name, to name EVALSHA round trips
        self.trips = 0
        self.commands: Counter[str] = Counter()
        self._lock = threading.Lock()
        original_execute, original_pipeline = client.execute_command, client.pipeline

        def execute_command(*args: Any, **kwargs: Any) -> Any:
            self._count([args])
            return original_execute(*args, **kwargs)

        def pipeline(*args: Any, **kwargs: Any) -> Any:
            pipe = original_pipeline(*args, **kwargs)
            original = pipe.execute

            def execute(*a: Any, **k: Any) -> Any:
                self._count([c[0] for c in pipe.command_stack], pipeline=True)
                return original(*a, **k)

            pipe.execute = execute
            return pipe

        client.execute_command = execute_command
        client.pipeline = pipeline

    def _name(self, args: tuple) -> str:
        name = str(args[0]).upper()
        if name == "EVALSHA" and len(args) > 1:
            return f"EVALSHA {self.scripts.get(args[1], args[1][:8])}"
        return name

    def _count(self, commands: list[tuple], pipeline: bool = False) -> None:
        with self._lock:
            self.trips += 1
            names = [self._name(c) for c in commands]
            if pipeline:
                self.commands[f"pipeline[{'+'.join(sorted(set(names)))}]"] += 1
            else:
                self.commands[names[0]] += 1

    def snapshot(self) -> tuple[int, Counter[str]]:
        with self._lock:
            return self.trips, Counter(self.commands)


def count_store(store: Any) -> RoundTrips:
    scripts = {script.sha: name for name, script in store._scripts.items()}
    return RoundTrips(store.redis, scripts)


def commandstats(admin: Any) -> Counter[str]:
    stats = admin.info("commandstats")
    return Counter({k.removeprefix("cmdstat_").upper(): int(v["calls"]) for k, v in stats.items()})


def start_celery_worker(app: Any, queues: list[str], concurrency: int, pool: str) -> tuple[Any, threading.Thread]:
    """A Celery worker in a thread of this process, built and run exactly like `InProcessWorker` (same
    controller options and pool class, its own kombu event loop)."""
    from celery.worker import WorkController
    from kombu.asynchronous import get_event_loop, set_event_loop

    from agentq.runtime.pool import AppThreadPool

    app.finalize()
    ready = threading.Event()
    previous = get_event_loop()
    set_event_loop(None)  # its own hub, not another in-process worker's
    try:
        controller = WorkController(
            app=app, hostname=f"bench-{uuid.uuid4().hex[:8]}@localhost",
            pool_cls=AppThreadPool if pool == "threads" else pool, concurrency=concurrency, queues=queues,
            loglevel="WARNING", without_heartbeat=True, without_mingle=True, without_gossip=True,
            ready_callback=lambda *_: ready.set(),
        )
    finally:
        set_event_loop(previous)

    def run() -> None:
        app.set_current()
        controller.start()

    thread = threading.Thread(target=run, name="bench-celery-worker", daemon=True)
    thread.start()
    if not ready.wait(30):
        raise RuntimeError("bare Celery worker did not become ready")
    return controller, thread


def stop_celery_worker(controller: Any, thread: threading.Thread) -> None:
    """Stop it from inside its own event loop (which owns the broker connection), as `InProcessWorker.stop`."""
    from celery.exceptions import WorkerShutdown

    def shutdown() -> None:
        raise WorkerShutdown(0)

    hub = getattr(controller, "hub", None)
    if hub is not None and thread.is_alive():
        hub.call_soon(shutdown)
    else:
        controller.stop(in_sighandler=False)
    thread.join(30)


def median(samples: list[float]) -> float:
    return statistics.median(samples)


# ------------------------------------------------------------------------------------------ bare Celery


class Bare:
    def __init__(self, settings: Settings, redis_url: str):
        self.app = create_app(settings, name="bench-bare")
        self.app.conf.update(task_default_queue=BARE_QUEUE, result_backend=redis_url, result_expires=600)
        self.done = 0
        self.target = 0
        self.all_done = threading.Event()
        self.lock = threading.Lock()
        app = self.app

        @app.task(name="bench.noop", shared=False, ignore_result=True)
        def noop(i: int) -> None:
            with self.lock:
                self.done += 1
                if self.done >= self.target:
                    self.all_done.set()

        @app.task(name="bench.noop_result", shared=False, ignore_result=False)
        def noop_result(i: int) -> int:
            return i

        @app.task(name="bench.inc", shared=False, ignore_result=False)
        def inc(x: int) -> int:
            return x + 1

        self.noop, self.noop_result, self.inc = noop, noop_result, inc

    def fire_and_drain(self, n: int) -> float:
        with self.lock:
            self.done, self.target = 0, n
            self.all_done.clear()
        start = time.perf_counter()
        with self.app.producer_or_acquire() as producer:
            for i in range(n):
                self.app.send_task("bench.noop", args=[i], queue=BARE_QUEUE, producer=producer, ignore_result=True)
        if not self.all_done.wait(600):
            raise RuntimeError(f"only {self.done} of {n} bare tasks ran")
        return time.perf_counter() - start

    def group(self, n: int) -> float:
        from celery import group

        start = time.perf_counter()
        result = group(self.noop_result.s(i) for i in range(n)).apply_async(queue=BARE_QUEUE)
        values = result.get(timeout=600, disable_sync_subtasks=False)
        elapsed = time.perf_counter() - start
        assert values == list(range(n)), "group returned wrong results"
        result.forget()
        return elapsed

    def chain(self, length: int) -> float:
        from celery import chain

        start = time.perf_counter()
        result = chain(self.inc.s(0), *(self.inc.s() for _ in range(length - 1))).apply_async(queue=BARE_QUEUE)
        value = result.get(timeout=600, disable_sync_subtasks=False)
        elapsed = time.perf_counter() - start
        assert value == length, f"chain returned {value}"
        return elapsed


# ------------------------------------------------------------------------------------------ agentq


def agentq_registries() -> tuple[ToolRegistry, ActivityRegistry]:
    tools, activities = ToolRegistry(), ActivityRegistry()
    tools.register("noop", {
        "type": "object", "description": "does nothing and returns its index",
        "properties": {"_tool": {"type": "string", "const": "noop"}, "i": {"type": "integer"}, "_output": {}},
    })
    tools.register("inc", {
        "type": "object", "description": "adds one",
        "properties": {"_tool": {"type": "string", "const": "inc"}, "x": {"type": "integer"}, "_output": {}},
    })
    activities.register("noop", lambda call: call["i"])
    activities.register("inc", lambda call: call["x"] + 1)
    return tools, activities


def fan_out_job(n: int) -> dict:
    return {"calls": [{"_tool": "noop", "i": i, "_outputPath": f"†state.r{i}"} for i in range(n)]}


def chain_job(length: int) -> dict:
    calls = [{"_tool": "inc", "x": 0, "_outputPath": "†state.s0"}]
    calls += [{"_tool": "inc", "x": f"†state.s{k - 1}", "_outputPath": f"†state.s{k}"} for k in range(1, length)]
    return {"calls": calls}


def run_job(client: Client, job: dict) -> tuple[float, float, dict]:
    start = time.perf_counter()
    handle = client.submit(job)
    submitted = time.perf_counter()
    record = handle.result(timeout=600)
    elapsed = time.perf_counter() - start
    if record["status"] != "succeeded":
        raise RuntimeError(f"agentq job failed: {record.get('error')}")
    return elapsed, submitted - start, record


# ------------------------------------------------------------------------------------------ main


def timed(fn: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    """`fn(*args)` and the CPU seconds this whole process (every thread) spent meanwhile."""
    cpu = time.process_time()
    value = fn(*args)
    return value, time.process_time() - cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=2000, help="tasks/calls in (a), (b), (c)")
    parser.add_argument("--chain", type=int, default=50, help="length of the chains in (d)")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--pool", default="threads", choices=["threads", "solo"])
    parser.add_argument("--repeat", type=int, default=3, help="rounds of each case; the table shows the median")
    args = parser.parse_args(argv)
    n, length, repeat = args.n, args.chain, max(1, args.repeat)
    chains = max(5, repeat)

    import redis

    with RedisServer() as server:
        url = server.url
        admin = redis.Redis.from_url(url, decode_responses=True)
        settings = Settings(redis_url=url, max_calls=max(10_000, n), max_job_bytes=50_000_000)
        print(f"private redis-server on {url}; n={n} chain={length} concurrency={args.concurrency} "
              f"pool={args.pool} repeat={repeat} (median of rounds)", flush=True)

        # Both workers run side by side (each serves only its own queues) and the rounds of the cases are
        # interleaved, so a change in the machine's load affects bare Celery and agentq alike.
        bare = Bare(settings, url)
        controller, thread = start_celery_worker(bare.app, [BARE_QUEUE], args.concurrency, args.pool)
        tools, activities = agentq_registries()
        runtime = Runtime(settings=settings, activities=activities, tools=tools)
        worker = InProcessWorker(runtime, engine=True, concurrency=args.concurrency, pool=args.pool).start()
        client = Client(settings=settings)
        worker_trips, client_trips = count_store(runtime.store), count_store(client._parts.store)
        stats_a: Counter[str] = Counter()
        stats_c: Counter[str] = Counter()
        a, b, c, d_celery, d_agentq = [], [], [], [], []
        trips_c, trips_d = 0, 0
        commands_c: Counter[str] = Counter()
        client_c: Counter[str] = Counter()
        client_trips_c = 0
        try:
            bare.fire_and_drain(min(n, 200))  # warm up
            bare.group(min(n, 50))
            bare.chain(5)
            run_job(client, fan_out_job(min(n, 200)))
            run_job(client, chain_job(5))
            for round_ in range(repeat):
                before = commandstats(admin)
                a.append(timed(bare.fire_and_drain, n))
                stats_a += commandstats(admin) - before
                b.append(timed(bare.group, n))
                before = commandstats(admin)
                w0, wc0 = worker_trips.snapshot()
                k0, kc0 = client_trips.snapshot()
                (elapsed, submit, record), cpu = timed(run_job, client, fan_out_job(n))
                assert len(record["state"]) == n, "agentq fan-out wrote the wrong number of results"
                c.append((elapsed, submit, cpu))
                stats_c += commandstats(admin) - before
                w1, wc1 = worker_trips.snapshot()
                k1, kc1 = client_trips.snapshot()
                trips_c, commands_c = trips_c + w1 - w0, commands_c + (wc1 - wc0)
                client_trips_c, client_c = client_trips_c + k1 - k0, client_c + (kc1 - kc0)
                print(f"  round {round_ + 1}: (a) {a[-1][0]:.2f} s  (b) {b[-1][0]:.2f} s  (c) {c[-1][0]:.2f} s",
                      flush=True)
            for _ in range(chains):
                d_celery.append(timed(bare.chain, length))
                dw0, _ = worker_trips.snapshot()
                (elapsed, _, record), cpu = timed(run_job, client, chain_job(length))
                assert record["state"][f"s{length - 1}"] == length, "agentq chain computed the wrong value"
                d_agentq.append((elapsed, cpu))
                dw1, _ = worker_trips.snapshot()
                trips_d += dw1 - dw0

            # what a job costs whatever its size: jobs of one call (fan-out) and of two calls (chain)
            s0, _ = worker_trips.snapshot()
            for _ in range(3):
                run_job(client, fan_out_job(1))
            s1, _ = worker_trips.snapshot()
            for _ in range(3):
                run_job(client, chain_job(2))
            s2, _ = worker_trips.snapshot()
        finally:
            worker.stop()
            stop_celery_worker(controller, thread)
            client.close()
            runtime.close()
            bare.app.close()
            admin.close()

    calls_c, calls_d = n * repeat, length * chains
    ta, cpu_a = median([w for w, _ in a]), median([cpu for _, cpu in a])
    tb, cpu_b = median([w for w, _ in b]), median([cpu for _, cpu in b])
    tc, submit_c, cpu_c = (median([x[i] for x in c]) for i in range(3))
    dc, cpu_dc = median([w for w, _ in d_celery]), median([cpu for _, cpu in d_celery])
    da, cpu_da = median([w for w, _ in d_agentq]), median([cpu for _, cpu in d_agentq])
    ra, rb, rc = n / ta, n / tb, n / tc
    fan_job = (s1 - s0) / 3  # round trips of a one-call job
    fan_call = (trips_c / repeat - fan_job) / (n - 1) if n > 1 else float("nan")
    chain_job2 = (s2 - s1) / 3  # of a two-call chain
    chain_call = (trips_d / chains - chain_job2) / (length - 2) if length > 2 else float("nan")

    rows: list[tuple[str, str, str, str]] = []

    def row(name: str, value: str, target: str = "", ok: bool | None = None) -> None:
        rows.append((name, value, target, "" if ok is None else ("ok" if ok else "MISSED")))

    def us(cpu: float, count: int) -> str:
        return f"cpu {cpu / count * 1e6:,.0f} us/each"

    row(f"(a) bare Celery, {n} no-op tasks, ignore_result", f"{ta:.3f} s  {ra:,.0f}/s  {us(cpu_a, n)}")
    row(f"(b) bare Celery group of {n}, result backend, .get()", f"{tb:.3f} s  {rb:,.0f}/s  {us(cpu_b, n)}")
    row(f"(c) agentq plan job, {n} independent calls", f"{tc:.3f} s  {rc:,.0f}/s  {us(cpu_c, n)}",
        f"(submit {submit_c:.3f} s)")
    row("    (c)/(a) throughput", f"{rc / ra:.2f}x   cpu {cpu_a / cpu_c:.2f}x", ">= 0.80x", rc / ra >= 0.8)
    row("    (c)/(b) throughput", f"{rc / rb:.2f}x   cpu {cpu_b / cpu_c:.2f}x", ">= 1.00x", rc / rb >= 1.0)
    row(f"(d) Celery chain of {length}, result backend, .get()",
        f"{dc * 1000:.1f} ms  {dc / length * 1000:.2f} ms/step  {us(cpu_dc, length)}")
    row(f"(d) agentq chain of {length} dependent calls",
        f"{da * 1000:.1f} ms  {da / length * 1000:.2f} ms/step  {us(cpu_da, length)}")
    row("    (d) agentq / Celery time", f"{da / dc:.2f}x   cpu {cpu_da / cpu_dc:.2f}x", "<= 1.50x", da / dc <= 1.5)
    row("agentq round trips per call, independent calls (c)", f"{fan_call:.2f}", "<= 3", round(fan_call, 2) <= 3)
    row("agentq round trips per call, dependent calls (d)", f"{chain_call:.2f}", "<= 3", round(chain_call, 2) <= 3)
    row("    plus per job (worker side: first call, finalize)",
        f"{fan_job - fan_call:.1f} (c)  {chain_job2 - 2 * chain_call:.1f} (d)")
    row("    all worker round trips / calls in (c), (d)",
        f"{trips_c / calls_c:.3f} (c)  {trips_d / calls_d:.3f} (d)")
    row("    client (submit + wait), per call in (c)", f"{client_trips_c / calls_c:.3f}")

    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    print()
    print(f"{'case':<{widths[0]}}  {'measured':<{widths[1]}}  {'target':<{widths[2]}}")
    print("-" * (sum(widths) + 12))
    for name, value, target, mark in rows:
        print(f"{name:<{widths[0]}}  {value:<{widths[1]}}  {target:<{widths[2]}}  {mark}")
    print("\ncpu: CPU time of this whole process (producer, worker threads, client) per task/call; the ratios\n"
          "     next to the throughput ratios compare CPU per task/call (less sensitive to other load).")

    print(f"\nround trips of agentq's worker-side store during (c), per call ({calls_c} calls):")
    for name, count in sorted(commands_c.items(), key=lambda kv: -kv[1]):
        print(f"  {count / calls_c:7.3f}  {name}")
    print("round trips of the client's store during (c), per call:")
    for name, count in sorted(client_c.items(), key=lambda kv: -kv[1]):
        print(f"  {count / calls_c:7.3f}  {name}")

    print("\nINFO commandstats per task (a) and per call (c) (inside-Lua commands included; "
          "(c) includes submit and the client):")
    names = sorted(set(stats_a) | set(stats_c), key=lambda k: -(stats_c[k] / calls_c))
    print(f"  {'command':<22}{'(a) bare':>10}{'(c) agentq':>12}{'added':>9}")
    for name in names:
        pa, pc = stats_a[name] / (n * repeat), stats_c[name] / calls_c
        if pa < 0.0005 and pc < 0.0005:
            continue
        print(f"  {name:<22}{pa:>10.3f}{pc:>12.3f}{pc - pa:>+9.3f}")
    total_a, total_c = sum(stats_a.values()) / (n * repeat), sum(stats_c.values()) / calls_c
    print(f"  {'total':<22}{total_a:>10.3f}{total_c:>12.3f}{total_c - total_a:>+9.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
