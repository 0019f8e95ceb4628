"""redis-py's per-command cost through the store's connection pools: N commands through a `BlockingConnectionPool`
(what the store used before), through the store's pool with the per-thread fast path (`store/pinned.py`) and
through a client bound to one connection (`single_connection_client`, the floor), on one thread and on 8.

Run (from the repository root)::

    python benchmarks/redis_pool.py [--commands 20000] [--rounds 3]

Not a test: the numbers depend on the machine. It starts a private `redis-server` on a free port (never the
machine's shared Redis). Each round runs every case once, in turn (so a change in the machine's load hits all
alike); the table shows, per case, the median over rounds of the wall time per command and of this process's CPU
time per command (the client's side: redis-server's own time is not in it). Commands: a `GET` of a short key and
an `EVALSHA` of a one-line script, alternately (what the store's hot path sends). On 8 threads each thread runs
N/8 commands; the fast path pins all 8 (a pool of 128 pins up to 32 threads).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import redis

from agentq.embedded import RedisServer
from agentq.store.connect import DEFAULT_MAX_CONNECTIONS, POOL_WAIT_S, connect_redis

SCRIPT = "return redis.call('GET', KEYS[1])"


def blocking(url: str) -> Any:
    pool = redis.BlockingConnectionPool.from_url(url, decode_responses=True, max_connections=DEFAULT_MAX_CONNECTIONS,
                                                 timeout=POOL_WAIT_S, socket_connect_timeout=5,
                                                 health_check_interval=30)
    return redis.Redis.from_pool(pool)


def pinned(url: str) -> Any:
    return connect_redis(url)


def single(url: str) -> Any:
    return redis.Redis.from_url(url, decode_responses=True, single_connection_client=True, socket_connect_timeout=5,
                                health_check_interval=30)


def run_commands(client: Any, sha: str, count: int) -> None:
    for i in range(count):
        if i & 1:
            client.evalsha(sha, 1, "bench:key")
        else:
            client.get("bench:key")


def measure(client: Any, sha: str, commands: int, threads: int) -> tuple[float, float]:
    """Wall and CPU microseconds per command."""
    run_commands(client, sha, 200)  # connect (and pin) first
    each = commands // threads
    wall, cpu = time.perf_counter(), time.process_time()
    if threads == 1:
        run_commands(client, sha, each)
    else:
        workers = [threading.Thread(target=run_commands, args=(client, sha, each)) for _ in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    total = each * threads
    return (time.perf_counter() - wall) / total * 1e6, (time.process_time() - cpu) / total * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commands", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args(argv)
    cases: dict[str, Callable[[str], Any]] = {"BlockingConnectionPool": blocking, "pinned (store/pinned.py)": pinned,
                                              "one connection": single}
    results: dict[tuple[str, int], list[tuple[float, float]]] = {}
    with RedisServer() as server:
        setup = redis.Redis.from_url(server.url)
        setup.set("bench:key", "x" * 32)
        sha = setup.script_load(SCRIPT)
        setup.close()
        print(f"private redis-server on {server.url}; redis-py {redis.__version__}; {options.commands} commands "
              f"per case and round, {options.rounds} rounds")
        for _ in range(options.rounds):
            for threads in (1, 8):
                for name, make in cases.items():
                    client = make(server.url)
                    try:
                        if threads > 1 and name == "one connection":
                            continue  # one connection is one thread's
                        results.setdefault((name, threads), []).append(measure(client, sha, options.commands,
                                                                               threads))
                    finally:
                        client.close()
    print(f"{'case':<28}{'threads':>8}{'wall µs/cmd':>14}{'CPU µs/cmd':>13}")
    for (name, threads), samples in results.items():
        wall = statistics.median(s[0] for s in samples)
        cpu = statistics.median(s[1] for s in samples)
        print(f"{name:<28}{threads:>8}{wall:>14.1f}{cpu:>13.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
