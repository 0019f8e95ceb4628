"""A restart of the state Redis that is also the broker: every job moves again within seconds.

The state Redis keeps an append-only file (`appendfsync everysec`) and is the broker too, so the admission step
pushes the tasks it admits. A restart can lose an admitted call's task: a worker takes it off its queue in the
instant the server stops and never records it as unacknowledged. Its call would stay `ready`, holding its place,
until the admission sweep's `AGENTQ_ADMISSION_REPUBLISH_S` (300 s). After a restart, the sweep finds such calls
(their tasks neither queued nor unacknowledged) and publishes them again within a heartbeat.

- The loss itself, made certain: a task is taken off its queue just before the restart, as a worker's BRPOP
  whose unacknowledged record the restart lost; the job ends within seconds of the restart, no charge twice.
- Restarts in the middle of bursts of jobs (`RESTART_ROUNDS`, 3 in the suite; `python benchmarks/store_restarts.py`
  runs 20): after each restart, every job of the burst ends within 10 s, and every charge ran once.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import Counter
from pathlib import Path

import pytest
import redis

from agentq.client import Client
from agentq.embedded import RedisServer
from agentq.protocol.status import CallStatus
from tests.integration.procs import WorkerProcs, ledger_runs, wait_for

ROUNDS = int(os.environ.get("RESTART_ROUNDS", "3"))  # benchmarks/store_restarts.py runs 20
QUEUE = "agentq.activity.procCharge"
MOVES_WITHIN_S = 10.0
REPUBLISHED = re.compile(r"(\d+) of them had lost their task")


def _charges(prefix: str, n: int, seconds: float) -> dict:
    calls = [{"_tool": "procCharge", "seconds": seconds, "tag": f"{prefix}{i}", "_outputPath": f"†state.c{i}"}
             for i in range(n)]
    return {"context": [{"type": "state", "data": {}}], "calls": calls}


def _env(ledger: Path) -> dict[str, str]:
    # republish after 300 s (the default, said here): only the restart's check can move a lost call in time. The
    # check runs at the next heartbeat's sweep: a 2 s heartbeat leaves the job's own work the rest of the 10 s on a
    # loaded machine (with the default 10 s, a CI run once saw a job end just past 10 s after its restart)
    return {"PROCS_LEDGER": str(ledger), "AGENTQ_PREFETCH_MULTIPLIER": "1", "AGENTQ_ADMISSION_REPUBLISH_S": "300",
            "AGENTQ_LEASE_S": "10", "AGENTQ_VISIBILITY_TIMEOUT_S": "300", "AGENTQ_STORE_RETRY_S": "60",
            "AGENTQ_HEARTBEAT_S": "2"}


def _republished(logs: str) -> int:
    return sum(int(n) for n in REPUBLISHED.findall(logs))


@pytest.mark.timeout(90)
def test_a_task_lost_in_a_restart_is_published_again_within_seconds(aof_redis: RedisServer, tmp_path: Path):
    """Of two tasks taken off the queue before the restart, the one recorded as unacknowledged is the broker's
    (it gives it back after the visibility timeout): only the other is published again. Had a worker held the
    one taken for lost, its copy would run nothing twice: the original is sent too, and the charge runs once."""
    ledger = tmp_path / "ledger.txt"
    procs = WorkerProcs(aof_redis.url, tmp_path)
    try:
        worker = procs.start(["procCharge"], concurrency=2, **_env(ledger))
        procs.wait_live(worker, ["procCharge"])
        with Client(aof_redis.url) as client, redis.Redis.from_url(aof_redis.url) as broker:
            # both slots busy through the restart (a worker takes no task then): the test's loss is the only one
            handle = client.submit(_charges("c", 6, 1.5))
            wait_for(lambda: sum(ledger_runs(ledger).values()) == 2 and broker.llen(QUEUE) == 4, 20,
                     "two charges to run and four tasks to wait on their queue")
            lost = broker.rpop(QUEUE)  # the next a worker would take: taken, never recorded as unacknowledged
            held = broker.rpop(QUEUE)  # the one after: taken and recorded, as kombu's transport does
            assert lost is not None and held is not None
            broker.hset("unacked", "held-tag", json.dumps([json.loads(held), "", QUEUE]))
            aof_redis.restart()
            back_at = time.time()
            said = wait_for(lambda: REPUBLISHED.search(worker.output()), MOVES_WITHIN_S,
                            "the sweep to look at the queues after the restart")
            # the unacknowledged one back on its queue, as the broker does after the visibility timeout
            assert broker.hdel("unacked", "held-tag") == 1
            broker.lpush(QUEUE, held)
            broker.lpush(QUEUE, lost)  # and the lost one after all: two copies of its task, one run (below)
            record = handle.result(timeout=40)
            ended_at = time.time()
            wait_for(lambda: broker.llen(QUEUE) == 0 and broker.hlen("unacked") == 0, 30,
                     "the second copy to be taken and acknowledged")
        store = procs.store
        statuses = store.call_statuses(handle.id)
    finally:
        procs.close()
    assert said.group(1) == "1", said.string[-2000:]  # the lost task only
    assert record["status"] == "succeeded", record
    assert set(statuses.values()) == {CallStatus.DONE}
    runs = ledger_runs(ledger)
    assert runs == Counter({f"c{i}": 1 for i in range(6)}), runs  # each charge once, the lost one included
    assert ended_at - back_at < MOVES_WITHIN_S, f"the job ended {ended_at - back_at:.1f} s after the restart"


def _round(client: Client, aof_redis: RedisServer, ledger: Path, round_no: int) -> dict:
    """A burst of jobs, the store restarted in its middle; what it measured."""
    jobs, calls = 4, 40
    handles = [client.submit(_charges(f"r{round_no}j{j}c", calls, 0.02)) for j in range(jobs)]
    prefix = f"r{round_no}j"
    wait_for(lambda: sum(n for tag, n in ledger_runs(ledger).items()
                         if tag.startswith(prefix)) >= jobs * calls // 4, 60,
             f"a quarter of round {round_no}'s charges to start")
    aof_redis.restart()
    back_at = time.monotonic()
    ends: list[float] = []
    stalled: list[str] = []
    for handle in handles:
        left = max(0.1, back_at + MOVES_WITHIN_S - time.monotonic())
        try:
            record = handle.result(timeout=left)
        except Exception as error:  # the job did not end in time (JobTimeoutError), or the store did not answer
            stalled.append(f"{handle.id} ({type(error).__name__}: {error})")  # which of the two, when it fails
            continue
        assert record["status"] == "succeeded", record
        ends.append(time.monotonic() - back_at)
    runs = Counter({tag: n for tag, n in ledger_runs(ledger).items() if tag.startswith(prefix)})
    return {"stalled": stalled, "max_end_after_restart_s": round(max(ends, default=0.0), 2), "runs": runs,
            "calls": jobs * calls}


@pytest.mark.timeout(60 + ROUNDS * 30)
def test_restarts_in_the_middle_of_bursts_stall_no_job(aof_redis: RedisServer, tmp_path: Path,
                                                       record_property):
    ledger = tmp_path / "ledger.txt"
    procs = WorkerProcs(aof_redis.url, tmp_path)
    stalls: dict[int, list[str]] = {}
    twice: dict[int, list[str]] = {}
    ends = []
    began = time.monotonic()
    try:
        workers = [procs.start(["procCharge"], concurrency=4, **_env(ledger)) for _ in range(2)]
        for proc in workers:
            procs.wait_live(proc, ["procCharge"])
        with Client(aof_redis.url) as client:
            for round_no in range(ROUNDS):
                outcome = _round(client, aof_redis, ledger, round_no)
                twice[round_no] = sorted(tag for tag, n in outcome["runs"].items() if n > 1)
                if outcome["stalled"]:  # its jobs wait for the sweep's republication (minutes): counted, left
                    stalls[round_no] = outcome["stalled"]
                    continue
                ends.append(outcome["max_end_after_restart_s"])
                assert len(outcome["runs"]) == outcome["calls"], f"round {round_no}: charges never ran"
        logs = "\n".join(proc.output() for proc in workers)
    finally:
        procs.close()
    figures = {"restarts": ROUNDS, "restarts_with_a_stall": len(stalls),
               "stalled_jobs": sum(len(s) for s in stalls.values()),
               "max_job_end_after_restart_s": max(ends, default=None), "calls_republished": _republished(logs),
               "ran_twice": sum(len(t) for t in twice.values()), "total_s": round(time.monotonic() - began, 1)}
    for name, value in figures.items():
        record_property(name, value)
    print("store restarts:", figures)
    assert not stalls, f"jobs that did not move within {MOVES_WITHIN_S} s of a restart, by round: {stalls}\n" \
                       f"{logs[-3000:]}"
    assert not any(twice.values()), f"charges that ran twice, by round: {twice}"
