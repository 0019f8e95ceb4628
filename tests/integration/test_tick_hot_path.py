"""The per-tick hot path of an agent job: the Redis round trips a dispatcher makes for one model request (see
docs/architecture.md, "engine/"), pinned so that a later change cannot add one silently."""

from __future__ import annotations

import threading

from tests.fake_anthropic import Answer, FakeAnthropic, RecordedRequest
from tests.integration.conftest import Harness, store_of
from tests.redis_trips import RoundTrips

TIMEOUT = 30.0
OUTPUT = {"type": "object", "properties": {"done": {"type": "boolean"}}, "required": ["done"]}
JOB = {"context": [{"type": "text", "text": "Think, then answer."}], "tools": [], "output": OUTPUT}


def two_ticks(request: RecordedRequest) -> Answer:
    """The first answer goes on (no call, no output), the second ends the job."""
    ticks = sum(1 for turn in request.body["messages"] if turn["role"] == "assistant")
    return Answer.solution({"calls": [], "output": {"done": True} if ticks else None})


class NamedTrips(RoundTrips):
    """`RoundTrips` of the engine's threads, with each Lua step named by its script (`EVALSHA tick_begin`)."""

    def __init__(self, store) -> None:
        names = {script.sha: name for name, script in store.scripts.registered.items()}
        for script in store.scripts.registered.values():  # loaded now: no NOSCRIPT retry counts twice later
            store.redis.script_load(script.script)
        super().__init__(store.redis)
        counted = store.redis.execute_command

        def named(*args, **kwargs):
            if str(args[0]).upper() == "EVALSHA" and threading.current_thread().name.startswith("agentq-task"):
                with self._lock:
                    self.names.append(f"EVALSHA {names.get(args[1], '?')}")
            return counted(*args, **kwargs)

        self.names: list[str] = []
        store.redis.execute_command = named

    def of_ticks(self) -> list[str]:
        """The requests the engine's task threads sent since the last call, each as its command names (a Lua
        step by its script's name); forgets them."""
        taken = [names for thread, names in self.take_by_thread() if thread.startswith("agentq-task")]
        with self._lock:
            scripts, self.names = iter(self.names), []
        return [next(scripts) if names == ["EVALSHA"] else "+".join(names) for names in taken]


def test_a_tick_costs_three_round_trips_its_claim_its_rate_limit_take_with_its_start_and_its_end(
        redis_url: str, anthropic_env: FakeAnthropic):
    harness = Harness(redis_url)
    try:
        anthropic_env.responder = two_ticks
        worker = harness.worker(llm="anthropic", concurrency=1)
        trips = NamedTrips(worker.runtime.store)
        client = harness.client()
        assert client.submit(JOB).result(timeout=TIMEOUT)["status"] == "succeeded"  # a first job: the caches fill
        trips.of_ticks()

        record = client.submit(JOB).result(timeout=TIMEOUT)
        assert record["status"] == "succeeded" and record["result"] == {"done": True}
        tick = ["EVALSHA tick_begin", "EVALSHA llm_take", "EVALSHA tick_end"]  # the start event rides in llm_take
        # then the job's end: its step, which on one Redis counts the end for the metrics too (a cluster's count
        # follows it: fleet-wide keys, out of the job's slot)
        assert trips.of_ticks() == [*tick, *tick, "EVALSHA finalize"]
        store = store_of(client)
        assert store.redis.zscore(store.fleet.active_jobs, record["id"]) is None  # counted as it ended
        assert int(store.redis.hget(store.fleet.job_totals, "succeeded")) == 2
        events = [e["event"] for _, e in store_of(client).read_events(record["id"])]
        # written once per request, by the rate limits' step, in its place: before the tick's end
        assert events == ["job.queued", "job.started", "tick.started", "tick.finished", "tick.started",
                          "tick.finished", "part", "job.finished"]
    finally:
        harness.close()
