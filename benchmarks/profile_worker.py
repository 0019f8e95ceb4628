"""Where a worker child's time goes while it runs the calls of a plan job.

Run (from the repository root; needs ``py-spy`` on PATH or in the virtual environment, and permission to
attach to a child process, e.g. root)::

    python benchmarks/profile_worker.py [--calls 3000] [--shape independent|chain] [--rate 500]
    python benchmarks/profile_worker.py --cprofile [--calls 3000]

It starts a private `redis-server`, an `agentq worker -m bench_activities --pool prefork --concurrency 2` and
samples both pool children with ``py-spy record --format raw`` while one job of ``--calls`` no-op calls runs,
then prints the share of the children's samples spent in each agentq function (inclusive), in each part of a
call's handling (claim, commit, validation, events, JSON...), and the top frames by self time. py-spy samples a
thread while it runs or is ready to run, not while it sleeps (a Redis reply that came back while the child waited
for a CPU shows as the socket read); the shares count the children's main threads, which run the tasks.

``--idle`` samples the children while they sleep too, and prints where their main threads' wall time goes: waiting
for the next task from the worker's main process, waiting on Redis inside a task, the rest. ``--gil`` samples a
child only while it holds the interpreter lock: where its CPU goes, without cProfile's inflation of Python-heavy
code. ``--cprofile`` profiles the children's CPU time instead (cProfile with
``time.process_time``, from each child's start to its exit, see ``bench_activities.py``) and prints microseconds
of CPU per call by function. Not a test.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(BENCH))

from agentq.embedded import RedisServer  # noqa: E402
from agentq.settings import Settings  # noqa: E402
from benchmarks.throughput import AgentQ, WorkerProcess, chain_job, independent_job  # noqa: E402

# Parts of a call's handling, by the frames that mark them: a sample counts for the first part, in this order,
# one of whose frames it holds.
PARTS = [
    ("claim (its store step, its start events packed)", ("RedisCalls.claim",)),
    ("commit (its store step, its events and messages packed)", ("RedisCalls.commit",)),
    ("start events sent apart (XADD)", ("add_events",)),
    ("finalize the job", ("finalize_job", "JobProgress.advance", "end_ahead")),
    ("validate_call", ("validate_call",)),
    ("render events (parts, envelopes)", ("start_events", "done_event", "tool_result_part", "technical_details",
                                           "activity_part")),
    ("record digest / from_dict / to_dict", ("record_digest", "CallRecord.from_dict", "CallRecord.to_dict",
                                             "call_pointer")),
    ("output messages", ("output_messages",)),
    ("the activity itself", ("invoke_handler",)),
    ("job progress after the commit", ("JobProgress.committed",)),
    ("metrics, hooks, tracing", ("Hooks.", "count_redelivery", "call_span")),
    ("leases", ("LeaseKeeper",)),
]


def py_spy() -> str:
    for candidate in (shutil.which("py-spy"), str(Path(sys.executable).with_name("py-spy"))):
        if candidate and os.path.exists(candidate):
            return candidate
    raise SystemExit("py-spy is not installed: pip install py-spy")


def parse_raw(path: Path) -> list[tuple[list[str], int]]:
    """py-spy's raw (collapsed) output: `frame;frame;...;frame count`, outermost first."""
    stacks = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        stack, _, count = line.rpartition(" ")
        frames = [re.sub(r":\d+\)$", ")", frame) for frame in stack.split(";")]
        stacks.append((frames, int(count)))
    return stacks


@contextmanager
def bench_worker(server: RedisServer, calls: int, out: Path, **env: str) -> Iterator[tuple[WorkerProcess, AgentQ]]:
    """An `agentq worker -m bench_activities --pool prefork --concurrency 2` on the private Redis (its log in
    `out`, `env` added to its environment) once it announced itself, and a client of it; stops the worker."""
    worker_env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTQ_")}
    worker_env.update({"AGENTQ_REDIS_URL": server.url, "AGENTQ_MAX_CALLS": str(max(10_000, calls)),
                       "PYTHONPATH": os.pathsep.join([str(BENCH), str(ROOT)]), "PYTHONUNBUFFERED": "1", **env})
    os.environ["AGENTQ_REDIS_URL"] = server.url
    worker = WorkerProcess("agentq-worker", [sys.executable, "-m", "agentq.cli", "worker", "-m",
                                             "bench_activities", "--pool", "prefork", "--concurrency", "2",
                                             "--loglevel", "WARNING"], worker_env, out)
    try:
        aq = AgentQ(Settings(max_job_bytes=50_000_000, max_calls=max(10_000, calls)))
        deadline = time.monotonic() + 60
        while "noop" not in aq.client._parts.fleet.live_activities():
            worker.check()
            if time.monotonic() > deadline:
                raise RuntimeError("the worker did not announce itself")
            time.sleep(0.1)
        yield worker, aq
    finally:
        worker.stop()


def print_waits(main: list[tuple[list[str], int]], total: int) -> None:
    """Where a child's main thread spends its wall time (`--idle`): waiting for its next task (the pool's pipe from
    the worker's main process, which takes it from the broker), waiting on Redis inside a task, the rest."""
    def share(count: int) -> str:
        return f"{count / max(total, 1):6.1%}"

    next_task = sum(c for frames, c in main if frames[-1].startswith("Connection._recv")
                    and not any("fast_trace_task" in f for f in frames))
    on_redis = sum(c for frames, c in main if any("fast_trace_task" in f for f in frames)
                   and frames[-1].startswith(("_HiredisParser.read_from_socket", "AbstractConnection.send_packed")))
    print("where the children's main threads spend their wall time:")
    print(f"  {share(next_task)}  waiting for the next task from the worker's main process")
    print(f"  {share(on_redis)}  inside a task, waiting on Redis (sending a step, reading its reply)")
    print(f"  {share(total - next_task - on_redis)}  the rest (running, or ready to run and waiting for a CPU)")


def the_job(args: argparse.Namespace) -> dict:
    """The job profiled: `--calls` independent calls of `--tool`, or a chain of `--calls` calls."""
    return independent_job(args.calls, args.tool) if args.shape == "independent" else chain_job(args.calls)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--shape", default="independent", choices=["independent", "chain"])
    parser.add_argument("--rate", type=int, default=500, help="py-spy samples per second")
    parser.add_argument("--gil", action="store_true",
                        help="sample only a child holding the interpreter lock (its CPU, not its waits on Redis)")
    parser.add_argument("--idle", action="store_true",
                        help="sample the children also while they sleep: their wall time, waits for the next task "
                             "and for Redis included")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--cprofile", action="store_true", help="CPU time per call by function (cProfile)")
    parser.add_argument("--tool", default="noop", choices=["noop", "noop_i"],
                        help="the no-op, or the same registered idempotent (independent shape)")
    args = parser.parse_args(argv)
    if args.cprofile:
        return cprofile(args)
    spy = py_spy()
    out = Path(tempfile.mkdtemp(prefix="agentq-profile-"))
    with RedisServer() as server, bench_worker(server, args.calls, out) as (worker, aq):
        aq.run(independent_job(200))  # warm up
        aq.run(chain_job(5))
        children = worker.children()
        only_gil = ["--gil"] if args.gil else []
        spies = [subprocess.Popen([spy, "record", "--pid", str(pid), "--rate", str(args.rate), "--format", "raw",
                                   *only_gil, *(["--idle"] if args.idle else []),
                                   "--output", str(out / f"child-{pid}.txt")],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for pid in children]
        time.sleep(1.0)
        elapsed, submit, _ = aq.run(the_job(args))
        for spy_process in spies:
            spy_process.send_signal(2)  # SIGINT: py-spy writes its output and exits
        for spy_process in spies:
            spy_process.wait(30)
    stacks = [entry for path in out.glob("child-*.txt") for entry in parse_raw(path)]
    # a child's main thread runs the tasks; its other threads (giving places back, renewing leases) mostly wait, and
    # their samples say nothing of how busy the child is
    main = [(frames, count) for frames, count in stacks if frames and frames[0].startswith("_run_module_as_main")]
    busy = [(frames, count) for frames, count in main if any("fast_trace_task" in f for f in frames)]
    total = sum(count for _, count in main)
    in_calls = sum(count for _, count in busy)
    print(f"{args.calls} {args.shape} calls in {elapsed:.2f} s (submit {submit:.2f} s); {total} samples of the "
          f"children's main threads, {in_calls} ({in_calls / max(total, 1):.0%}) inside a task (the rest: in the "
          f"pool's loop, taking the next task and handing back the last one's result)")
    background = sum(count for frames, count in stacks if frames and not frames[0].startswith("_run_module_as_main")
                     and not frames[-1].startswith(("Condition.wait", "Event.wait")))
    print(f"their other threads, when not waiting: {background} samples ({background / max(total, 1):.0%} of the "
          "main threads')")
    if args.idle:
        print_waits(main, total)
    print(f"\nshare of a task's samples (a call: {elapsed / args.calls * 2e6:,.0f} us of a child's time at "
          "concurrency 2), by part:")
    parts: Counter[str] = Counter()
    for frames, count in busy:
        for name, markers in PARTS:
            if any(any(m in f for m in markers) for f in frames):
                parts[name] += count
                break
        else:
            parts["other (Celery's task machinery, ...)"] += count
    for name, count in parts.most_common():
        print(f"  {count / in_calls:6.1%}  {name}")
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    for frames, count in busy:
        for frame in dict.fromkeys(frames):
            inclusive[frame] += count
        own[frames[-1]] += count
    print(f"\ntop {args.top} agentq frames by inclusive share of a task's samples:")
    for frame, count in [(f, c) for f, c in inclusive.most_common() if "agentq" in f or "Executor" in f][:args.top]:
        print(f"  {count / in_calls:6.1%}  {frame}")
    print(f"\ntop {args.top} frames by self time:")
    for frame, count in own.most_common(args.top):
        print(f"  {count / in_calls:6.1%}  {frame}")
    print(f"\nraw profiles: {out}")
    return 0


def cprofile(args: argparse.Namespace) -> int:
    import pstats

    out = Path(tempfile.mkdtemp(prefix="agentq-cprofile-"))
    with RedisServer() as server, bench_worker(server, args.calls, out, BENCH_CPROFILE=str(out)) as (_, aq):
        elapsed, submit, _ = aq.run(the_job(args))
    files = [str(path) for path in out.glob("*.prof")]
    if not files:
        raise SystemExit(f"no profile was written; see {out}/agentq-worker.log")
    stats = pstats.Stats(*files)
    raw = stats.stats  # type: ignore[attr-defined]
    calls = sum(nc for (file, _, name), (_, nc, *_rest) in raw.items()
                if name == "run_call" and file.endswith("executor.py"))
    total = sum(tt for (_, _, _), (_, _, tt, _, _) in raw.items())
    print(f"{args.calls} {args.shape} calls in {elapsed:.2f} s (submit {submit:.2f} s); the children ran "
          f"{calls} calls: {total / max(calls, 1) * 1e6:,.0f} us of CPU per call (cProfile inflates Python-heavy "
          "code; compare shares)")

    def label(key: tuple[str, int, str]) -> str:
        file, _, name = key
        short = file.split("site-packages/")[-1].split("/agentq/")[-1]
        return f"{name} ({short})"

    print(f"\ntop {args.top} by cumulative CPU per call (agentq and redis-py):")
    ranked = sorted(raw.items(), key=lambda kv: -kv[1][3])
    shown = 0
    for key, (_, _, _, ct, _) in ranked:
        if "agentq" in key[0] or "redis/" in key[0]:
            print(f"  {ct / calls * 1e6:8,.1f} us  {ct / total:6.1%}  {label(key)}")
            shown += 1
            if shown >= args.top:
                break
    print(f"\ntop {args.top} by own CPU per call:")
    for key, (_, _, tt, _, _) in sorted(raw.items(), key=lambda kv: -kv[1][2])[:args.top]:
        print(f"  {tt / calls * 1e6:8,.1f} us  {tt / total:6.1%}  {label(key)}")
    print(f"\nprofiles: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
