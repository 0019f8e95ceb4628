"""Reliability: exactly-once commits under duplicate delivery, worker crashes, cancellation, job TTL.

Crash tests run real `agentq worker` processes (see `procs.py`) with short timings: heartbeat 1 s, lease 2 s,
broker visibility timeout 3 s. The others use in-process workers (`harness`) or the executor directly.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter

import pytest

from agentq.client import Client
from agentq.protocol.status import CallStatus
from agentq.store.fleet import RedisFleet
from agentq.store.replies import CommitDuplicate
from agentq.store.tenants import RedisTenants
from tests.integration.procs import cli, wait_for

TEST_TIMEOUT_S = 60
pytestmark = pytest.mark.timeout(TEST_TIMEOUT_S)
# A gated handler waits until its test opens the gate, however long the test's steps take (a CLI run in a loaded
# machine takes seconds); the bound only frees the handler's thread of a test that failed before opening it.
GATE_S = TEST_TIMEOUT_S


def _events(store, job_id: str) -> list[dict]:
    return [envelope for _, envelope in store.read_events(job_id)]


def _call_ids(store, job_id: str) -> dict[str, str]:
    """Tool name -> call id (each test job calls a tool once)."""
    return {record.tool: call_id for call_id, record in store.call_records(job_id).items()}


def _outputs(store, job_id: str) -> Counter:
    """How many log messages each call wrote."""
    return Counter(m["_call"]["id"] for m in store.read_log(job_id) if m.get("_call"))


def _per_call(events: list[dict], name: str) -> Counter:
    return Counter(e["call_id"] for e in events if e["event"] == name)


# ------------------------------------------------------------------------- crash of a worker process


def _slow_job(tag: str, seconds: float = 2.5) -> dict:
    return {"context": [{"type": "state", "data": {"before": True}}],
            "calls": [{"_tool": "procSlow", "seconds": seconds, "tag": tag, "_outputPath": "†state.slow"}]}


def _started_pid(store, tag: str) -> int:
    """Wait for the first start of procSlow with `tag` and return the pid of the process running it."""
    return int(wait_for(lambda: store.redis.lindex(f"procs:pids:procSlow:{tag}", 0), 15,
                        f"procSlow[{tag}] to start"))


def _assert_one_result_two_attempts(store, job_id: str, record: dict, tag: str) -> None:
    assert record["status"] == "succeeded", record
    call_id = _call_ids(store, job_id)["procSlow"]
    assert store.redis.get(f"procs:runs:procSlow:{tag}") == "2"  # the handler started twice ...
    assert _outputs(store, job_id) == {call_id: 1}  # ... and its result was committed once
    assert record["state"]["slow"]["start"] == 2 and record["state"]["before"] is True
    events = _events(store, job_id)
    assert [e["attempt"] for e in events if e["event"] == "call.started"] == [1, 2]
    finished = [e for e in events if e["event"] == "call.finished"]
    assert [e["status"] for e in finished] == ["done"]
    assert [e["status"] for e in events if e["event"] == "job.finished"] == ["succeeded"]
    assert store.redis.hget(store.keys(job_id).attempts, call_id) == "2"


def test_sigkill_mid_activity_redelivers_to_another_worker_which_commits_once(worker_procs, redis_url,
                                                                             record_property):
    """The killed worker's call is sent again by the admission's sweep of the other worker (its task, on the
    store's Redis, not kept unacknowledged: held nowhere once the worker died, the call running with its lease
    gone), which takes the call over; the result is written once. (A task noted unacknowledged comes back after
    the visibility timeout: test_unacked_restore.py.)"""
    workers = [worker_procs.start(["procSlow"]), worker_procs.start(["procSlow"])]
    for proc in workers:
        worker_procs.wait_live(proc, ["procSlow"])
    store = worker_procs.store
    with Client(redis_url) as client:
        handle = client.submit(_slow_job("kill"))
        wait_for(lambda: any(e["event"] == "call.started" for e in _events(store, handle.id)), 15, "call.started")
        pid = _started_pid(store, "kill")
        victim = next(p for p in workers if p.pid == pid)
        survivor = next(p for p in workers if p is not victim)
        killed_at = time.monotonic()
        victim.kill()
        record = handle.result(timeout=25)
        recovered_in = time.monotonic() - killed_at
    record_property("kill_to_job_end_s", round(recovered_in, 2))
    _assert_one_result_two_attempts(store, handle.id, record, "kill")
    assert record["state"]["slow"]["pid"] == survivor.pid
    assert [int(p) for p in store.redis.lrange("procs:pids:procSlow:kill", 0, -1)] == [victim.pid, survivor.pid]
    assert survivor.alive()
    assert recovered_in < 15, f"recovery took {recovered_in:.1f} s"


def test_sigkill_of_a_prefork_child_requeues_at_once(worker_procs, redis_url, record_property):
    """Killing the pool child (not the main process): reject_on_worker_lost puts the task back at once, so
    recovery does not wait for the visibility timeout (set to 60 s here to prove it)."""
    proc = worker_procs.start(["procSlow"], pool="prefork", concurrency=2, AGENTQ_VISIBILITY_TIMEOUT_S="60")
    worker_procs.wait_live(proc, ["procSlow"])
    store = worker_procs.store
    with Client(redis_url) as client:
        handle = client.submit(_slow_job("child"))
        child = _started_pid(store, "child")
        assert child != proc.pid  # the handler runs in a pool child
        killed_at = time.monotonic()
        os.kill(child, signal.SIGKILL)
        record = handle.result(timeout=20)
        recovered_in = time.monotonic() - killed_at
    record_property("kill_to_job_end_s", round(recovered_in, 2))
    _assert_one_result_two_attempts(store, handle.id, record, "child")
    assert record["state"]["slow"]["pid"] not in (child, proc.pid)
    assert proc.alive()
    assert recovered_in < 12, f"recovery took {recovered_in:.1f} s"


# ------------------------------------------------------------------ duplicate delivery, exactly once


class _Counting:
    """The real dispatcher, counting the calls it is asked to send (made ready, not the waiting calls an end lets
    through)."""

    def __init__(self, real, dispatched: list[str]) -> None:
        self.real, self.dispatched = real, dispatched

    def __call__(self, job_id: str, records: list) -> None:
        self.dispatched.extend(r.id for r in records)
        self.real(job_id, records)

    def ended(self, job_id: str, call_ids: list[str], released: list) -> None:
        self.dispatched.extend(r.id for r in released)
        self.real.ended(job_id, call_ids, released)

    def tick(self, job_id: str, n: int = 0) -> None:
        self.real.tick(job_id, n)


class _Recorder:
    """A dispatcher that records the call ids it was asked to send instead of sending them."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def __call__(self, job_id: str, records: list) -> None:
        self.sent += [r.id for r in records]

    def tick(self, job_id: str, n: int = 0) -> None:  # pragma: no cover - plan jobs only here
        raise AssertionError("no agent ticks expected")

    def ended(self, job_id: str, call_ids: list[str], released: list) -> None:
        self(job_id, released)

    def revoke(self, job_id: str, call_ids: list[str], run: int = 1) -> None:
        pass


CHAIN = {"context": [{"type": "state", "data": {"x": 1}}],
         "calls": [{"_tool": "first", "x": "†state.x", "_outputPath": "†state.a"},
                   {"_tool": "second", "y": "†state.a", "_outputPath": "†state.b"}]}


def _chain_tools(harness, runs: Counter, gates: dict[str, threading.Event] | None = None,
                 sleep_s: float = 0.0) -> None:
    harness.tool("first", params={"x": {"type": "number"}})
    harness.tool("second", params={"y": {"type": "number"}})

    def handler(name: str, fn):
        def run(call):
            runs[name] += 1
            if gates and name in gates:
                assert gates[name].wait(GATE_S), f"{name} was never released"
            time.sleep(sleep_s)
            return fn(call)
        return run

    harness.activities.register("first", handler("first", lambda call: call["x"] + 1))
    harness.activities.register("second", handler("second", lambda call: call["y"] * 2))


def _assert_exactly_once(store, job_id: str, ids: dict[str, str]) -> None:
    assert _outputs(store, job_id) == {ids["first"]: 1, ids["second"]: 1}
    events = _events(store, job_id)
    expected = {ids["first"]: 1, ids["second"]: 1}
    assert _per_call(events, "call.started") == expected
    assert _per_call(events, "call.finished") == expected
    assert [e["status"] for e in events if e["event"] == "job.finished"] == ["succeeded"]
    assert store.record(job_id).state == {"x": 1, "a": 2, "b": 4}


def test_redelivered_activity_tasks_write_once_and_dispatch_successors_once(harness) -> None:
    """A's task sent again by hand: while A runs (B pending), after A committed (B running), after the job
    ended. The handlers run once, each call writes one output, B is dispatched once."""
    from celery.signals import task_postrun

    runs: Counter = Counter()
    gates = {"first": threading.Event(), "second": threading.Event()}
    _chain_tools(harness, runs, gates)
    worker = harness.worker()
    runtime, store = worker.runtime, worker.runtime.store
    dispatched: list[str] = []
    real_dispatch = runtime.executor.progress.dispatch

    runtime.executor.progress.dispatch = _Counting(real_dispatch, dispatched)
    finished: dict[str, list[tuple[str, object]]] = {}

    def on_postrun(task_id=None, retval=None, state=None, **_):
        finished.setdefault(task_id, []).append((state, retval))

    def redeliver(job_id: str, call_id: str, tool: str, task_id: str) -> None:
        runtime.app.send_task(f"agentq.activity.{tool}", args=[job_id, call_id, True],
                              queue=f"agentq.activity.{tool}", task_id=task_id)

    def wait_outcome(task_id: str, outcome: str) -> None:
        wait_for(lambda: (finished.get(task_id) or [("", None)])[-1] == ("SUCCESS", outcome), 15,
                 f"{task_id} to end with {outcome}", on_timeout=lambda: f": {finished.get(task_id)}")

    task_postrun.connect(on_postrun, weak=False)
    try:
        handle = harness.client().submit(CHAIN)
        job_id = handle.id
        ids = _call_ids(store, job_id)
        wait_for(lambda: _per_call(_events(store, job_id), "call.started")[ids["first"]], 10, "A to start")

        # 1. while A runs and B is pending: the duplicate finds A leased and retries later
        redeliver(job_id, ids["first"], "first", "dup-while-running")
        wait_for(lambda: any(s == "RETRY" for s, _ in finished.get("dup-while-running", [])), 10,
                 "the duplicate to find A leased")
        assert store.call_statuses(job_id) == {ids["first"]: "running", ids["second"]: "pending"}
        gates["first"].set()

        # 2. after A committed, while B runs: the duplicate finds A finished and sends nothing
        wait_for(lambda: _per_call(_events(store, job_id), "call.started")[ids["second"]], 10, "B to start")
        redeliver(job_id, ids["first"], "first", "dup-after-commit")
        wait_outcome("dup-after-commit", "finished")
        wait_outcome("dup-while-running", "finished")
        gates["second"].set()
        record = handle.result(timeout=15)
        assert record["status"] == "succeeded", record

        # 3. after the job ended: duplicates of both calls change nothing
        redeliver(job_id, ids["first"], "first", "dup-after-job-a")
        redeliver(job_id, ids["second"], "second", "dup-after-job-b")
        wait_outcome("dup-after-job-a", "finished")
        wait_outcome("dup-after-job-b", "finished")
    finally:
        task_postrun.disconnect(on_postrun)
        for gate in gates.values():
            gate.set()

    assert runs == {"first": 1, "second": 1}
    assert dispatched == [ids["second"]]  # B's task was sent once, by A's commit
    _assert_exactly_once(store, job_id, ids)
    assert store.record(job_id).to_dict() == record


def test_run_call_is_idempotent_and_a_concurrent_duplicate_runs_the_handler_once(harness, redis_url) -> None:
    """No Celery: two executors (two processes' worth) race for one ready call; finished calls run again."""
    from agentq.engine.executor import Executor
    from agentq.engine.routing import Routing
    from agentq.runtime.service import JobService
    from agentq.store.state import StateStore

    runs: Counter = Counter()
    _chain_tools(harness, runs, sleep_s=0.3)
    store = StateStore(redis_url)
    recorder = _Recorder()
    service = JobService(store, recorder, settings=harness.settings, routing=Routing.from_settings(harness.settings),
                         tools=harness.tools, activities=harness.activities, local_activities_are_live=True,
                         fleet=RedisFleet(store), tenants=RedisTenants(store))
    settings = harness.settings.model_copy(update={"lease_s": 3})
    executors = [Executor(store, harness.activities, recorder, settings=settings) for _ in range(2)]
    try:
        job_id = service.submit(CHAIN)
        ids = _call_ids(store, job_id)
        assert recorder.sent == [ids["first"]]

        barrier = threading.Barrier(2)
        outcomes: list[str] = []

        def race(executor: Executor) -> None:
            barrier.wait()
            outcomes.append(executor.run_call(job_id, ids["first"]).status)

        threads = [threading.Thread(target=race, args=(e,)) for e in executors]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        assert sorted(outcomes) == ["done", "leased"]
        assert runs == {"first": 1}
        assert recorder.sent == [ids["first"], ids["second"]]  # A's commit released B once

        assert executors[1].run_call(job_id, ids["second"]).status == "done"
        assert store.job_status(job_id) == "succeeded"
        for executor in executors:  # duplicates of finished calls: nothing runs, nothing is sent
            for call_id in (ids["first"], ids["second"], ids["first"]):
                assert executor.run_call(job_id, call_id).status == "finished"
        assert runs == {"first": 1, "second": 1}
        assert recorder.sent == [ids["first"], ids["second"]]
        _assert_exactly_once(store, job_id, ids)

        # the store itself refuses a second commit, whatever the token
        log_length = store.redis.llen(store.keys(job_id).log)
        again = store.commit(job_id, ids["first"], token="another-attempt", status=CallStatus.DONE,
                             messages=[{"type": "data", "kind": "state", "data": {"a": 99}}])
        assert again.outcome == "duplicate" and isinstance(again, CommitDuplicate)  # a duplicate releases nothing
        assert store.redis.llen(store.keys(job_id).log) == log_length
    finally:
        for executor in executors:
            executor.leases.stop()
        store.redis.close()


def test_an_attempt_whose_lease_was_taken_over_cannot_commit(harness, redis_url):
    """Store level: once a call's lease expired and another attempt claimed it, the first attempt's commit
    is refused (`superseded`) and only the new attempt's result is written."""
    from agentq.engine.routing import Routing
    from agentq.runtime.service import JobService
    from agentq.store.state import StateStore

    harness.tool("first", params={"x": {"type": "number"}})
    harness.activities.register("first", lambda call: call["x"])
    store = StateStore(redis_url)
    service = JobService(store, _Recorder(), settings=harness.settings,
                         routing=Routing.from_settings(harness.settings), tools=harness.tools,
                         activities=harness.activities, local_activities_are_live=True,
                         fleet=RedisFleet(store), tenants=RedisTenants(store))
    try:
        job_id = service.submit({"calls": [{"_tool": "first", "x": 1, "_outputPath": "†state.a"}]})
        call_id = _call_ids(store, job_id)["first"]
        first = store.claim(job_id, call_id, token="t1", lease_ms=100)
        assert (first.outcome, first.attempt) == ("claimed", 1)
        assert store.claim(job_id, call_id, token="t2", lease_ms=100).outcome == "leased"
        time.sleep(0.15)
        second = store.claim(job_id, call_id, token="t2", lease_ms=5000)
        assert (second.outcome, second.attempt) == ("claimed", 2)

        def output(value: int) -> list[dict]:
            return [{"type": "data", "kind": "state", "data": {"a": value}, "_path": "†state.a"}]

        def commit(token: str, value: int) -> str:
            return store.commit(job_id, call_id, token=token, status=CallStatus.DONE, messages=output(value)).outcome

        assert commit("t1", 1) == "superseded"
        assert commit("t2", 2) == "committed"
        assert commit("t1", 1) == "duplicate"
        assert store.read_log(job_id) == output(2)
    finally:
        store.redis.close()


# ---------------------------------------------------------------------------------------- cancellation


def _cancel_tools(harness, runs: Counter, gate: threading.Event) -> None:
    harness.tool("slow", params={"n": {"type": "number"}})
    harness.tool("after", params={"v": {}})
    harness.tool("nobody", params={"n": {"type": "number"}}, _activity={"type": "string", "const": "nobody"})

    def slow(call):
        runs["slow"] += 1
        assert gate.wait(GATE_S), "slow was never released"
        return call["n"]

    def after(call):
        runs["after"] += 1
        return call["v"]

    harness.activities.register("slow", slow)
    harness.activities.register("after", after)


CANCEL_JOB = {"calls": [
    {"_tool": "slow", "n": 1, "_outputPath": "†state.slow"},
    {"_tool": "after", "v": "†state.slow", "_outputPath": "†state.after1"},
    {"_tool": "after", "v": "†state.after1", "_outputPath": "†state.after2"},
    {"_tool": "nobody", "n": 2, "_outputPath": "†state.nobody"},  # ready, but no live worker serves it
]}


def _statuses_by_path(store, job_id: str) -> dict[str, str]:
    records, statuses = store.call_records(job_id), store.call_statuses(job_id)
    return {records[c].call["_outputPath"]: s for c, s in statuses.items()}


def test_cancel_stops_dispatching_and_marks_pending_calls_canceled(harness) -> None:
    runs: Counter = Counter()
    gate = threading.Event()
    _cancel_tools(harness, runs, gate)
    worker = harness.worker()
    store = worker.runtime.store
    dispatched: list[str] = []
    real_dispatch = worker.runtime.executor.progress.dispatch
    worker.runtime.executor.progress.dispatch = _Counting(real_dispatch, dispatched)
    client = harness.client()
    handle = client.submit(CANCEL_JOB)
    slow_id = next(c for c, r in store.call_records(handle.id).items() if r.tool == "slow")
    try:
        wait_for(lambda: _per_call(_events(store, handle.id), "call.started")[slow_id], 10, "slow to start")
        assert handle.cancel() == "canceled"
        assert handle.status() == "canceled"
        assert _statuses_by_path(store, handle.id) == {
            "†state.slow": "running", "†state.after1": "canceled", "†state.after2": "canceled",
            "†state.nobody": "canceled"}
    finally:
        gate.set()  # the running call finishes; its commit must release nothing
    wait_for(lambda: _statuses_by_path(store, handle.id)["†state.slow"] == "done", 10, "slow to commit")

    nobody = type(harness.activities)()
    nobody.register("nobody", lambda call: runs.update(["nobody"]) or call["n"])
    harness.worker(activities=nobody, engine=False)  # a worker for the queued task arrives after the cancel
    time.sleep(1.0)

    assert runs == {"slow": 1}
    assert dispatched == []  # the running call's commit after the cancel released nothing
    events = _events(store, handle.id)
    assert set(_per_call(events, "call.started")) == {slow_id}
    assert [e["status"] for e in events if e["event"] == "job.finished"] == ["canceled"]
    assert handle.status() == "canceled"
    record = handle.result(timeout=1)
    assert record["status"] == "canceled" and record["finished_at"]
    assert "after1" not in record["state"] and "nobody" not in record["state"]
    assert handle.cancel() == "canceled"  # cancelling again reports the final status
    assert store.call_statuses(handle.id)[slow_id] == "done"


def test_cancel_from_the_cli(harness, redis_url) -> None:
    runs: Counter = Counter()
    gate = threading.Event()
    _cancel_tools(harness, runs, gate)
    worker = harness.worker()
    store = worker.runtime.store
    handle = harness.client().submit(CANCEL_JOB)
    try:
        wait_for(lambda: runs["slow"], 10, "slow to start")
        done = cli(redis_url, "cancel", handle.id)
        assert (done.returncode, done.stdout.strip(), done.stderr) == (0, "canceled", ""), done
        assert store.job_status(handle.id) == "canceled"
        assert _statuses_by_path(store, handle.id)["†state.after2"] == "canceled"
        again = cli(redis_url, "cancel", handle.id)
        assert (again.returncode, again.stdout.strip()) == (0, "canceled"), again
        missing = cli(redis_url, "cancel", "job_missing")
        assert missing.returncode == 1 and missing.stdout == ""
        assert missing.stderr.count("\n") == 1 and "job_missing" in missing.stderr, missing.stderr
    finally:
        gate.set()
    wait_for(lambda: store.call_statuses(handle.id)[
        next(c for c, r in store.call_records(handle.id).items() if r.tool == "slow")] == "done", 10, "slow")
    assert runs == {"slow": 1}


# ------------------------------------------------------------------------------------------- job TTL


def test_every_key_of_a_job_expires_within_its_ttl(harness) -> None:
    """Including keys created after submission: the log (first RPUSH at a commit, the job having no context)
    and the attempts hash (first HINCRBY at a claim)."""
    runs: Counter = Counter()
    harness.tool("first", params={"x": {"type": "number"}})
    harness.tool("second", params={"y": {"type": "number"}})
    harness.activities.register("first", lambda call: call["x"] + 1)
    harness.activities.register("second", lambda call: call["y"] * 2)
    worker = harness.worker()
    store = worker.runtime.store
    ttl_s = 60
    record = harness.run({"calls": [{"_tool": "first", "x": 1, "_outputPath": "†state.a"},
                                    {"_tool": "second", "y": "†state.a", "_outputPath": "†state.b"}],
                          "options": {"ttl_s": ttl_s}})
    assert record["status"] == "succeeded" and record["state"] == {"a": 2, "b": 4}, record
    keys = sorted(store.redis.scan_iter(match=f"agentq:{{{record['id']}}}:*"))
    job_keys = store.keys(record["id"])
    assert {job_keys.job, job_keys.log, job_keys.attempts, job_keys.events} <= set(keys), keys
    assert not any(":lease:" in key for key in keys), keys  # leases are gone once their calls committed
    ttls = {key: store.redis.pttl(key) for key in keys}
    assert all(0 < ttl <= ttl_s * 1000 for ttl in ttls.values()), ttls
    assert max(ttls.values()) - min(ttls.values()) < 5000, ttls  # they all expire together
    assert runs == Counter()
