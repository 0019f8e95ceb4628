"""Wait calls (docs/waits.md) with real processes: real Redis, real `agentq dispatcher` processes, the real SDK
against the fake Messages API. A wait holds nothing while it waits; its due time lives in Redis, so a dispatcher
killed with SIGKILL loses no wait."""

from __future__ import annotations

import time
from datetime import datetime

from agentq.client import Client
from agentq.protocol.status import CallStatus
from agentq.settings import Settings
from tests.integration.procs import WorkerProcs, wait_for


def _seconds(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def _call_status(client: Client, job_id: str) -> list[str]:
    return [c["status"] for c in client.calls(job_id)]


def test_a_plan_job_with_sleep_resumes_after_its_dispatcher_is_killed(worker_procs: WorkerProcs, redis_url: str):
    first = worker_procs.dispatcher()
    worker_procs.wait_dispatcher(first)
    with Client(settings=Settings(redis_url=redis_url)) as client:
        submitted = time.time()
        handle = client.submit({"tools": ["sleep"], "calls": [
            {"_tool": "sleep", "seconds": 6, "_outputPath": "†state.slept"}]})
        wait_for(lambda: _call_status(client, handle.id) == [CallStatus.WAITING.value], 20, "the sleep to wait")
        events = [e.envelope.to_dict() for e in handle.events(follow=False)]
        waiting = [e for e in events if e["event"] == "call.waiting"]
        assert len(waiting) == 1 and waiting[0]["awaits"] == {"kind": "sleep"}
        assert _seconds(waiting[0]["until"]) - submitted >= 5.9
        first.kill()  # SIGKILL while the call waits: its due time is in Redis
        second = worker_procs.dispatcher()
        worker_procs.wait_dispatcher(second)
        record = handle.result(timeout=30)
    assert record["status"] == "succeeded"
    woke_at = _seconds(record["state"]["slept"]["woke_at"])
    assert 0 <= woke_at - _seconds(waiting[0]["until"]) < 1.5  # fired within a second of its due time
    wait_for(lambda: worker_procs.store.redis.zcard("agentq:{timers}:due") == 0, 5, "the timer to be dropped")
