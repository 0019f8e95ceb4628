"""A tool's `x-start-timeout-s` (docs/waits.md#start-timeouts) with real processes: real Redis, a real `agentq
dispatcher`, no worker for the tool's activity. A ready call no worker takes within it fails with StartTimedOut,
which a `||` branch takes like any failure, instead of waiting forever."""

from __future__ import annotations

import time
from typing import Any

from agentq.client import Client
from agentq.errors import JobValidationError
from agentq.settings import Settings
from tests.integration.procs import WorkerProcs, wait_for

ORPHAN: dict[str, Any] = {
    "type": "object", "description": "A tool whose activity no worker serves.", "x-start-timeout-s": 1,
    "properties": {"_tool": {"type": "string", "const": "orphan"},
                   "_activity": {"type": "string", "const": "orphanWorker"},
                   "_outputPath": {"type": "string", "pattern": "^†"}, "_output": {}}}


def test_a_call_no_worker_takes_fails_with_start_timed_out(worker_procs: WorkerProcs, redis_url: str):
    dispatcher = worker_procs.dispatcher()
    worker_procs.wait_dispatcher(dispatcher)
    with Client(settings=Settings(redis_url=redis_url)) as client:
        submitted = time.monotonic()
        handle = client.submit({"tools": [ORPHAN], "calls": [
            {"_tool": "orphan", "_outputPath": "†state.done || †state.missed"}]})
        record = handle.result(timeout=15)
        elapsed = time.monotonic() - submitted
        assert record["status"] == "succeeded", record  # the `||` branch took the failure
        assert record["state"]["missed"]["error"]["type"] == "StartTimedOut"
        assert 1 <= elapsed < 5, elapsed
        calls = handle.calls()
        assert [c["status"] for c in calls] == ["failed"] and calls[0]["error"]["type"] == "StartTimedOut"
    wait_for(lambda: worker_procs.store.redis.zcard("agentq:{timers}:due") == 0, 5, "the timer to be dropped")


def test_a_tool_whose_start_timeout_is_no_positive_number_is_refused(worker_procs: WorkerProcs, redis_url: str):
    with Client(settings=Settings(redis_url=redis_url)) as client:
        try:
            client.submit({"tools": [{**ORPHAN, "x-start-timeout-s": -1}], "calls": [{"_tool": "orphan"}]})
        except JobValidationError as error:  # every problem at its pointer
            problems = [(p.pointer, p.message) for p in error.problems]
        else:
            raise AssertionError("the job was accepted")
    assert problems == [("/tools/0/x-start-timeout-s", "x-start-timeout-s must be a positive number of seconds, "
                                                       "got -1")]
    assert worker_procs.store.redis.keys("agentq:{job_*") == []


def test_a_call_taken_in_time_is_left_alone_however_long_it_runs(worker_procs: WorkerProcs, redis_url: str):
    dispatcher = worker_procs.dispatcher()
    worker = worker_procs.start(serve=["procSlow"])
    worker_procs.wait_dispatcher(dispatcher)
    worker_procs.wait_live(worker, ["procSlow"])
    timed = {**ORPHAN, "properties": {**ORPHAN["properties"], "_tool": {"type": "string", "const": "slowTimed"},
                                      "_activity": {"type": "string", "const": "procSlow"},
                                      "seconds": {"type": "number"}, "tag": {"type": "string"}}}
    with Client(settings=Settings(redis_url=redis_url)) as client:
        handle = client.submit({"tools": [timed], "calls": [
            {"_tool": "slowTimed", "seconds": 2.5, "tag": "timed", "_outputPath": "†state.slow"}]})
        record = handle.result(timeout=20)
    assert record["status"] == "succeeded", record
    assert record["state"]["slow"]["start"] == 1
    wait_for(lambda: worker_procs.store.redis.zcard("agentq:{timers}:due") == 0, 5, "the timer to be dropped")
