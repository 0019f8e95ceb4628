"""Bare Celery for `benchmarks/throughput.py`: the same app factory, worker options and pool as agentq's.

`python benchmarks/bench_bare.py --pool prefork --concurrency 2` runs a worker of this app on the queue
`bench.bare`, started as `agentq worker` starts its own (`agentq.runtime.worker.serve`: the same `Worker`
options, an app from the same `create_app`, so the same serializer, acks, prefetch and broker transport options),
with Celery's own consumer: agentq's workers use `agentq.runtime.messages.events_consumer()`, which publishes task
events in groups, and that is part of what agentq brings. The other difference is the one being measured: this app
stores results in Redis (`result_backend` = the state store's Redis) for the tasks that keep them.

`noop` (results ignored) appends one byte to the file `BENCH_COUNTER` names, so the benchmark sees when N of
them have run without any Redis traffic of its own (one `write(2)` per task, a few microseconds).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentq.runtime.app import create_app
from agentq.settings import Settings

QUEUE = "bench.bare"

settings = Settings()
app = create_app(settings, name="bench-bare")
app.conf.update(task_default_queue=QUEUE, result_backend=settings.redis_url, result_expires=3600)

_counter: dict[int, int] = {}  # pid -> file descriptor (each prefork child opens its own)


def _count() -> None:
    pid = os.getpid()
    fd = _counter.get(pid)
    if fd is None:
        fd = _counter[pid] = os.open(os.environ["BENCH_COUNTER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.write(fd, b"x")


@app.task(name="bench.noop", shared=False, ignore_result=True)
def noop(i: int) -> None:
    _count()


@app.task(name="bench.noop_result", shared=False, ignore_result=False)
def noop_result(i: int) -> int:
    return i


@app.task(name="bench.inc", shared=False, ignore_result=False)
def inc(x: int) -> int:
    return x + 1


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pool", default="prefork")
    parser.add_argument("--concurrency", type=int, default=2)
    args = parser.parse_args(argv)
    app.set_current()
    app.set_default()
    worker: Any = app.Worker(hostname="bench-bare@%h", queues=[QUEUE], pool_cls=args.pool,
                             concurrency=args.concurrency, loglevel="WARNING", without_mingle=True,
                             without_gossip=True)
    worker.start()


if __name__ == "__main__":
    main()
