"""A restart of the state Redis that is also the broker loses engine tasks too: they are published again.

The engine's tasks (an agent job's tick; a latent, module or wait call's task) go to the engine queue without
admission. A restart can lose one: a dispatcher takes it off the queue in the instant the server stops and never
records it as unacknowledged. The check after a restart (`runtime/engine_restarts.py`) reads the active jobs and
publishes again each due tick and each ready engine call whose task the broker neither queues nor holds
unacknowledged.

The loss is made certain here: no dispatcher runs while the jobs are submitted, so their first tasks wait on the
engine queue; the test takes them off it (as a dispatcher's BRPOP whose unacknowledged record the restart lost),
restarts the server from its append-only file, and only then starts a dispatcher. Both jobs end.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import redis

from agentq.client import Client
from agentq.embedded import RedisServer
from tests.fake_anthropic import Answer, FakeAnthropic
from tests.integration.procs import ENGINE_QUEUE, WorkerProcs, take_engine_tasks, wait_for

ENGINE = ENGINE_QUEUE
OUTPUT = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
REPUBLISHED = re.compile(r"(\d+) engine call\(s\) and (\d+) tick\(s\) had lost their task")


def _engine_tasks(broker: redis.Redis) -> list[Any]:
    """Every message on the engine queue's lists (kombu names one per priority step)."""
    return [m for key in broker.keys(f"{ENGINE}*") if broker.type(key) == b"list" for m in broker.lrange(key, 0, -1)]


@pytest.mark.timeout(90)
def test_an_engine_call_and_a_tick_lost_in_a_restart_are_published_again(
        aof_redis: RedisServer, tmp_path: Path, anthropic_env: FakeAnthropic):
    anthropic_env.responder = lambda request: Answer.solution({"calls": [], "output": {"answer": "calm"}})
    env = {"AGENTQ_HEARTBEAT_S": "1", "AGENTQ_ADMISSION_REPUBLISH_S": "300", "AGENTQ_LEASE_S": "10",
           "AGENTQ_VISIBILITY_TIMEOUT_S": "300", "AGENTQ_STORE_RETRY_S": "60"}
    procs = WorkerProcs(aof_redis.url, tmp_path)
    try:
        worker = procs.start(["procA"], concurrency=1, **env)  # sweeps the admission; serves no engine task
        procs.wait_live(worker, ["procA"])
        with Client(aof_redis.url) as client, redis.Redis.from_url(aof_redis.url) as broker:
            wait_for(lambda: broker.get("agentq:{admission}:run"), 10, "the sweep to note the server's run")
            waiting = client.submit({"tools": ["waitForSignal"], "calls": [
                {"_tool": "waitForSignal", "name": "go", "timeout_s": 600, "_outputPath": "†state.go"}]})
            agent = client.submit({"context": [{"type": "text", "text": "How calm is the sea?"}],
                                   "tools": ["waitForSignal"], "output": OUTPUT})
            wait_for(lambda: len(_engine_tasks(broker)) == 2, 10, "the wait call's task and the first tick's")
            assert take_engine_tasks(broker) == 2
            aof_redis.restart()  # from its append-only file (flushed as it stops): the queue as taken
            said = wait_for(lambda: REPUBLISHED.search(worker.output()), 15,
                            "the sweep to look at the active jobs after the restart")
            assert said.groups() == ("1", "1"), said.string[-2000:]
            # published again, before any dispatcher ran (the log line may come before the broker has both)
            wait_for(lambda: len(_engine_tasks(broker)) == 2, 10, "both tasks on the engine queue again")
            dispatcher = procs.dispatcher(**env)
            procs.wait_dispatcher(dispatcher)
            assert agent.result(timeout=30)["result"] == {"answer": "calm"}
            wait_for(lambda: client.calls(waiting.id)[0]["status"] == "waiting", 20, "the wait to open")
            waiting.signal("go", {"ok": True})
            record = waiting.result(timeout=20)
    finally:
        procs.close()
    assert record["status"] == "succeeded" and record["state"]["go"]["data"] == {"ok": True}, record
    assert len(anthropic_env.requests) == 1  # the tick ran once
