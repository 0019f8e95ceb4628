"""agentq against an earlier commit of itself, job by job (what the admission of calls costs, for example).

Run (from the repository root)::

    python benchmarks/paired.py --against 3ba2a66                # one job of 400 no-op calls, 41 pairs
    python benchmarks/paired.py --against 3ba2a66 --many          # 100 jobs of 4 calls each time instead
    python benchmarks/paired.py --against 3ba2a66 --calls 500 --rounds 61

Not a test: the numbers depend on the machine. On a small machine a run of `throughput.py` against another moves by
10% or more with the machine's load, more than what is measured here. So both sides run at once, each with its own
private `redis-server` and `agentq worker -m bench_activities --pool prefork --concurrency 2` (the commit given is
checked out into a temporary git worktree), and take turns job by job, the order swapped every round: a change in
the machine's load hits both alike. Printed: each side's median wall time per job and CPU per call (the worker's
process tree, the Redis server, the client), and the median of the per-round ratios of wall time, this checkout
over the other, with its quartiles. Throughput cost = 1 - 1 / ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def serve(calls: int, many: bool) -> None:
    """One side (run in its checkout): warm up, then one job per line read, printed as 'wall worker redis client'."""
    sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), "benchmarks")]
    import benchmarks.throughput as side  # the side's own benchmark helpers and agentq
    from agentq.embedded import RedisServer
    from agentq.settings import Settings

    log_dir = Path(tempfile.mkdtemp(prefix="agentq-paired-"))
    with RedisServer() as server:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTQ_")}
        env.update({"AGENTQ_REDIS_URL": server.url, "AGENTQ_MAX_CALLS": "10000", "BENCH_COUNTER": str(log_dir / "c"),
                    "PYTHONPATH": os.pathsep.join([str(side.BENCH), str(side.ROOT)]), "PYTHONUNBUFFERED": "1"})
        os.environ.update({k: env[k] for k in ("AGENTQ_REDIS_URL", "AGENTQ_MAX_CALLS", "BENCH_COUNTER")})
        worker = side.WorkerProcess("agentq-worker", [sys.executable, "-m", "agentq.cli", "worker", "-m",
                                                      "bench_activities", "--pool", "prefork", "--concurrency", "2",
                                                      "--loglevel", "WARNING"], env, log_dir)
        try:
            aq = side.AgentQ(Settings(max_job_bytes=50_000_000))
            while "noop" not in aq.client._parts.fleet.live_activities():
                worker.check()
                time.sleep(0.1)

            def job() -> float:
                return aq.many(calls // 4, 4) if many else aq.run(side.independent_job(calls))[0]

            for _ in range(3):
                job()
            redis = aq.store.redis  # type: ignore[attr-defined]  # the state store of `AgentQ` is a StateStore
            print("ready", flush=True)
            for line in sys.stdin:
                if not line.strip():
                    break
                before = (worker.cpu(), _redis_cpu(redis), _own_cpu())
                wall = job()
                after = (worker.cpu(), _redis_cpu(redis), _own_cpu())
                per_call = [(b - a) / calls * 1e6 for a, b in zip(before, after, strict=True)]
                print(f"{wall:.4f} " + " ".join(f"{x:.0f}" for x in per_call), flush=True)
        finally:
            worker.stop()


def _redis_cpu(client: object) -> float:
    info = client.info("cpu")  # type: ignore[attr-defined]
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def _own_cpu() -> float:
    times = os.times()
    return times.user + times.system


def compare(against: str, calls: int, rounds: int, many: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="agentq-against-") as tmp:
        other = Path(tmp) / "checkout"
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(other), against], cwd=ROOT, check=True)
        try:
            sides = {f"{against} (A)": other, "this checkout (B)": ROOT}
            command = [sys.executable, str(Path(__file__).resolve()), "--serve", "--calls", str(calls),
                       *(["--many"] if many else [])]
            procs = [subprocess.Popen(command, cwd=str(d), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                     for d in sides.values()]
            for proc in procs:
                while proc.stdout is not None and proc.stdout.readline().strip() != "ready":
                    if proc.poll() is not None:
                        raise RuntimeError("a side stopped before it was ready")
            results = _rounds(procs, rounds)
            for proc in procs:
                assert proc.stdin is not None
                proc.stdin.write("\n")
                proc.stdin.flush()
                proc.wait(60)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(other)], cwd=ROOT, check=False)
    shape = f"{calls // 4} jobs of 4 calls" if many else f"one job of {calls} calls"
    print(f"{shape}, {rounds} rounds, both sides at once, turns swapped every round")
    for name, samples in zip(sides, results, strict=True):
        medians = [statistics.median(s[i] for s in samples) for i in range(4)]
        print(f"  {name:<24} wall {medians[0]:.3f} s   CPU per call: worker {medians[1]:,.0f} us, "
              f"redis {medians[2]:,.0f} us, client {medians[3]:,.0f} us")
    ratios = sorted(b[0] / a[0] for a, b in zip(*results, strict=True))
    ratio = statistics.median(ratios)
    print(f"  B/A wall time per round: median {ratio:.3f} (quartiles {ratios[len(ratios) // 4]:.3f} .. "
          f"{ratios[3 * len(ratios) // 4]:.3f}); throughput cost {100 * (1 - 1 / ratio):.1f}%")


def _rounds(procs: list[subprocess.Popen], rounds: int) -> list[list[tuple[float, ...]]]:
    results: list[list[tuple[float, ...]]] = [[], []]
    for r in range(rounds):
        for i in (0, 1) if r % 2 == 0 else (1, 0):
            proc = procs[i]
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
            results[i].append(tuple(float(x) for x in proc.stdout.readline().split()))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", help="the commit to compare this checkout with")
    parser.add_argument("--calls", type=int, default=400, help="calls per round (default 400)")
    parser.add_argument("--rounds", type=int, default=41, help="jobs per side (default 41)")
    parser.add_argument("--many", action="store_true", help="jobs of 4 calls instead of one job")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.calls, args.many)
    elif not args.against:
        parser.error("--against COMMIT is required")
    else:
        compare(args.against, args.calls, args.rounds, args.many)
    return 0


if __name__ == "__main__":
    sys.exit(main())
