"""Threads or one event loop for a dispatcher's model streams: the CPU one streamed request costs through the
``anthropic`` SDK, with N streams at once held by N threads (what `agentq dispatcher` does: `Anthropic`, one thread
per stream) or by one asyncio loop (`AsyncAnthropic`).

Run (from the repository root, with the dev extra installed: ``tests/fake_anthropic.py`` imports pytest)::

    .venv/bin/python benchmarks/streams.py [--streams 200,1000] [--stream-s 2] [--chunks 10] [--rounds 2]

Not a test: the numbers depend on the machine. The fake Messages API of ``tests/fake_anthropic.py`` runs in this
process; each way runs in a process of its own (spawned), which sends ``--rounds`` rounds of N requests at once,
each answer streaming for ``--stream-s`` seconds in ``--chunks`` pieces, and reads every event of each as agentq
does (``agentq.llm.sdk``: the body serialized once, the SDK's server-sent-event decoder, one JSON decode per
event). Shown per way: the process's CPU per request (user + system, from its first request to its last answer:
the client and the SDK are made before), the wall time of a round against the stream's own, and its peak RSS.
Only the transport differs: what agentq does per request around it (the store's steps, the tick's task) is the
same either way.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import resource
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.engine import GOING_ON, streamed  # noqa: E402
from tests.fake_anthropic import FakeAnthropic  # noqa: E402

BODY = {"model": "claude-sonnet-4-6", "max_tokens": 1024, "stream": True,
        "system": [{"type": "text", "text": "You are a benchmark agent."}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Think, then answer."}]}],
        "tools": [{"name": "solution", "input_schema": {"type": "object", "properties": {
            "calls": {"type": "array"}, "output": {}}, "required": ["calls", "output"]}}],
        "tool_choice": {"type": "tool", "name": "solution"}}


async def loop_round(client: Any, count: int) -> int:
    from anthropic import AsyncStream
    from anthropic.types import Message, RawMessageStreamEvent

    body = json.dumps(BODY, separators=(",", ":")).encode()

    async def one() -> int:
        stream = await client.post("/v1/messages", cast_to=Message, content=body, stream=True,
                                   stream_cls=AsyncStream[RawMessageStreamEvent])
        seen = 0
        try:
            async for sse in stream._iter_events():
                if sse.event and sse.event != "ping" and sse.data:
                    json.loads(sse.data)
                    seen += 1
        finally:
            await stream.response.aclose()
        return seen

    return sum(await asyncio.gather(*(one() for _ in range(count))))


def way(kind: str, base_url: str, count: int, rounds: int, results: Any, switch_s: float | None = None) -> None:
    """One way, in a process of its own: (CPU s, wall s per round, events read, peak RSS MB)."""
    if switch_s is not None:
        sys.setswitchinterval(switch_s)
    import faulthandler
    faulthandler.dump_traceback_later(600, exit=True)  # a hung way says where
    import anthropic
    import httpx2

    limits = httpx2.Limits(max_connections=max(1000, count), max_keepalive_connections=count)
    walls = []
    events = 0
    if kind == "threads":
        from agentq.llm.sdk import Shards, shard_count

        base = anthropic.Anthropic(api_key="sk-ant-benchmark", base_url=base_url, max_retries=0, timeout=300,
                                   http_client=anthropic.DefaultHttpxClient(limits=limits))
        shards = Shards(base, count=shard_count(count), connections=-(-count // shard_count(count)))
        shards.make_all()  # as a dispatcher does before its first requests
        local = threading.local()

        def client() -> Any:
            if not hasattr(local, "client"):
                local.client = shards.client()
            return local.client

        with ThreadPoolExecutor(count) as pool:
            list(pool.map(lambda _: client(), range(count)))  # every thread started, as a pool is
            cpu = time.process_time()
            for _ in range(rounds):
                start = time.perf_counter()
                events += threads_round_local(client, count, pool)
                walls.append(time.perf_counter() - start)
            cpu = time.process_time() - cpu
    else:
        async def main() -> tuple[float, int]:
            seen = 0
            client = anthropic.AsyncAnthropic(api_key="sk-ant-benchmark", base_url=base_url, max_retries=0, timeout=300,
                                              http_client=anthropic.DefaultAsyncHttpxClient(limits=limits))
            cpu = time.process_time()
            for _ in range(rounds):
                start = time.perf_counter()
                seen += await loop_round(client, count)
                walls.append(time.perf_counter() - start)
            return time.process_time() - cpu, seen

        cpu, events = asyncio.run(main())
    results.put((cpu, walls, events, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))


def threads_round_local(client: Any, count: int, pool: ThreadPoolExecutor) -> int:
    from agentq.llm.sdk import events, post

    def one(_: int) -> int:
        return sum(1 for _ in events(post(client(), BODY)))

    return sum(pool.map(one, range(count)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", default="200,1000", help="streams at once (default 200,1000)")
    parser.add_argument("--stream-s", type=float, default=2.0)
    parser.add_argument("--chunks", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--ways", default="threads,asyncio", help="threads, asyncio (default both)")
    parser.add_argument("--switch-s", type=float, default=None, help="sys.setswitchinterval in each way's process")
    args = parser.parse_args(argv)
    context = multiprocessing.get_context("spawn")
    rows = []
    with FakeAnthropic() as fake:
        fake.responder = lambda request: streamed(GOING_ON, args.stream_s, args.chunks)
        for count in [int(x) for x in args.streams.split(",") if x.strip()]:
            for kind in args.ways.split(","):
                results = context.Queue()
                process = context.Process(target=way, args=(kind, fake.base_url, count, args.rounds, results,
                                                                        args.switch_s))
                process.start()
                cpu, walls, events, rss = results.get(timeout=600)
                process.join(60)
                rows.append((count, kind, cpu / (count * args.rounds) * 1000, max(walls), events, rss))
                print(f"  {count} streams, {kind}: done", flush=True)
    print(f"\nN streams at once through the SDK, each answer {args.stream_s:g} s in {args.chunks} pieces, "
          f"{args.rounds} rounds")
    print(f"{'streams':>8}  {'way':>8}  {'CPU ms/request':>14}  {'round wall s':>12}  {'events':>7}  "
          f"{'peak RSS MB':>11}")
    for count, kind, per, wall, events, rss in rows:
        print(f"{count:>8}  {kind:>8}  {per:>14.2f}  {wall:>12.2f}  {events:>7}  {rss:>11.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
