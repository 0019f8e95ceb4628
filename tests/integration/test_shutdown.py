"""Warm shutdown with real `agentq worker` processes (prefork, the default pool; docs/monitoring.md): SIGTERM lets a
running call finish and commit within `AGENTQ_SHUTDOWN_GRACE_S`, and hands back what it did not start; a call still
running when the grace ends is handed back too, redelivered, taken over through its lease and finished exactly
once.

The activity is `opsGate` (`tests/integration/ops_activities.py`): it announces its start in Redis and waits for
the test to open its gate, so every step is awaited, never slept through.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis as redis_py

from agentq.client import Client
from tests.integration.procs import wait_for

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

OPS = "tests.integration.ops_activities"
QUEUE = "agentq.activity.opsGate"


@pytest.fixture
def redis(redis_url: str) -> Iterator[Any]:
    """A client for the activities' traces; no socket timeout, since its BLPOPs may wait longer than 5 s."""
    client = redis_py.Redis.from_url(redis_url, decode_responses=True, socket_timeout=None)
    try:
        yield client
    finally:
        client.close()


def _gate(tag: str, path: str) -> dict:
    return {"_tool": "opsGate", "tag": tag, "seconds": 60, "_outputPath": path}


def _started(redis, tag: str, timeout: float = 30) -> int:
    """Await the start of an opsGate run with this tag; its pid."""
    popped = redis.blpop([f"ops:started:{tag}"], timeout=timeout)
    if popped is None:
        pytest.fail(f"opsGate {tag!r} did not start within {timeout} s", pytrace=False)
    return int(popped[1])


def _shutdown_began(proc) -> bool:
    return "warm shutdown: running calls have" in proc.output()


def test_sigterm_lets_the_running_call_finish_and_hands_back_what_did_not_start(worker_procs, redis_url, redis):
    first = worker_procs.start(module=OPS, pool="prefork", concurrency=1, AGENTQ_SHUTDOWN_GRACE_S="60")
    worker_procs.wait_live(first, ["opsGate"])
    with Client(redis_url) as client:
        handle = client.submit({"calls": [_gate("running", "†state.running"), _gate("queued", "†state.queued")]})
        running_pid = _started(redis, "running")
        assert redis.llen(QUEUE) == 1  # prefetch 1: the worker holds only the call it runs

        first.popen.terminate()  # SIGTERM: Celery's warm shutdown
        wait_for(lambda: _shutdown_began(first), 30, "the worker to begin its warm shutdown",
                 on_timeout=first.output)
        assert first.alive()  # it waits for the running call
        redis.rpush("ops:gate:running", "open")
        assert first.popen.wait(30) == 0
        records = worker_procs.store.call_records(handle.id)
        statuses = {records[c].call["tag"]: s.value for c, s in worker_procs.store.call_statuses(handle.id).items()}
        assert statuses == {"running": "done", "queued": "ready"}  # the running call committed before the exit
        assert redis.llen(QUEUE) == 1 and redis.hlen("unacked") == 0  # the other one is back in the broker

        second = worker_procs.start(module=OPS, pool="prefork", concurrency=1)
        queued_pid = _started(redis, "queued")
        redis.rpush("ops:gate:queued", "open")
        record = handle.result(timeout=30)
    assert record["status"] == "succeeded", record
    assert record["state"]["running"] == {"pid": running_pid, "opened": True}
    assert record["state"]["queued"] == {"pid": queued_pid, "opened": True}
    assert queued_pid != running_pid and second.alive()
    assert [int(p) for p in redis.lrange("ops:finished:running", 0, -1)] == [running_pid]


def test_a_call_still_running_when_the_grace_ends_is_handed_back_and_finished_once(worker_procs, redis_url, redis):
    first = worker_procs.start(module=OPS, pool="prefork", concurrency=1, AGENTQ_SHUTDOWN_GRACE_S="1")
    worker_procs.wait_live(first, ["opsGate"])
    with Client(redis_url) as client:
        handle = client.submit({"calls": [_gate("slow", "†state.slow")]})
        first_pid = _started(redis, "slow")
        first.popen.terminate()
        assert first.popen.wait(30) == 0, first.output()  # the grace ended: a cold shutdown, not a hang
        assert "handing the calls still running back to the broker" in first.output()
        # handed back at once, not after a timeout: one copy, put back by the worker (marked redelivered); the
        # store's sweep may have sent one of its own meanwhile, once the stopped attempt's lease lapsed (a task not
        # noted unacknowledged is held nowhere the store can see): a second copy of the call's task runs nothing
        queued = [json.loads(m)["headers"] for m in redis.lrange(QUEUE, 0, -1)]
        assert [h.get("redelivered", False) for h in queued].count(True) == 1, queued
        assert len(queued) <= 2 and {h["id"] for h in queued} == {f"{handle.id}.{handle.calls()[0]['id']}"}, queued
        assert redis.hlen("unacked") == 0

        second = worker_procs.start(module=OPS, pool="prefork", concurrency=1)
        second_pid = _started(redis, "slow")  # redelivered, and taken over once the first run's lease expired
        redis.rpush("ops:gate:slow", "open")
        record = handle.result(timeout=30)
        (call,) = handle.calls()
    assert record["status"] == "succeeded", record
    assert record["state"] == {"slow": {"pid": second_pid, "opened": True}}
    assert second_pid != first_pid and second.alive()
    assert [int(p) for p in redis.lrange("ops:finished:slow", 0, -1)] == [second_pid]  # the first never finished
    assert call["status"] == "done" and call["attempts"] == 2
    events = [e for _, e in worker_procs.store.read_events(handle.id)]
    assert [e["event"] for e in events].count("call.finished") == 1
    outputs = [m for m in worker_procs.store.read_log(handle.id) if m.get("_path") == "†state.slow"]
    assert len(outputs) == 1, json.dumps(outputs)
