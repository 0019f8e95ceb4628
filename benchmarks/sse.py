"""How many concurrent event-stream clients one `agentq api` process holds with events still arriving within
100 ms.

Run (from the repository root)::

    .venv/bin/python benchmarks/sse.py [--clients 100,250,500,1000] [--rounds 5] [--interval 1.0]
    .venv/bin/python benchmarks/sse.py --quick        # 50 and 200 clients, 3 rounds: about 30 s

Not a test: the figures depend on the machine. It starts a private ``redis-server`` on a free port (never the
machine's shared Redis) and ``agentq api --no-auth`` as a separate process (one uvicorn worker, as deployed).
For each client count N it submits N plan jobs whose one call waits on a queue no worker serves (so the jobs
stay open), opens one ``GET /v1/jobs/{id}/events`` stream per job from an asyncio client in this process, and,
once every stream has sent its backlog, publishes ``--rounds`` rounds of one event into every job's stream
(``XADD``, as a worker's commit does; each round spread over ``--interval`` seconds). Each event carries the
moment it was published; the client notes when it arrived. It prints per N: the streams the API held open, its
resident memory, and the delivery latency (p50, p99, max). "Holds N" means every stream stayed open and p99
stayed under 100 ms. The client, the publisher and Redis share the machine with the API (on a 2-core machine
the client's own parsing is part of what is measured).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import redis

from agentq.embedded import RedisServer

ROOT = Path(__file__).resolve().parents[1]
TOOL = {"type": "object", "description": "waits on a queue no worker serves",
        "properties": {"_tool": {"type": "string", "const": "parked"}, "_activity": {"const": "parked"},
                       "_output": {}}}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_api(redis_url: str, port: int) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTQ_")} | {"AGENTQ_REDIS_URL": redis_url}
    stderr = None if os.environ.get("SSE_DEBUG") else subprocess.DEVNULL
    process = subprocess.Popen([sys.executable, "-m", "agentq.cli", "api", "--no-auth", "--port", str(port)],
                               cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return process
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise SystemExit("agentq api did not start")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def http_post(port: int, path: str, body: dict) -> dict:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    data = json.dumps(body).encode()
    writer.write(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(data)}"
                 f"\r\nConnection: close\r\n\r\n".encode() + data)
    await writer.drain()
    raw = await reader.read()
    writer.close()
    head, _, payload = raw.partition(b"\r\n\r\n")
    if b" 201 " not in head.split(b"\r\n")[0]:
        raise SystemExit(f"submit failed: {raw[:300]!r}")
    return json.loads(payload)


class Stream:
    """One SSE client: notes the arrival of each benchmark event."""

    def __init__(self, port: int, job_id: str, latencies: list[float]):
        self.port, self.job_id, self.latencies = port, job_id, latencies
        self.ready = asyncio.Event()
        self.open = False
        self.task: asyncio.Task | None = None

    async def run(self) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        writer.write(f"GET /v1/jobs/{self.job_id}/events HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n"
                     .encode())
        await writer.drain()
        self.open = True
        try:
            while line := await reader.readline():
                if line.startswith(b"data: ") and b'"bench_sent"' in line:
                    arrived = time.time()
                    sent = json.loads(line[6:])["bench_sent"]
                    self.latencies.append(arrived - sent)
                elif line.startswith(b"event: job.queued"):
                    self.ready.set()
        finally:
            self.open = False
            writer.close()


async def measure(port: int, redis_url: str, api_pid: int, clients: int, rounds: int, interval: float) -> dict:
    jobs = []
    for start in range(0, clients, 50):
        job = {"tools": [TOOL], "calls": [{"_tool": "parked", "_outputPath": "†state.x"}]}
        batch = [http_post(port, "/v1/jobs", job) for _ in range(start, min(clients, start + 50))]
        jobs += [record["id"] for record in await asyncio.gather(*batch)]
    latencies: list[float] = []
    streams = [Stream(port, job_id, latencies) for job_id in jobs]
    for stream in streams:
        stream.task = asyncio.create_task(stream.run())
    await asyncio.wait_for(asyncio.gather(*(s.ready.wait() for s in streams)), 120)
    publisher = redis.asyncio.Redis.from_url(redis_url)
    gap = interval / max(1, clients)
    for _ in range(rounds):
        for job_id in jobs:
            envelope = {"event": "part", "job_id": job_id, "call_id": None, "bench_sent": time.time(),
                        "part": {"type": "text_output_stream", "text": "tick"}}
            await publisher.xadd(f"agentq:{{{job_id}}}:events", {"e": json.dumps(envelope)})
            await asyncio.sleep(gap)
    deadline = time.monotonic() + 10
    while len(latencies) < clients * rounds and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    held = sum(1 for s in streams if s.open)
    memory = rss_mb(api_pid)
    for stream in streams:
        assert stream.task is not None
        stream.task.cancel()
    await asyncio.gather(*(s.task for s in streams if s.task), return_exceptions=True)
    await publisher.aclose()
    ordered = sorted(latencies) or [float("nan")]
    return {"clients": clients, "held": held, "received": len(latencies), "expected": clients * rounds,
            "p50_ms": statistics.median(ordered) * 1000, "p99_ms": ordered[int(0.99 * (len(ordered) - 1))] * 1000,
            "max_ms": ordered[-1] * 1000, "rss_mb": memory}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", default="100,250,500,1000")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--interval", type=float, default=1.0, help="seconds over which one round is spread")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    counts = [50, 200] if args.quick else [int(n) for n in args.clients.split(",")]
    rounds = 3 if args.quick else args.rounds
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 65536)), hard))
    with RedisServer(extra_args=("--maxclients", "20000")) as server:
        port = free_port()
        api = start_api(server.url, port)
        try:
            print(f"agentq api (pid {api.pid}) on port {port}, Redis {server.url}; {rounds} rounds of one event per "
                  f"stream, each spread over {args.interval:g} s\n")
            print(f"{'clients':>8} {'held':>6} {'received':>10} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
                  f"{'API RSS MB':>11}  within 100 ms")
            for clients in counts:
                flushed = redis.Redis.from_url(server.url)
                flushed.flushall()
                flushed.close()
                row = asyncio.run(measure(port, server.url, api.pid, clients, rounds, args.interval))
                ok = row["held"] == clients and row["received"] == row["expected"] and row["p99_ms"] < 100
                print(f"{clients:>8} {row['held']:>6} {row['received']:>5}/{row['expected']:<4} {row['p50_ms']:>8.1f} "
                      f"{row['p99_ms']:>8.1f} {row['max_ms']:>8.1f} {row['rss_mb']:>11.0f}  {'yes' if ok else 'NO'}",
                      flush=True)
        finally:
            api.terminate()
            api.wait(10)


if __name__ == "__main__":
    main()
