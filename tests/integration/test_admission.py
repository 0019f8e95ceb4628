"""The admission of ready calls (docs/tenants.md) with real Redis and real Celery workers: one tenant's burst does not
delay another tenant's job by more than the calls already admitted; priorities order a tenant's waiting calls;
a tenant's max_running_calls holds; an admitted call whose publisher died is published by the sweep."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from agentq.errors import JobValidationError, ToolSchemaError
from agentq.protocol.admission import admission_member
from tests.integration.conftest import Harness, store_of, tool_schema
from tests.integration.procs import wait_for
from tests.integration.test_plan_jobs import start_worker


@pytest.fixture
def admitting(redis_url: str) -> Iterator[Harness]:
    """A harness whose queues admit one call at a time (so the order of waiting calls shows in their starts)."""
    h = Harness(redis_url, admission_window=1, admission_republish_s=1.0)
    try:
        yield h
    finally:
        h.close()


class Overlaps:
    """An activity's ledger: the order calls start in and the most that ran at once, per group."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.started: list[str] = []
        self.running: dict[str, int] = {}
        self.most: dict[str, int] = {}

    def run(self, name: str, group: str, seconds: float) -> None:
        with self.lock:
            self.started.append(name)
            self.running[group] = self.running.get(group, 0) + 1
            self.most[group] = max(self.most.get(group, 0), self.running[group])
        time.sleep(seconds)
        with self.lock:
            self.running[group] -= 1


class HeldQueue:
    """A `step` activity (its calls named, their starts in `ledger`) on a worker, whose queue's one place a first
    job's `hold` call holds until `gate` is set."""

    def __init__(self, admitting: Harness):
        self.ledger, self.gate = Overlaps(), threading.Event()
        admitting.tool("step", params={"name": {"type": "string"}})
        admitting.activities.register("step", self.step)
        self.client = admitting.client()
        self.store = start_worker(admitting, concurrency=2).runtime.store
        self.holder = self.client.submit({"calls": [{"_tool": "step", "name": "hold", "_outputPath": "†state.h"}]})
        wait_for(lambda: self.client.calls(self.holder.id)[0]["status"] == "running", 10, "the holder to run")

    def step(self, call: dict) -> str:
        if call["name"] == "hold":
            self.gate.wait(10)
        else:
            self.ledger.run(call["name"], "all", 0)
        return call["name"]


def test_priorities_order_the_waiting_calls_of_a_tenant(admitting: Harness):
    held = HeldQueue(admitting)
    client, first, ledger, gate = held.client, held.holder, held.ledger, held.gate

    def job(prefix: str, priority: int) -> dict:
        return {"calls": [{"_tool": "step", "name": f"{prefix}{n}", "_outputPath": f"†state.s{n}"} for n in range(3)],
                "options": {"priority": priority}}

    handles = [client.submit(job("low", 3)), client.submit(job("mid", 2)), client.submit(job("high", 1))]
    gate.set()
    for handle in [first, *handles]:
        assert handle.result(timeout=20)["status"] == "succeeded"
    assert ledger.started == ["high0", "high1", "high2", "mid0", "mid1", "mid2", "low0", "low1", "low2"]


def test_a_canceled_job_s_waiting_calls_leave_the_line(admitting: Harness):
    held = HeldQueue(admitting)
    client, store = held.client, held.store
    burst = client.submit({"calls": [{"_tool": "step", "name": f"a{n}", "_outputPath": f"†state.a{n}"}
                                     for n in range(20)]})
    parked = store.redis.hkeys("agentq:{admission}:parked")  # type: ignore[attr-defined]
    assert len([m for m in parked if m.startswith(burst.id)]) == 20
    assert burst.cancel() == "canceled"
    wait_for(lambda: not store.redis.hkeys("agentq:{admission}:parked"), 5,  # type: ignore[attr-defined]
             "the canceled job's calls to leave the line")
    after = client.submit({"calls": [{"_tool": "step", "name": f"b{n}", "_outputPath": f"†state.b{n}"}
                                     for n in range(2)]})
    held.gate.set()
    assert after.result(timeout=20)["status"] == "succeeded"
    assert held.ledger.started == ["b0", "b1"]
    wait_for(lambda: store.admission_counts() == {} and store.parked_queues() == [], 5, "the line to be empty")


def test_a_tenant_s_max_running_calls_is_never_exceeded_while_others_go_ahead(redis_url: str):
    harness = Harness(redis_url, tenants={"capped": {"max_running_calls": 2}})
    try:
        ledger = Overlaps()
        harness.tool("work", params={"group": {"type": "string"}})

        def work(call: dict) -> int:
            ledger.run(call["group"], call["group"], 0.1)
            return 1

        harness.activities.register("work", work)
        start_worker(harness, concurrency=6)
        jobs = {tenant: harness.client(tenant=tenant).submit(
            {"calls": [{"_tool": "work", "group": tenant, "_outputPath": f"†state.w{n}"} for n in range(10)]})
            for tenant in ("capped", "free")}
        for handle in jobs.values():
            assert handle.result(timeout=30)["status"] == "succeeded"
        assert ledger.most["capped"] == 2
        assert ledger.most["free"] > 2  # the window's other places went to the other tenant
        store = harness.runtime().store
        wait_for(lambda: store.admission_counts() == {}, 5, "every place to be given back")
    finally:
        harness.close()


def test_an_admitted_call_its_publisher_never_sent_is_published_by_the_sweep(admitting: Harness,
                                                                            monkeypatch: pytest.MonkeyPatch):
    admitting.tool("echo", params={"x": {"type": "integer"}})
    admitting.activities.register("echo", lambda call: call["x"])
    client = admitting.client()
    worker = start_worker(admitting)
    store = worker.runtime.store
    dispatcher = client._parts.dispatcher
    # the submitting process dies after the admission, before publishing
    monkeypatch.setattr(dispatcher, "publish", lambda calls: None)
    handle = client.submit({"calls": [{"_tool": "echo", "x": 7, "_outputPath": "†state.x"}]})
    call_id = client.calls(handle.id)[0]["id"]
    assert store.admitted_before(2**53) == [admission_member(handle.id, call_id)]
    assert handle.result(timeout=20)["state"] == {"x": 7}  # the worker's sweep sent it after 1 s
    wait_for(lambda: store.admitted_before(2**53) == [], 5, "its place to be given back (after the job's end)")


def test_an_unknown_priority_is_refused_with_its_pointer(harness: Harness):
    harness.tool("echo", params={"x": {"type": "integer"}})
    with pytest.raises(JobValidationError) as raised:
        harness.client().submit({"calls": [], "options": {"priority": 0}})
    assert [p.pointer for p in raised.value.problems] == ["/options/priority"]
    assert "expected 1, 2 or 3" in raised.value.problems[0].message


@pytest.mark.exclusive
def test_one_tenant_s_burst_does_not_hold_up_another_tenant_s_job(harness: Harness, worker_procs):
    """Tenant a submits 2,000 calls of a 50 ms activity served by one `agentq worker` process with two slots (40
    calls a second: the burst takes 50 s); then tenant b submits a three-call job. Published at once (Celery's
    FIFO), b's calls would wait behind a's 2,000; admitted, they wait behind the window's few calls only."""
    proc = worker_procs.start(["procSlow"], pool="threads", concurrency=2)
    worker_procs.wait_live(proc, ["procSlow"])
    client_a, client_b = harness.client(tenant="a"), harness.client(tenant="b")
    store = store_of(harness.runtime())
    burst = client_a.submit({"calls": [{"_tool": "procSlow", "seconds": 0.05, "tag": "a", "_outputPath": f"†state.a{n}"}
                                       for n in range(2000)]})
    wait_for(lambda: int(store.redis.get("procs:runs:procSlow:a") or 0) >= 40, 20, "tenant a's burst to be running")
    runs_before, started = int(store.redis.get("procs:runs:procSlow:a")), time.monotonic()
    job = client_b.submit({"calls": [{"_tool": "procSlow", "seconds": 0.05, "tag": "b", "_outputPath": f"†state.b{n}"}
                                     for n in range(3)]})
    assert job.result(timeout=20)["status"] == "succeeded"
    took = time.monotonic() - started
    rate = (int(store.redis.get("procs:runs:procSlow:a")) - runs_before) / took
    print(f"tenant b's job finished {took:.2f} s after its submission; tenant a ran {rate:.1f} calls/s meanwhile")
    assert took < 2.0
    assert burst.cancel() == "canceled"
    counts = store.admission_counts()
    assert counts.get("q:agentq.activity.procSlow", 0) <= 2 + 16  # 2 slots + the prefetch, never the whole burst


def _keyed_tool(harness: Harness, key: str, limit: int = 1) -> None:
    schema = tool_schema("charge", params={"n": {"type": "integer"}})
    schema["x-concurrency"] = {"key": key, "limit": limit}
    harness.tools.register("charge", schema)


def test_a_concurrency_key_with_limit_one_never_runs_two_calls_at_once(harness: Harness):
    """Calls of a tool with `x-concurrency: {"key": "†input.account", "limit": 1}`: the activity keeps a ledger in
    Redis of how many of its account's calls run as each starts; another account's calls run beside them."""
    _keyed_tool(harness, "†input.account")
    redis = store_of(harness.runtime()).redis

    def charge(call: dict) -> int:
        account = call["n"] // 100  # 1: acme's calls, 2: globex's
        running = redis.incr(f"running:{account}")
        redis.rpush(f"ledger:{account}", running)
        time.sleep(0.05)
        redis.decr(f"running:{account}")
        return call["n"]

    harness.activities.register("charge", charge)
    start_worker(harness, concurrency=6)
    client = harness.client()
    jobs = [client.submit({"context": [{"type": "data", "kind": "input", "data": {"account": account}}],
                           "calls": [{"_tool": "charge", "n": base + n, "_outputPath": f"†state.c{n}"}
                                     for n in range(6)]})
            for account, base in (("acme", 100), ("globex", 200))]
    for handle in jobs:
        assert handle.result(timeout=30)["status"] == "succeeded"
    for account in (1, 2):
        ledger = [int(n) for n in redis.lrange(f"ledger:{account}", 0, -1)]
        assert len(ledger) == 6 and max(ledger) == 1, ledger


def test_a_malformed_x_concurrency_is_refused_at_registration_with_its_pointer(harness: Harness):
    with pytest.raises(ToolSchemaError) as raised:
        _keyed_tool(harness, "", limit=0)
    assert raised.value.pointer == "/x-concurrency/key"
    assert "at /x-concurrency/limit" in str(raised.value)


def test_a_key_the_context_gives_as_no_string_is_refused_at_submission(harness: Harness):
    _keyed_tool(harness, "†input.account")
    harness.activities.register("charge", lambda call: call["n"])
    start_worker(harness)
    with pytest.raises(JobValidationError) as raised:
        harness.client().submit({"context": [{"type": "data", "kind": "input", "data": {"account": 42}}],
                                 "calls": [{"_tool": "charge", "n": 1, "_outputPath": "†state.c"}]})
    assert [p.pointer for p in raised.value.problems] == ["/calls/0"]
    assert "x-concurrency" in raised.value.problems[0].message and "not a string" in raised.value.problems[0].message
