"""Where the client's CPU goes when it submits a one-call job (throughput.py's (d), its submit side).

Run (from the repository root)::

    python benchmarks/profile_submit.py [--jobs 2000] [--top 30] [--cprofile]

Not a test: the numbers depend on the machine. It starts a private `redis-server`, announces a live worker
serving the no-op activity of `bench_activities.py` (no process behind it: the tasks stay on their queue, and
the queue and the jobs' keys are deleted every 200 jobs), then submits one-call jobs (`Client.submit`, as
throughput.py's (d) does) and prints the client's CPU per job (`time.process_time`, so waiting on Redis costs
nothing; the socket calls' own CPU counts) and the Redis requests per job (`INFO stats` total_reads_processed).
``--cprofile`` then profiles the same loop and prints the functions with the most CPU (cumulative and own)
per job, in microseconds.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import time
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
from benchmarks.bench_activities import NOOP_TOOL  # noqa: E402
from benchmarks.throughput import delete_matching, independent_job  # noqa: E402

CLEAN_EVERY = 200


def _client(url: str) -> Client:
    tools = ToolRegistry()
    tools.register("noop", NOOP_TOOL)
    client = Client(settings=Settings(redis_url=url, max_calls=10_000), tools=tools)
    announcement = {"id": "profile-noop", "queues": ["celery"],
                    "activities": [{"name": "noop", "task": "agentq.activity.noop", "queue": "celery"}]}
    client._parts.fleet.announce_worker("profile-noop", WorkerAnnouncement.from_dict(announcement), ttl_s=3600)
    return client


def _reads(admin: Any) -> int:
    return int(admin.info("stats")["total_reads_processed"])


def submits(client: Client, admin: Any, jobs: int) -> tuple[list[float], float]:
    """CPU seconds of each of `jobs` submissions, and the Redis requests per job (admin's own excluded)."""
    cpu: list[float] = []
    requests = 0
    for start in range(0, jobs, CLEAN_EVERY):
        before = _reads(admin)
        for _ in range(min(CLEAN_EVERY, jobs - start)):
            t0 = time.process_time()
            client.submit(independent_job(1))
            cpu.append(time.process_time() - t0)
        requests += _reads(admin) - before - 1  # the INFO call of `before`'s admin
        delete_matching(admin, "agentq:{*}:*")
        admin.delete("celery")
    return cpu, requests / jobs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--cprofile", action="store_true")
    args = parser.parse_args(argv)

    import redis

    with RedisServer() as server:
        admin = redis.Redis.from_url(server.url, decode_responses=True)
        client = _client(server.url)
        submits(client, admin, 200)  # warm: templates, validators, scripts loaded, connections open
        cpu, requests = submits(client, admin, args.jobs)
        print(f"one-call job submit: {statistics.median(cpu) * 1e6:.0f} us CPU median, "
              f"{statistics.mean(cpu) * 1e6:.0f} us mean, over {len(cpu)} jobs; "
              f"{requests:.2f} Redis requests per job")
        if args.cprofile:
            profile = cProfile.Profile(time.process_time)
            profile.enable()
            submits(client, admin, args.jobs)
            profile.disable()
            stats = pstats.Stats(profile)
            _print_top(stats, args.jobs, args.top)
        client.close()
        admin.close()
    return 0


def _print_top(stats: pstats.Stats, jobs: int, top: int) -> None:
    rows: dict[tuple[str, int, str], tuple[float, float, int]] = {}
    for (filename, line, name), (_, calls, own, cumulative, _) in stats.stats.items():  # type: ignore[attr-defined]
        rows[(filename, line, name)] = (cumulative, own, calls)
    for title, index in (("cumulative", 0), ("own", 1)):
        print(f"\nby {title} CPU, us per job (calls per job):")
        for (filename, line, name), values in sorted(rows.items(), key=lambda r: -r[1][index])[:top]:
            where = "/".join(Path(filename).parts[-2:])
            print(f"  {values[index] / jobs * 1e6:8.1f}  ({values[2] / jobs:5.1f})  {name}  {where}:{line}")


if __name__ == "__main__":
    raise SystemExit(main())
