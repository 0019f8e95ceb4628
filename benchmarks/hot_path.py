"""The pieces of a worker's handling of one call, each timed alone (what a change to the hot path saves).

Run (from the repository root)::

    python benchmarks/hot_path.py [--calls 2000]

Starts a private `redis-server`, submits one job of ``--calls`` independent no-op calls (to a known activity no
worker serves, so nothing else touches it) and replays, for each call, what `Executor.run_call` does for a call
that reads nothing, piece by piece, as a worker process would after its first call of the job (record
carried by the task, the job's tool at hand): the task's record read back (`call_pointer`), the record's digest,
the start events rendered, the claim (one EVALSHA), the output messages, the finish event rendered, the commit (one
EVALSHA). Each piece's CPU and wall time per call are the medians of three rounds; the two round trips are also
shown with their arguments' JSON encoding on its own, and the call's validation, which a worker does only for a
call whose start events its claim did not publish (a later attempt, a record or tool the claim replaced), apart
from the total. Not a test: compare the rows, and run it again after a change.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))
sys.path.insert(0, str(BENCH))

from agentq.client import Client  # noqa: E402
from agentq.embedded import RedisServer  # noqa: E402
from agentq.engine.caches import solution_for  # noqa: E402
from agentq.protocol.digests import dumps, now_iso, record_digest  # noqa: E402
from agentq.protocol.envelopes import CallFinished, CallStarted, JobStarted  # noqa: E402
from agentq.protocol.events import activity_part, technical_details, tool_request_part, tool_result_part  # noqa: E402
from agentq.protocol.records import WorkerAnnouncement  # noqa: E402
from agentq.protocol.status import CallStatus  # noqa: E402
from agentq.protocol.tools import ToolRegistry  # noqa: E402
from agentq.protocol.validation import validate_call  # noqa: E402
from agentq.protocol.writes import output_messages  # noqa: E402
from agentq.runtime.app import call_pointer  # noqa: E402
from agentq.settings import Settings  # noqa: E402
from agentq.store.codecs import entry  # noqa: E402
from agentq.store.replies import Claimed  # noqa: E402
from agentq.store.state import StateStore  # noqa: E402
from benchmarks.bench_activities import NOOP_TOOL  # noqa: E402


class Clock:
    """CPU and wall time spent per named piece: `with clock("name"): ...`."""

    def __init__(self) -> None:
        self.cpu: dict[str, float] = defaultdict(float)
        self.wall: dict[str, float] = defaultdict(float)

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        cpu, wall = time.process_time(), time.perf_counter()
        yield
        self.cpu[name] += time.process_time() - cpu
        self.wall[name] += time.perf_counter() - wall


def run_round(client: Client, calls: int, clock: Clock) -> None:
    store = client._parts.store
    assert isinstance(store, StateStore), "the benchmark reads the Redis state store"
    handle = client.submit({"calls": [{"_tool": "noop", "i": i, "_outputPath": f"†state.r{i}"} for i in range(calls)]})
    job_id = handle.id
    records = list(store.call_records(job_id).values())
    tool = json.loads(store.redis.hget(store.keys(job_id).tools, "noop"))
    tool_sha = tools_at = ""
    for record in records:
        task_args = (job_id, record.id, record.to_dict())  # what the task carries, decoded from JSON
        with clock("task's record read back (call_pointer)"):
            pointer = call_pointer(task_args, {})
        assert pointer is not None and pointer.record is not None
        call_id, carried = pointer.call_id, pointer.record
        with clock("record digest (SHA-1 of its JSON)"):
            digest = record_digest(carried)
        with clock("  (validate_call: only for a call its claim did not announce)"):
            validate_call(carried.call, solution_for(tool))
        with clock("render job.started + call.started"):
            started = JobStarted(job_id=job_id, part=activity_part("Job started", source="agentq"))
            request = tool_request_part(call_id=call_id, name="noop", arguments={"i": carried.call["i"]},
                                        source="agentq", locale="en", display=None)
            ahead = [CallStarted(job_id=job_id, call_id=call_id, tool="noop", attempt=1, part=request)]
        with clock("  (their JSON, in the claim's arguments)"):
            [entry(started, job_id), *(entry(e, job_id) for e in ahead)]
        token = uuid.uuid4().hex
        with clock("claim: one EVALSHA round trip"):
            claim = store.claim(job_id, call_id, token=token, lease_ms=30_000, job_started=started, record=carried,
                                record_sha=digest, tool_sha=tool_sha, start_events=ahead, tools_at=tools_at)
        assert isinstance(claim, Claimed), claim
        tool_sha, tools_at = claim.tool_sha or tool_sha, claim.tools_at or tools_at
        with clock("output messages"):
            messages = output_messages(carried.call, carried.call["i"], call_id=call_id, date=now_iso())
        with clock("render call.finished (technical details)"):
            now = time.time()
            part = tool_result_part(call_id=call_id, name="noop", content=carried.call["i"], is_error=False,
                                    source="agentq", locale="en", display=None,
                                    technical=technical_details("noop", {"i": carried.call["i"]},
                                                                carried.call["i"], now, now, "success"))
            done = CallFinished(job_id=job_id, call_id=call_id, tool="noop", status="done", duration_ms=0.1,
                                part=part)
        with clock("  (its JSON and the messages', in the commit's arguments)"):
            [entry(done, job_id), *(dumps(m) for m in messages)]
        with clock("commit: one EVALSHA round trip"):
            commit = store.commit(job_id, call_id, token=token, status=CallStatus.DONE, messages=messages,
                                  events=[done])
        assert commit.outcome.value == "committed", commit
    handle.cancel()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args(argv)
    with RedisServer() as server:
        os.environ["AGENTQ_REDIS_URL"] = server.url
        tools = ToolRegistry()
        tools.register("noop", NOOP_TOOL)
        client = Client(settings=Settings(redis_url=server.url, max_calls=max(10_000, args.calls)), tools=tools)
        announcement = {"id": "nobody", "activities": [{"name": "noop", "queue": "bench.nobody"}]}
        client._parts.fleet.announce_worker("nobody", WorkerAnnouncement.from_dict(announcement), ttl_s=3600)
        run_round(client, min(args.calls, 200), Clock())  # warm up
        rounds = []
        for _ in range(3):
            clock = Clock()
            run_round(client, args.calls, clock)
            rounds.append(clock)
        client.close()
    names = list(rounds[0].cpu)
    total_cpu = sum(statistics.median(r.cpu[n] for r in rounds) for n in names if not n.startswith("  "))
    total_wall = sum(statistics.median(r.wall[n] for r in rounds) for n in names if not n.startswith("  "))
    width = max(map(len, names))
    print(f"one call that reads nothing, {args.calls} calls x 3 rounds (medians), per call:\n")
    print(f"{'piece':<{width}}  {'cpu us':>8}  {'wall us':>8}  {'cpu share':>9}")
    for name in names:
        cpu = statistics.median(r.cpu[name] for r in rounds) / args.calls * 1e6
        wall = statistics.median(r.wall[name] for r in rounds) / args.calls * 1e6
        print(f"{name:<{width}}  {cpu:8.1f}  {wall:8.1f}  {cpu / (total_cpu / args.calls * 1e6):9.1%}")
    print(f"{'total':<{width}}  {total_cpu / args.calls * 1e6:8.1f}  {total_wall / args.calls * 1e6:8.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
