"""How many model streams one `agentq dispatcher` holds, and what a tick costs as a conversation grows.

Run (from the repository root, with the dev extra installed: ``tests/fake_anthropic.py`` imports pytest)::

    .venv/bin/python benchmarks/engine.py [--jobs 200,1000] [--stream-s 2] [--chunks 10] [--ticks 10,200]
    .venv/bin/python benchmarks/engine.py --dispatcher-args="--pool prefork"     # the engine on processes
    .venv/bin/python benchmarks/engine.py --quick                                  # a smoke run: about 30 s
    .venv/bin/python benchmarks/engine.py --jobs 200 --ticks "" --cprofile /tmp/d.pstats   # where its CPU goes

Not a test: the numbers depend on the machine (and on what else runs on it). Real parts: a private
``redis-server`` on a free port (never the machine's shared Redis), one ``agentq dispatcher`` process started with
its defaults (plus ``--dispatcher-args``), the real ``anthropic`` SDK in it, talking to the fake Messages API of
``tests/fake_anthropic.py``, which runs in this process and counts the requests it answers at once. The jobs are
submitted and waited on by one ``agentq.Client`` shared by a few threads of a client process of its own.

(1) Concurrent agent jobs. N agent jobs of two ticks each (the first answer has no call and no output, the
    second gives the output), submitted at once; every answer streams for ``--stream-s`` seconds (``--chunks``
    pieces of the solution, evenly spaced). The ideal is two streams back to back: 2 x ``--stream-s``. Shown: the
    most requests the fake answered at once, wall time from the first submission to the last job's record and
    its ratio to the ideal, the time the submissions took, the dispatcher's peak RSS and the CPU it used (and per
    model request). The ideal counts from the first submission, so the time the client takes to submit the
    last job (on the same CPUs) is in the wall time; the ratio to the best the dispatcher could do once that
    job was submitted (the submissions' time + 2 x ``--stream-s``) is shown beside it; then the part of the
    dispatcher's CPU spent in the kernel and its context switches (each piece of a stream wakes its thread), and the
    CPU per model request of the other processes sharing the CPUs (the fake Messages API, the client, redis-server).
(2) Tick overhead. One agent job of T ticks against a zero-latency model (each answer comes at once: no call,
    no output, until the last), timed from submission to its record, divided by T; and the time from one request
    to the next over its last fifth (the median), which is what a tick costs once the conversation is T
    ticks long: the tick's task, its store steps, the request with the whole conversation, the SDK, the HTTP
    exchange, the fake's own checks of the request, the next tick's task. The fake's own time per request is
    shown apart (it checks each request as the real API would, which takes longer as the conversation grows), and
    the rest, agentq's: the median over those ticks of each one's time less the fake's.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import multiprocessing
import os
import shlex
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402

from agentq.client import Client  # noqa: E402
from agentq.embedded import RedisServer  # noqa: E402
from agentq.settings import Settings  # noqa: E402
from tests.fake_anthropic import Answer, FakeAnthropic, RecordedRequest  # noqa: E402

OUTPUT = {"type": "object", "properties": {"done": {"type": "boolean"}}, "required": ["done"]}
GOING_ON: dict[str, Any] = {"calls": [], "output": None}
FINAL = {"calls": [], "output": {"done": True}}
CLIENT_THREADS = 16


def agent_job(max_ticks: int) -> dict:
    return {"context": [{"type": "text", "role": "system", "text": "You are a benchmark agent."},
                        {"type": "text", "text": "Think, then answer."}],
            "tools": [], "output": OUTPUT, "options": {"max_ticks": max_ticks}}


def tick_of(request: RecordedRequest) -> int:
    """Which tick of its job a request is (0 for the first): the number of earlier solutions in it."""
    return sum(1 for turn in request.body.get("messages") or [] if turn.get("role") == "assistant")


def streamed(solution: dict, stream_s: float, chunks: int) -> Answer:
    """`solution` in `chunks` pieces spread over `stream_s` seconds (the first at once, the last at the end)."""
    text = Answer.solution(solution, chunk_size=1_000_000).text_of_solution
    size = max(1, -(-len(text) // max(1, chunks)))
    answer = Answer.raw(text, chunk_size=size)
    answer.delay_s = stream_s / max(1, len(answer.chunks) - 1) if len(answer.chunks) > 1 else 0.0
    answer.first_byte_delay_s = stream_s if len(answer.chunks) == 1 else 0.0
    return answer


# ------------------------------------------------------------------------------------------ the dispatcher


class Dispatcher:
    """One `agentq dispatcher` process; its RSS (with any pool children) sampled while it runs."""

    def __init__(self, redis_url: str, fake: FakeAnthropic, args: list[str], log_path: Path,
                 profile: Path | None = None):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTQ_", "ANTHROPIC_"))}
        env.update(AGENTQ_REDIS_URL=redis_url, AGENTQ_LLM="anthropic", ANTHROPIC_BASE_URL=fake.base_url,
                   ANTHROPIC_API_KEY="sk-ant-benchmark", PYTHONPATH=str(ROOT), AGENTQ_HEARTBEAT_S="1")
        command = [sys.executable, "-m", "agentq.cli"]
        if profile is not None:  # every thread under cProfile (benchmarks/profiled_dispatcher.py)
            env["AGENTQ_BENCH_PROFILE"] = str(profile)
            command = [sys.executable, str(ROOT / "benchmarks" / "profiled_dispatcher.py")]
        self.log = open(log_path, "wb")  # noqa: SIM115 (closed in stop)
        self.popen = subprocess.Popen([*command, "dispatcher", "--loglevel", "WARNING", *args], env=env,
                                      cwd=str(ROOT), stdout=self.log, stderr=subprocess.STDOUT,
                                      start_new_session=True)
        self.process = psutil.Process(self.popen.pid)
        self.profile = profile
        self.peak_rss = 0
        self._found: list[psutil.Process] = []
        self._found_at = -1e9
        self._sampling = threading.Event()
        self._sampler: threading.Thread | None = None

    def processes(self, *, fresh: bool = True) -> list[psutil.Process]:
        """The dispatcher and its pool's children. Finding the children reads every process of the machine
        (psutil scans /proc: about 14 ms of CPU with 140 processes), so the RSS sampler (`fresh=False`) looks
        for new ones once a second only, not at every sample: at 10 samples a second that scan took a seventh
        of a CPU from the processes measured."""
        now = time.monotonic()
        if fresh or now - self._found_at >= 1.0:
            try:
                self._found = [self.process, *self.process.children(recursive=True)]
            except psutil.NoSuchProcess:
                self._found = []
            self._found_at = now
        return self._found

    def cpu_s(self) -> float:
        user, kernel, *_ = self.counts()
        return user + kernel

    def counts(self) -> tuple[float, float, int, int]:
        """CPU seconds in user space and in the kernel, and context switches (voluntary, involuntary), of the
        dispatcher so far."""
        user = system = 0.0
        voluntary = involuntary = 0
        for proc in self.processes():
            try:
                times, switched = proc.cpu_times(), proc.num_ctx_switches()
            except psutil.NoSuchProcess:
                continue
            user, system = user + times.user, system + times.system
            waited, made = thread_switches(proc.pid, (switched.voluntary, switched.involuntary))
            voluntary, involuntary = voluntary + waited, involuntary + made
        return user, system, voluntary, involuntary

    def rss(self) -> int:
        total = 0
        for proc in self.processes(fresh=False):
            with contextlib.suppress(psutil.NoSuchProcess):
                total += proc.memory_info().rss
        return total

    def sample(self) -> None:
        """Start sampling the RSS (the peak since is `peak_rss`)."""
        self.peak_rss = self.rss()
        self._sampling.clear()

        def run() -> None:
            while not self._sampling.wait(0.1):
                self.peak_rss = max(self.peak_rss, self.rss())

        self._sampler = threading.Thread(target=run, daemon=True)
        self._sampler.start()

    def stop_sampling(self) -> None:
        self._sampling.set()
        if self._sampler is not None:
            self._sampler.join()

    def stop(self) -> None:
        self.stop_sampling()
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(60)
            except subprocess.TimeoutExpired:
                print("  the dispatcher did not stop within 60 s of SIGTERM; killed", flush=True)
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, 9)
            self.popen.wait(10)
        self.log.close()


def thread_switches(pid: int, leader: tuple[int, int]) -> tuple[int, int]:
    """The context switches of every thread of process `pid`, (voluntary: it waited, involuntary: it was made to
    give the CPU up); psutil's counts are its first thread's alone, on Linux: `leader`, used where /proc has no
    threads to read."""
    counts, found = [0, 0], False
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        with contextlib.suppress(OSError):
            for line in status.read_text().splitlines():
                if line.startswith(("voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")):
                    counts[line.startswith("non")] += int(line.split()[1])
                    found = True
    return (counts[0], counts[1]) if found else leader


def wait_live(client: Client, dispatcher: Dispatcher, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not any(w.pid == dispatcher.popen.pid for w in client._parts.fleet.live_workers()):
        if dispatcher.popen.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the dispatcher did not start; see {dispatcher.log.name}")
        time.sleep(0.1)


# ------------------------------------------------------------------------------------------ measuring


@dataclass
class Held:
    jobs: int
    peak: int
    wall_s: float
    ideal_s: float
    submit_s: float
    rss_mb: float
    cpu_s: float
    kernel_s: float  # of which in the kernel (system calls, waking threads)
    switches: int  # the dispatcher's context switches (all its threads')
    involuntary: int  # of which those where a thread was made to give its CPU up
    requests: int
    failed: int
    fake_cpu_s: float  # this process: the fake Messages API (its server threads)
    client_cpu_s: float  # the client process: submitting, then waiting
    redis_cpu_s: float


def run_jobs(redis_url: str, count: int, max_ticks: int) -> tuple[float, float, list[dict], float]:
    """Submit `count` agent jobs and wait for every record, from a client process of its own (its own GIL, not
    this process's, which the fake server's threads keep busy): (wall s, submit s, records, the client's CPU s
    from its first submission to its last record)."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    process = context.Process(target=client_process, args=(redis_url, count, max_ticks, results))
    process.start()
    wall, submitted, records, cpu = results.get(timeout=1200)
    process.join(60)
    return wall, submitted, records, cpu


def client_process(redis_url: str, count: int, max_ticks: int, results: Any) -> None:
    """The client's side: `CLIENT_THREADS` threads of one `Client` submit the jobs, then wait for them."""
    job = agent_job(max_ticks)
    with Client(settings=Settings(redis_url=redis_url)) as client, ThreadPoolExecutor(CLIENT_THREADS) as pool:
        client.ping()  # what a first submission would set up: the store, the broker, the fleet's view
        with client._parts.app.connection_for_write() as connection:
            connection.ensure_connection()
        client._parts.jobs.fleet()
        cpu = time.process_time()
        start = time.perf_counter()
        handles = list(pool.map(lambda _: client.submit(job), range(count)))
        submitted = time.perf_counter() - start
        records = list(pool.map(lambda handle: handle.result(timeout=900), handles))
        wall = time.perf_counter() - start
        cpu = time.process_time() - cpu
    results.put((wall, submitted, [{"status": r["status"], "usage": r["usage"]} for r in records], cpu))


def cpu_of(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def held(redis: RedisServer, fake: FakeAnthropic, dispatcher: Dispatcher, count: int, stream_s: float,
         chunks: int) -> Held:
    fake.responder = lambda request: streamed(GOING_ON if tick_of(request) == 0 else FINAL, stream_s, chunks)
    answered = len(fake.exchanges)
    fake.reset_peak()
    if dispatcher.profile is not None:  # its profile counts from here (benchmarks/profiled_dispatcher.py)
        mark = Path(f"{dispatcher.profile}.mark")
        mark.touch()
        while mark.exists():
            time.sleep(0.05)
    dispatcher.sample()
    redis_process, this_process = psutil.Process(redis.pid), psutil.Process()
    before, fake_cpu, redis_cpu = dispatcher.counts(), cpu_of(this_process), cpu_of(redis_process)
    wall, submitted, records, client_cpu = run_jobs(redis.url, count, max_ticks=4)
    user, kernel, waited, made = (after - first for after, first in zip(dispatcher.counts(), before, strict=True))
    fake_cpu, redis_cpu = cpu_of(this_process) - fake_cpu, cpu_of(redis_process) - redis_cpu
    dispatcher.stop_sampling()
    failed = sum(1 for r in records if r["status"] != "succeeded")
    return Held(jobs=count, peak=fake.peak_in_flight, wall_s=wall, ideal_s=2 * stream_s, submit_s=submitted,
                rss_mb=dispatcher.peak_rss / 2**20, cpu_s=user + kernel, kernel_s=kernel,
                switches=int(waited + made), involuntary=int(made), requests=len(fake.exchanges) - answered,
                failed=failed, fake_cpu_s=fake_cpu, client_cpu_s=client_cpu, redis_cpu_s=redis_cpu)


@dataclass
class Overhead:
    ticks: int
    per_tick_ms: float  # the whole job (submission to record) per tick
    last_ms: float  # the median time from one request to the next over the job's last fifth
    fake_ms: float  # of which the fake's own time per request (its checks of the request, the answer)
    own_ms: float  # and the rest: agentq's (the median of each request's time minus the fake's)
    cpu_ms: float  # the dispatcher's CPU per tick over the whole job


def overhead(redis_url: str, fake: FakeAnthropic, dispatcher: Dispatcher, ticks: int) -> Overhead:
    fake.responder = lambda request: Answer.solution(FINAL if tick_of(request) >= ticks - 1 else GOING_ON)
    answered = len(fake.exchanges)
    cpu = dispatcher.cpu_s()
    wall, _, records, _ = run_jobs(redis_url, 1, max_ticks=ticks + 1)
    cpu = dispatcher.cpu_s() - cpu
    if records[0]["status"] != "succeeded" or records[0]["usage"]["requests"] != ticks:  # as planned
        raise SystemExit(f"the {ticks}-tick job did not end as planned: {records[0]}")
    exchanges = fake.exchanges[answered:]
    last = exchanges[-(max(5, ticks // 5) + 1):]  # the last fifth of the job (at least five ticks)
    cycles = [b.request.received_at - a.request.received_at for a, b in itertools.pairwise(last)]
    fake_s = [(a.finished_at or a.request.received_at) - a.request.received_at for a in last[:-1]]
    own = [cycle - spent for cycle, spent in zip(cycles, fake_s, strict=True)]
    return Overhead(ticks, wall / ticks * 1000, statistics.median(cycles) * 1000, statistics.median(fake_s) * 1000,
                    statistics.median(own) * 1000, cpu / ticks * 1000)


# ------------------------------------------------------------------------------------------ the run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", default="200,1000", help="numbers of concurrent agent jobs (default 200,1000)")
    parser.add_argument("--stream-s", type=float, default=2.0, help="seconds each answer streams (default 2)")
    parser.add_argument("--chunks", type=int, default=10, help="pieces each streamed answer comes in (default 10)")
    parser.add_argument("--ticks", default="10,200", help="ticks of the overhead jobs (default 10,200)")
    parser.add_argument("--dispatcher-args", default="", help="more arguments for `agentq dispatcher`")
    parser.add_argument("--cprofile", type=Path, default=None, metavar="PATH",
                        help="run the dispatcher's threads under cProfile (their CPU clocks), write the stats to PATH "
                             "and print the top functions (the profiler's cost inflates the CPU figures)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 20 jobs streaming 1 s, 5 and 40 ticks")
    args = parser.parse_args(argv)
    if args.quick:
        args.jobs, args.stream_s, args.ticks = "20", 1.0, "5,40"
    counts = [int(x) for x in args.jobs.split(",") if x.strip()]
    tick_counts = [int(x) for x in args.ticks.split(",") if x.strip()]
    extra = shlex.split(args.dispatcher_args)
    log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"agentq-bench-engine-{os.getpid()}.log"

    with RedisServer() as redis, FakeAnthropic() as fake:
        dispatcher = Dispatcher(redis.url, fake, extra, log_path, profile=args.cprofile)
        client = Client(settings=Settings(redis_url=redis.url))
        try:
            wait_live(client, dispatcher)
            print(f"private redis-server {redis.url}; fake Messages API {fake.base_url}; one `agentq dispatcher "
                  f"{' '.join(extra)}`(pid {dispatcher.popen.pid}, log {log_path}); {os.cpu_count()} CPUs, load "
                  f"{os.getloadavg()[0]:.1f}", flush=True)
            overhead(redis.url, fake, dispatcher, 3)  # a first job: the dispatcher's first requests, its pools
            rows = []
            for count in counts:
                rows.append(held(redis, fake, dispatcher, count, args.stream_s, args.chunks))
                print(f"  (1) {count} jobs done", flush=True)
            costs = []
            for ticks in tick_counts:
                costs.append(overhead(redis.url, fake, dispatcher, ticks))
                print(f"  (2) {ticks} ticks done", flush=True)
        finally:
            client.close()
            dispatcher.stop()
    report(rows, costs, args)
    if args.cprofile is not None:
        print_profile(args.cprofile, requests=sum(r.requests for r in rows[-1:]) + sum(c.ticks for c in costs))
    return 0


def print_profile(path: Path, *, requests: int) -> None:
    """The dispatcher's functions by CPU (their own, then with what they call), in microseconds per model
    request (from the start of the last concurrent run to the dispatcher's exit)."""
    import pstats

    stats = pstats.Stats(str(path))
    total_tt, by_function = stats.total_tt, stats.stats  # type: ignore[attr-defined]  # set by pstats, not typed
    print(f"\ndispatcher CPU by function (cProfile, thread CPU clocks), per model request ({requests} requests); "
          f"total {total_tt / requests * 1000:.2f} ms")
    for key, label in (("tottime", "own"), ("cumulative", "with callees")):
        rows = sorted(by_function.items(), key=lambda item: item[1][2 if key == "tottime" else 3], reverse=True)
        print(f"  top by {label} time, us/request:")
        for (file, line, name), (_, calls, own, cumulative, _) in rows[:30]:
            where = f"{Path(file).name}:{line}({name})" if line else name
            print(f"    {own / requests * 1e6:>8.0f} own {cumulative / requests * 1e6:>8.0f} cum "
                  f"{calls / requests:>8.1f} calls  {where}")


def report(rows: list[Held], costs: list[Overhead], args: Any) -> None:
    print()
    print(f"(1) concurrent agent jobs, 2 ticks each, every answer streaming {args.stream_s:g} s in {args.chunks} "
          f"pieces; one dispatcher {args.dispatcher_args or '(defaults)'}")
    print(f"{'jobs':>6}  {'peak in flight':>14}  {'wall s':>7}  {'ideal s':>7}  {'wall/ideal':>10}  "
          f"{'submit s':>8}  {'wall/(submit+ideal)':>19}  {'RSS MB':>7}  {'CPU s':>6}  {'CPU ms/req':>10}  "
          f"{'failed':>6}")
    for r in rows:
        print(f"{r.jobs:>6}  {r.peak:>14}  {r.wall_s:>7.2f}  {r.ideal_s:>7.2f}  {r.wall_s / r.ideal_s:>10.2f}  "
              f"{r.submit_s:>8.2f}  {r.wall_s / (r.submit_s + r.ideal_s):>19.2f}  {r.rss_mb:>7.0f}  {r.cpu_s:>6.1f}  "
              f"{r.cpu_s / max(1, r.requests) * 1000:>10.1f}  {r.failed:>6}")
    print("    the dispatcher's CPU in the kernel and its context switches, per model request; the CPU per model "
          "request of the other processes on the same CPUs, ms: the fake Messages API (this process), the client "
          "(submitting and waiting), redis-server")
    for r in rows:
        per = 1000 / max(1, r.requests)
        print(f"{r.jobs:>6}  kernel {r.kernel_s * per:>5.1f}  switches {r.switches / max(1, r.requests):>4.0f} "
              f"({r.involuntary / max(1, r.requests):>3.0f} involuntary)  "
              f"fake {r.fake_cpu_s * per:>5.1f}  client {r.client_cpu_s * per:>5.1f}  "
              f"redis {r.redis_cpu_s * per:>5.1f}")
    print()
    print("(2) tick overhead, zero-latency model: one job of T ticks; per tick over the whole job (submission to "
          "record), and from one request to the next over its last fifth (medians), the fake's time and agentq's")
    print(f"{'ticks':>6}  {'ms/tick (job)':>13}  {'ms/tick (last fifth)':>20}  {'the fake':>8}  {'agentq':>6}  "
          f"{'dispatcher CPU ms/tick':>22}")
    for c in costs:
        print(f"{c.ticks:>6}  {c.per_tick_ms:>13.1f}  {c.last_ms:>20.1f}  {c.fake_ms:>8.1f}  {c.own_ms:>6.1f}  "
              f"{c.cpu_ms:>22.1f}")
    print("\ntargets: 1,000 jobs in flight from one dispatcher with its defaults; wall <= 1.3 x ideal at 1,000 jobs; "
          "dispatcher CPU <= 3 ms per model request; the time per tick flat from 10 to 200 ticks")


if __name__ == "__main__":
    raise SystemExit(main())
