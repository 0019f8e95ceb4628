"""Many jobs waiting at once (docs/waits.md): what a waiting job costs in Redis and in the dispatcher, and how fast
events wake them.

Run (from the repository root)::

    python benchmarks/waits.py [--jobs 10000] [--kind agent|plan] [--idle-s 10]

Not a test: the numbers depend on the machine. It starts a private `redis-server` (broker and state store), one
`agentq dispatcher` process and, for agent jobs, the fake Messages API of the test suite (`tests/fake_anthropic.py`:
the first request of job n answers a `waitForEvent` of `order.paid` whose `/order` is n, the second the output).
It submits `--jobs` jobs, waits until every one's wait is open, then measures:

- Redis bytes per waiting job: `used_memory` over the empty server's, divided by the jobs (everything a job keeps:
  its record, log, events, calls, and its wait), and the wait's own keys alone (`MEMORY USAGE` of its job's `waits`
  hash, its timer entry's share of the sorted set, its tenant index entry);
- the dispatcher's RSS and CPU over `--idle-s` seconds while every job waits;
- the time from sending one event per job (8 threads, `Client.send_event`) to every wait committed (woken), and to
  every job ended (an agent job asks the model once more first).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentq.client import Client  # noqa: E402
from agentq.embedded import RedisServer  # noqa: E402
from agentq.settings import Settings  # noqa: E402

OUTPUT = {"type": "object", "properties": {"paid": {"type": "boolean"}}, "required": ["paid"]}


def plan_job(n: int) -> dict:
    return {"tools": ["waitForEvent"], "calls": [{"_tool": "waitForEvent", "event": "order.paid",
                                                  "match": {"/order": n}, "_outputPath": "†state.paid"}]}


def agent_job(n: int) -> dict:
    return {"context": [{"type": "text", "text": f"Wait until order {n} is paid."}], "tools": ["waitForEvent"],
            "output": OUTPUT}


def fake_model() -> Any:
    """The test suite's fake Messages API, answering each job's two requests (see the module docstring)."""
    from tests.fake_anthropic import Answer, FakeAnthropic, RecordedRequest

    def answer(request: RecordedRequest) -> Answer:
        messages = request.body["messages"]
        n = int(re.search(r"order (\d+) is paid", json.dumps(messages)).group(1))  # type: ignore[union-attr]
        if len(messages) == 1:
            return Answer.solution({"calls": [{"_tool": "waitForEvent", "event": "order.paid", "match": {"/order": n},
                                               "_outputPath": "†state.paid"}], "output": None}, chunk_size=4096)
        return Answer.solution({"calls": [], "output": {"paid": True}}, chunk_size=4096)

    fake = FakeAnthropic()
    fake.responder = answer
    return fake


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+) kB", text).group(1)) / 1024  # type: ignore[union-attr]


def wait_until(predicate: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.5)


def waits_due(admin: Any) -> int:
    """The waits' timers: the timers' sorted set without the jobs' `@unstarted` checks (one per agent job and per job
    whose first call is a wait, due a lease after its submission)."""
    unstarted = sum(1 for _ in admin.zscan_iter("agentq:{timers}:due", match="* @unstarted", count=1000))
    return int(admin.zcard("agentq:{timers}:due")) - unstarted


def run(jobs: int, kind: str, idle_s: float) -> dict[str, Any]:
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(RedisServer())
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="agentq-waits-")))
        import redis

        admin = redis.Redis.from_url(server.url, decode_responses=True)
        empty = int(admin.info("memory")["used_memory"])
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTQ_")}
        env.update(AGENTQ_REDIS_URL=server.url, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
        if kind == "agent":
            fake = stack.enter_context(fake_model())
            env.update(AGENTQ_LLM="anthropic", ANTHROPIC_BASE_URL=fake.base_url, ANTHROPIC_API_KEY="sk-ant-fake")
        log = stack.enter_context(open(logs / "dispatcher.log", "wb"))
        dispatcher = subprocess.Popen([sys.executable, "-m", "agentq.cli", "dispatcher", "--loglevel", "WARNING"],
                                      env=env, cwd=str(ROOT), stdout=log, stderr=subprocess.STDOUT)
        stack.callback(dispatcher.kill)
        client = stack.enter_context(Client(settings=Settings(redis_url=server.url)))
        wait_until(lambda: client.live_activities() is not None and admin.zcard("agentq:workers") > 0, 60,
                   "the dispatcher")
        make = agent_job if kind == "agent" else plan_job
        started = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            handles = list(pool.map(lambda n: client.submit(make(n)), range(jobs)))
        wait_until(lambda: waits_due(admin) >= jobs, 600, f"{jobs} waits to open")
        opened_s = time.monotonic() - started
        time.sleep(2)  # the last waits' tasks end
        used = int(admin.info("memory")["used_memory"]) - empty
        wait_bytes = sum(int(admin.memory_usage(f"agentq:{{{h.id}}}:waits") or 0) for h in handles[:200]) / 200
        timers = int(admin.memory_usage("agentq:{timers}:due") or 0) / jobs
        index = sum(int(admin.memory_usage(k) or 0) for k in admin.scan_iter("agentq:{waits:default}:*",
                                                                               count=1000)) / jobs
        cpu0, rss0 = cpu_s(dispatcher.pid), rss_mb(dispatcher.pid)
        time.sleep(idle_s)
        idle_cpu = (cpu_s(dispatcher.pid) - cpu0) / idle_s
        rss1 = rss_mb(dispatcher.pid)
        sent = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            woken = sum(pool.map(lambda n: client.send_event("order.paid", {"order": n})["woken"], range(jobs)))
        sent_s = time.monotonic() - sent
        wait_until(lambda: waits_due(admin) == 0, 900, "every wait to be fired")
        woken_s = time.monotonic() - sent  # every wait committed (an agent job's next request sent after)
        wait_until(lambda: all(client.record(h.id)["status"] == "succeeded" for h in handles[-50:]), 900,
                   "every job to end")
        ended_s = time.monotonic() - sent
        failed = sum(1 for h in handles if client.record(h.id)["status"] != "succeeded")
        return {"jobs": jobs, "kind": kind, "open_all_s": round(opened_s, 1),
                "redis_bytes_per_waiting_job": round(used / jobs),
                "wait_keys_bytes_per_job": round(wait_bytes + timers + index),
                "dispatcher_rss_mb": round(rss1, 1), "dispatcher_rss_mb_before_idle": round(rss0, 1),
                "dispatcher_cpu_while_waiting": f"{idle_cpu * 100:.1f}% of a core",
                "events_sent_s": round(sent_s, 2), "events_woke": woken, "sent_to_all_woken_s": round(woken_s, 2),
                "sent_to_all_ended_s": round(ended_s, 2),
                "jobs_not_succeeded": failed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--kind", choices=("agent", "plan"), default="agent")
    parser.add_argument("--idle-s", type=float, default=10.0)
    args = parser.parse_args()
    print(json.dumps(run(args.jobs, args.kind, args.idle_s), indent=2))


if __name__ == "__main__":
    main()
