"""The per-call hot path: how many round trips agentq makes to Redis, the events it still publishes, and how
`JobHandle.result` waits for a job's end (see docs/architecture.md, "runtime/")."""

from __future__ import annotations

import dataclasses
import threading
from collections import Counter

from agentq.runtime.worker import InProcessWorker
from tests.integration.conftest import store_of
from tests.integration.procs import wait_for

TIMEOUT = 20.0


class StoreCommands:
    """Counts the commands a store's Redis client sends (EVALSHA by script name), one per round trip."""

    def __init__(self, store) -> None:
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        names = {script.sha: name for name, script in store.scripts.registered.items()}
        for script in store.scripts.registered.values():  # loaded now: no NOSCRIPT retry counts twice later
            store.redis.script_load(script.script)
        client, execute = store.redis, store.redis.execute_command

        self.scripts: list[tuple[str, str]] = []  # (script, name of the thread that ran it)

        def counted(*args, **kwargs):
            name = str(args[0]).upper()
            if name == "EVALSHA":
                name = f"EVALSHA {names.get(args[1], '?')}"
            with self._lock:
                self.counts[name] += 1
                if name.startswith("EVALSHA "):
                    self.scripts.append((name.removeprefix("EVALSHA "), threading.current_thread().name))
            return execute(*args, **kwargs)

        client.execute_command = counted

    def take(self) -> Counter[str]:
        with self._lock:
            counts, self.counts = self.counts, Counter()
        return counts

    def take_by_thread(self) -> list[tuple[str, str]]:
        """The scripts run since the last take, each with the name of the thread that ran it."""
        with self._lock:
            scripts, self.scripts, self.counts = self.scripts, [], Counter()
        return scripts


def _worker(harness, concurrency: int = 1) -> InProcessWorker:
    runtime = harness.runtime()
    runtime.app.conf.broker_transport_options = {**(runtime.app.conf.broker_transport_options or {}),
                                                 "polling_interval": 0.1}
    worker = InProcessWorker(runtime, concurrency=concurrency).start()
    harness._workers.append(worker)
    return worker


def _events(handle) -> list[dict]:
    return [event.data for event in handle.events(technical=True)]


def test_an_independent_call_costs_two_round_trips_and_a_dependent_one_three(harness):
    harness.tool("noop", params={"i": {"type": "integer"}})
    harness.tool("inc", params={"x": {"type": "integer"}})
    harness.activities.register("noop", lambda call: call["i"])
    harness.activities.register("inc", lambda call: call["x"] + 1)
    worker = _worker(harness)  # one thread: the job's first call is the only one without the tool at hand
    commands = StoreCommands(worker.runtime.store)
    client = harness.client()

    calls = [{"_tool": "noop", "i": i, "_outputPath": f"†state.r{i}"} for i in range(20)]
    handle = client.submit({"calls": calls})
    record = handle.result(timeout=TIMEOUT)
    assert record["status"] == "succeeded" and record["state"] == {f"r{i}": i for i in range(20)}
    counts = commands.take()
    assert counts["EVALSHA claim"] == 20 and counts["EVALSHA commit"] == 20
    assert counts["XADD"] == 1  # only the first call published its call.started apart (its tool was not known)

    events = _events(handle)
    names = [e["event"] for e in events]
    assert names[:2] == ["job.queued", "job.started"] and names[-1] == "job.finished"
    for call_id in {e["call_id"] for e in events if "call_id" in e}:
        mine = [e for e in events if e.get("call_id") == call_id]
        assert [e["event"] for e in mine] == ["call.started", "call.finished"]
        started = mine[0]
        assert started["attempt"] == 1 and started["tool"] == "noop"
        assert started["part"]["activity_type"] == "tool_request"
        assert started["part"]["tools"][0]["id"] == call_id and "i" in started["part"]["tools"][0]["arguments"]

    chain = [{"_tool": "inc", "x": 0, "_outputPath": "†state.s0"}]
    chain += [{"_tool": "inc", "x": f"†state.s{k - 1}", "_outputPath": f"†state.s{k}"} for k in range(1, 5)]
    record = client.submit({"calls": chain}).result(timeout=TIMEOUT)
    assert record["status"] == "succeeded" and record["state"]["s4"] == 5
    counts = commands.take()
    assert counts["EVALSHA claim"] == 5 and counts["EVALSHA commit"] == 5
    # calls that read the log publish call.started after resolving it; so does the first (its tool is not known)
    assert counts["XADD"] == 5


def test_a_single_call_job_costs_its_client_two_round_trips(harness):
    """Submit and wait for a one-call job: the job's script (it lists the job) and the admission of its ready call
    to its queue (docs/tenants.md; one pipeline, the admission's step run only if the job's script wrote the job), the
    wait for its end signal with the read of the saved record (one pipeline: Redis reads it as soon as the wait
    returns).
    What the fleet published and announced was read by an earlier submission (once per heartbeat, see
    `JobService.fleet`), and the task goes to the broker, not the state store."""
    from tests.redis_trips import RoundTrips

    harness.tool("noop", params={"i": {"type": "integer"}})
    harness.activities.register("noop", lambda call: call["i"])
    _worker(harness)
    client = harness.client()
    job = {"calls": [{"_tool": "noop", "i": 7, "_outputPath": "†state.r"}]}
    assert client.submit(job).result(timeout=TIMEOUT)["state"] == {"r": 7}
    trips = RoundTrips(client._parts.store.redis)
    for _ in range(3):
        record = client.submit(job).result(timeout=TIMEOUT)
        assert record["status"] == "succeeded" and record["state"] == {"r": 7}
        # the job's script lists the job itself; the listings' trims go along at most once a second
        write, wait = trips.take()
        assert [c for c in write if c != "ZREMRANGEBYSCORE"] == ["EVALSHA", "EVALSHA"] and len(write) in (2, 4)
        assert wait == ["BLMOVE", "HGETALL"]


def test_a_single_call_job_costs_its_worker_two_round_trips(harness):
    """Claim, commit: the claim of a plan job's one open awaited call brings what finalizing reads, and the commit
    writes the job's end the worker built from it (no read of the job, its log or its statuses of their own, no
    finalize step) and, on one Redis, the metrics' count of that end (no pipeline of its own after the step). An
    idempotent activity's call settles in one step: settle, finalize (which counts the end likewise). The call's
    place in its queue (admission, docs/tenants.md) is given back after the job's end by the process's admission
    thread, off the call's path, in one step with the places of the calls that ended about the same time."""
    from tests.redis_trips import RoundTrips

    harness.tool("noop", params={"i": {"type": "integer"}})
    harness.tool("noop_i", params={"i": {"type": "integer"}})
    harness.activities.register("noop", lambda call: call["i"])
    harness.activities.register("noop_i", lambda call: call["i"], idempotent=True)
    worker = _worker(harness)
    client = harness.client()
    client_store = client._parts.store  # not the worker's connection, whose round trips are counted
    given_back = lambda: not client_store.admission_counts()  # noqa: E731
    for tool, scripts in (("noop", ["claim", "commit"]), ("noop_i", ["settle", "finalize"])):
        job = {"calls": [{"_tool": tool, "i": 7, "_outputPath": "†state.r"}]}
        assert client.submit(job).result(timeout=TIMEOUT)["state"] == {"r": 7}  # the worker has the tool now
        wait_for(given_back, TIMEOUT, "the call's place to be given back")
        commands = StoreCommands(worker.runtime.store)
        trips = RoundTrips(worker.runtime.store.redis)
        assert client.submit(job).result(timeout=TIMEOUT)["state"] == {"r": 7}
        wait_for(given_back, TIMEOUT, "the call's place to be given back")
        taken = trips.take_by_thread()
        requests = [r for thread, r in taken if thread != "agentq-timers"]  # off the path (below)
        assert not [r for r in requests if "HGETALL" in r or "LRANGE" in r], requests
        # two round trips on the call's path, its two steps (the count of the job's end went in the second)
        assert [r for thread, r in taken if thread not in ("agentq-timers", "agentq-admission")] == [["EVALSHA"]] * 2
        # off the call's path: the admission thread, and the waits' timer loop polling its due timers
        ran = [(n, thread) for n, thread in commands.take_by_thread() if thread != "agentq-timers"]
        assert sorted(n for n, thread in ran if thread != "agentq-admission") == sorted(scripts)
        assert [n for n, thread in ran if thread == "agentq-admission"] == ["admission"]


def test_start_events_rendered_ahead_from_a_record_that_is_not_the_stored_one_are_not_published(harness) -> None:
    """A call that reads nothing is not validated again before its claim (it was when it was written); the
    claim publishes the start events rendered ahead only when the task's record is the stored one. A forged
    record's are dropped, and the stored call runs, validated after the claim."""
    harness.tool("strict", params={"n": {"type": "integer", "minimum": 0}})
    seen: list[int] = []

    def strict(call: dict) -> int:
        seen.append(call["n"])
        return call["n"]

    harness.activities.register("strict", strict)
    worker = _worker(harness)
    client = harness.client()
    handle = client.submit({"calls": [{"_tool": "strict", "n": 1, "_outputPath": "†state.a"}]})
    assert handle.result(timeout=TIMEOUT)["status"] == "succeeded"  # the worker knows the tool now
    executor, store = worker.runtime.executor, store_of(worker.runtime)
    held = client.submit({"calls": [{"_tool": "strict", "n": 2, "_outputPath": "†state.a"}]}, job_id="job_forged")
    held.result(timeout=TIMEOUT)
    call_id, record = next(iter(store.call_records(held.id).items()))
    store.redis.hset(store.keys(held.id).status, call_id, "ready")  # as if its task had not run yet
    store.redis.hdel(store.keys(held.id).attempts, call_id)
    store.redis.hset(store.keys(held.id).job, "status", "running")
    forged = dataclasses.replace(record, call={**record.call, "n": -5})
    assert executor.run_call(held.id, call_id, record=forged).status == "done"
    assert seen == [1, 2, 2]
    started = [e for _, e in store.read_events(held.id) if e["event"] == "call.started"]
    assert [e["part"]["tools"][0]["arguments"] for e in started] == [{"n": 2}, {"n": 2}]


def test_an_idempotent_activitys_signed_task_costs_one_round_trip_through_celery(harness):
    """Tasks sent through Celery carry the dispatcher's signature; a worker settles an idempotent activity's
    call in one store step (its claim and commit together)."""
    harness.tool("noop", params={"i": {"type": "integer"}})
    harness.activities.register("noop", lambda call: call["i"], idempotent=True)
    worker = _worker(harness)
    commands = StoreCommands(worker.runtime.store)
    client = harness.client()
    calls = [{"_tool": "noop", "i": i, "_outputPath": f"†state.r{i}"} for i in range(20)]
    for _ in range(2):
        handle = client.submit({"calls": calls})
        record = handle.result(timeout=TIMEOUT)
        assert record["status"] == "succeeded" and record["state"] == {f"r{i}": i for i in range(20)}
    counts = commands.take()
    # the first call of the first job was claimed and committed (the worker had no copy of the tool yet)
    assert counts["EVALSHA settle"] == 39 and counts["EVALSHA claim"] == 1 and counts["EVALSHA commit"] == 1
    assert counts["XADD"] == 1
    events = _events(handle)
    for call_id in {e["call_id"] for e in events if "call_id" in e}:
        assert [e["event"] for e in events if e.get("call_id") == call_id] == ["call.started", "call.finished"]


def _await_blocked_waiters(store, count: int) -> None:
    """Until `count` clients of the store's Redis are blocked waiting for a job's end (BLMOVE on its list)."""
    def blocked() -> bool:
        clients = store.redis.client_list()
        return sum(1 for c in clients if c.get("cmd") == "blmove" and "b" in c.get("flags", "")) >= count

    wait_for(blocked, TIMEOUT, f"{count} result() waiters to block on the job's end")


def test_result_wakes_up_when_the_job_ends_and_when_it_is_canceled(harness) -> None:
    gate = threading.Event()
    harness.tool("wait", params={})
    harness.activities.register("wait", lambda call: gate.wait(TIMEOUT) or "released")
    worker = _worker(harness, concurrency=2)
    client = harness.client()
    store = store_of(worker.runtime)

    handle = client.submit({"calls": [{"_tool": "wait", "_outputPath": "†state.w"}]})
    results: list[dict] = []
    waiters = [threading.Thread(target=lambda: results.append(handle.result(timeout=TIMEOUT))) for _ in range(3)]
    for waiter in waiters:
        waiter.start()
    _await_blocked_waiters(store, 3)
    gate.set()
    for waiter in waiters:
        waiter.join(TIMEOUT)
    assert [r["status"] for r in results] == ["succeeded"] * 3
    done = store.keys(handle.id).done
    assert store.redis.lrange(done, 0, -1) == ["succeeded"] and store.redis.pttl(done) > 0
    assert handle.result(timeout=1)["status"] == "succeeded"  # a later waiter finds the signal at once

    gate.clear()
    blocked = client.submit({"calls": [{"_tool": "wait", "_outputPath": "†state.w"},
                                       {"_tool": "wait", "_outputPath": "†state.v"},
                                       {"_tool": "wait", "_outputPath": "†state.u"}]})
    canceled: list[dict] = []
    waiter = threading.Thread(target=lambda: canceled.append(blocked.result(timeout=TIMEOUT)))
    waiter.start()
    _await_blocked_waiters(store, 1)
    assert blocked.cancel() == "canceled"
    waiter.join(5)
    gate.set()
    assert canceled and canceled[0]["status"] == "canceled"
    assert store.redis.lrange(store.keys(blocked.id).done, 0, -1) == ["canceled"]


def test_a_job_id_used_again_gets_its_own_tool_not_a_copy_cached_for_the_old_job(harness):
    """Workers keep a job's tool schemas between its calls; the claim checks the copy against the stored
    schema, so a job id used again (after the first job expired) with a changed tool is run with the new one."""
    from tests.integration.conftest import tool_schema

    def show(name: str) -> dict:
        return {**tool_schema("show", params={"n": {"type": "integer"}}), "x-display": {"friendly_name": name}}

    harness.tools.register("show", show("Registered"))
    harness.activities.register("show", lambda call: call["n"])
    worker = _worker(harness)
    client = harness.client()
    store = worker.runtime.store
    calls = [{"_tool": "show", "n": i, "_outputPath": f"†state.n{i}"} for i in range(3)]
    for name in ("Old name", "New name"):
        if name == "New name":
            store.redis.delete(*store.keys("job_reused").all, store.keys("job_reused").done)  # as if it expired
        handle = client.submit({"tools": [show(name)], "calls": calls}, job_id="job_reused")
        assert handle.result(timeout=TIMEOUT)["state"] == {"n0": 0, "n1": 1, "n2": 2}
        started = [e for e in _events(handle) if e["event"] == "call.started"]
        assert [e["part"]["display_info"]["friendly_name"] for e in started] == [name] * 3


def test_the_ready_calls_of_a_submission_are_published_in_pipelines_of_32(harness, monkeypatch) -> None:
    """Celery publishes a task per round trip; agentq sends a job's ready calls in kombu publish batches of
    about 32 tasks (workers start on the first while the rest are built) with their `task-sent` events, a single
    task with its event too."""
    import redis.client

    batches: list[list[str]] = []
    execute = redis.client.Pipeline.execute

    def counting_execute(self, *args, **kwargs):
        batches.append([str(command[0][0]).upper() for command in self.command_stack])
        return execute(self, *args, **kwargs)

    monkeypatch.setattr(redis.client.Pipeline, "execute", counting_execute)
    harness.tool("noop", params={"i": {"type": "integer"}})
    client = harness.client(tools=harness.tools)  # no worker: the tasks stay queued; the client knows the tool
    client.submit({"calls": [{"_tool": "noop", "i": i, "_outputPath": f"†state.r{i}"} for i in range(100)]})
    publishes = [batch for batch in batches if "LPUSH" in batch]
    assert [batch.count("LPUSH") for batch in publishes] == [32, 32, 32, 4]
    # the tasks' `task-sent` events (AGENTQ_TASK_EVENTS), one message for each batch's, travel in the same round trips
    assert [batch.count("PUBLISH") for batch in publishes] == [1, 1, 1, 1]
    assert all(set(batch) == {"LPUSH", "PUBLISH"} for batch in publishes)
    batches.clear()  # a single ready call: its task and its event, one round trip
    client.submit({"calls": [{"_tool": "noop", "i": 0, "_outputPath": "†state.r"}]})
    assert [batch for batch in batches if "LPUSH" in batch] == [["LPUSH", "PUBLISH"]]


def test_a_workers_task_events_reach_monitoring_in_groups(harness) -> None:
    """Every call's task events reach the event exchange (what Flower and `celery events` read), several to a
    `task.multi` message (a worker publishes its buffered events every TASK_EVENTS_FLUSH_S, see
    tests/runtime/test_monitoring_config.py, not on every turn of its event loop)."""
    import base64
    import json

    import redis

    harness.tool("noop", params={"i": {"type": "integer"}})
    harness.activities.register("noop", lambda call: call["i"])
    worker = _worker(harness, concurrency=2)
    client = harness.client()
    assert client.submit({"calls": [{"_tool": "noop", "i": 0, "_outputPath": "†state.r"}]}).result(
        timeout=TIMEOUT)["status"] == "succeeded"  # the worker knows the tool: the calls below run back to back
    listener = redis.Redis.from_url(harness.settings.redis_url).pubsub(ignore_subscribe_messages=True)
    listener.psubscribe("*celeryev/task.*")  # kombu's fanout of the event exchange over Redis
    try:
        handle = client.submit({"calls": [{"_tool": "noop", "i": i, "_outputPath": f"†state.r{i}"}
                                          for i in range(40)]})
        assert handle.result(timeout=TIMEOUT)["status"] == "succeeded"
        tasks = {f"{handle.id}.{call['id']}" for call in handle.calls()}
        sizes: list[int] = []  # events per message of the worker
        done: set[str] = set()

        def every_task_succeeded() -> bool:
            message = listener.get_message(timeout=0.5)  # None also for the subscription's own confirmation
            if message is not None:
                body = json.loads(base64.b64decode(json.loads(message["data"])["body"]))
                events = body if isinstance(body, list) else [body]
                if events[0]["hostname"] == worker.hostname:
                    sizes.append(len(events))
                done.update(e["uuid"] for e in events if e["type"] == "task-succeeded" and e["uuid"] in tasks)
            return done == tasks

        wait_for(every_task_succeeded, TIMEOUT, "every call's task-succeeded event",
                 on_timeout=lambda: f": {len(done)} of {len(tasks)}")
    finally:
        listener.close()
    assert max(sizes) > 1  # the worker's events went out several to a message
