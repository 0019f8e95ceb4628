"""Submission and dispatch on each broker, against bare Celery's `send_task` on the same broker.

Run (from the repository root, with a RabbitMQ reachable at TEST_RABBITMQ_URL or 127.0.0.1:5672)::

    python benchmarks/brokers.py [--n 500] [--repeat 3]

Not a test: the numbers depend on the machine. The state store is a private `redis-server` on a free port; the
brokers are that Redis, and RabbitMQ with and without publisher confirms (agentq publishes with confirms:
`runtime/broker.py`). For each broker it times (best of `--repeat`):

- agentq: `Client.submit` of a plan job of N independent calls to a known activity no worker serves — the
  checks, planning, the job's atomic write and the dispatch of its N ready calls (one producer batch: one
  pipeline on Redis; one publish per task on RabbitMQ, each confirmed when confirms are on);
- bare Celery: N `send_task` calls on one producer of an app built by the same `create_app`.

Queues on RabbitMQ are private to the run and deleted at its end.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentq.client import Client
from agentq.embedded import RedisServer
from agentq.protocol.tools import ToolRegistry
from agentq.settings import Settings
from agentq.store.state import StateStore
from tests.integration.conftest import tool_schema
from tests.integration.rabbitmq import AmqpNames, rabbitmq_url, unreachable_reason


def measure(settings: Settings, *, n: int, repeat: int, confirm: bool | None = None) -> tuple[float, float]:
    """(best agentq submit, best bare send_task x n), in seconds."""
    tools = ToolRegistry()
    tools.register("far", tool_schema("far", params={"n": {"type": "integer"}}))
    client = Client(settings=settings, tools=tools)
    app = client._parts.app
    if confirm is not None:
        app.conf.broker_transport_options = {**app.conf.broker_transport_options, "confirm_publish": confirm}
    queue = f"{settings.engine_queue}.far"
    # `far` is known on its own queue (a worker announced it once), so its calls are explicit and wait there
    store = client._parts.store
    assert isinstance(store, StateStore), "the benchmark writes to the Redis state store"
    store.redis.hset(store.fleet.activities, "far", json.dumps(
        {"name": "far", "queue": queue, "task": "agentq.activity.far", "last_seen": time.time()}))
    job = {"calls": [{"_tool": "far", "n": i, "_outputPath": f"†state.n{i}"} for i in range(n)]}
    try:
        client.submit({"calls": job["calls"][:5]})  # warm up: connections, declarations, caches
        submits, sends = [], []
        for _ in range(repeat):
            started = time.perf_counter()
            client.submit(job)
            submits.append(time.perf_counter() - started)
            started = time.perf_counter()
            with app.producer_or_acquire() as producer:
                for i in range(n):
                    app.send_task("agentq.activity.far", args=["job", str(i)], queue=queue, producer=producer)
            sends.append(time.perf_counter() - started)
        return min(submits), min(sends)
    finally:
        client.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    url = rabbitmq_url()
    with RedisServer() as redis_server:
        names = AmqpNames(url)
        engine = names.queue("engine")
        names.queue("engine.far")
        on_redis = Settings(redis_url=redis_server.url, engine_queue=engine)
        cases: list[tuple[str, Settings, bool | None]] = [("redis", on_redis, None)]  # None: confirms do not apply
        reason = unreachable_reason(url)
        if reason is None:
            rabbit = Settings(redis_url=redis_server.url, broker_url=url, engine_queue=engine)
            cases += [("rabbitmq, confirms", rabbit, True), ("rabbitmq, no confirms", rabbit, False)]
        else:
            print(f"RabbitMQ left out: {reason}")
        print(f"{'broker':24s} {'agentq submit':>14s} {'bare send_task':>15s} {'ratio':>6s}   ({args.n} calls)")
        try:
            for label, settings, confirm in cases:
                submit, send = measure(settings, n=args.n, repeat=args.repeat, confirm=confirm)
                print(f"{label:24s} {submit * 1000:11.0f} ms {send * 1000:12.0f} ms {submit / send:6.2f}")
        finally:
            names.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
