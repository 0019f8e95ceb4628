"""Outages, poison calls and late outcomes, with real `agentq worker` processes.

- The state Redis (append-only file on) is stopped for 8 s in the middle of a job, then started again on the
  same port with its data: the job succeeds, each call writes one output, and each activity (a card charge
  that keeps its own ledger file, outside the store) ran once — also those that were running when the store
  went away, whose results the workers held until the store came back. The broker is another Redis, the
  state Redis itself (the broker goes away too), or the local RabbitMQ.
- A poison call (its activity ends the process running it) stops after AGENTQ_MAX_DELIVERIES deliveries and
  fails with an error saying so; the job ends.
- A call still running when its job is canceled finishes: its output and its `call.finished` event are
  recorded, marked as arriving after the cancel.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from agentq.client import Client
from agentq.embedded import RedisServer
from agentq.errors import JobTimeoutError
from tests.integration.procs import WorkerProcs, wait_for
from tests.integration.rabbitmq import AmqpNames

pytestmark = pytest.mark.timeout(120)

OUTAGE_S = 8.0


def _events(store, job_id: str) -> list[tuple[str, dict]]:
    return store.read_events(job_id)


def _outputs(store, job_id: str) -> Counter:
    """How many log messages each call wrote."""
    return Counter(m["_call"]["id"] for m in store.read_log(job_id) if m.get("_call"))


# -------------------------------------------------------------------------------- the state store goes away


@pytest.fixture
def state_redis() -> Iterator[RedisServer]:
    """A private state Redis of its own (the session's serves as the broker), with its append-only file on."""
    server = RedisServer(appendonly=True).start()
    try:
        yield server
    finally:
        server.stop()


def _ledger(path: Path) -> list[tuple[str, str, float]]:
    """(start|end, tag, unix time) of each line the charges wrote."""
    if not path.exists():
        return []
    lines = [line.split() for line in path.read_text().splitlines() if line.strip()]
    return [(kind, tag, float(at)) for kind, tag, _pid, at in lines]


def _outage_job(n: int, seconds: float) -> dict:
    """`n` charges, then `n // 2` more that each wait on one of the first (released during the outage)."""
    first = [{"_tool": "procCharge", "seconds": seconds, "tag": f"c{i}", "_outputPath": f"†state.charges.c{i}"}
             for i in range(n)]
    second = [{"_tool": "procCharge", "seconds": seconds / 2, "tag": f"d{i}", "after": f"†state.charges.c{i}",
               "_outputPath": f"†state.charges.d{i}"} for i in range(n // 2)]
    return {"context": [{"type": "state", "data": {"charges": {}}}], "calls": first + second}


@dataclass(frozen=True)
class Broker:
    url: str
    env: dict[str, str] = field(default_factory=dict)  # what the workers need besides AGENTQ_BROKER_URL


# the same-redis variant runs alone: with other tests loading the machine, a task a worker takes from the broker
# just as the server stops can be lost (neither queued nor unacknowledged after the restart; docs/reliability.md)
@pytest.fixture(params=["separate-redis", pytest.param("same-redis", marks=pytest.mark.exclusive), "rabbitmq"])
def broker(request: pytest.FixtureRequest, state_redis: RedisServer) -> Broker:
    """Where the tasks go: the session's private Redis (a server of its own), the state Redis itself, or the
    RabbitMQ (`tests/integration/rabbitmq.py`), on queues of this test's own."""
    if request.param == "separate-redis":
        return Broker(str(request.getfixturevalue("redis_url")))
    if request.param == "same-redis":
        return Broker(state_redis.url)
    names: AmqpNames = request.getfixturevalue("amqp_names")
    names.activity("procCharge")
    return Broker(names.url, {"AGENTQ_ENGINE_QUEUE": names.queue("engine"), "PROCS_QUEUE_PREFIX": names.prefix})


def _broker_holds(url: str) -> str:
    """What a Redis broker holds of the charges' tasks: on their queue, and taken but not acknowledged."""
    if not url.startswith("redis://"):
        return ""
    import redis

    with redis.Redis.from_url(url) as client:
        return f"broker: {client.llen('agentq.activity.procCharge')} queued, {client.hlen('unacked')} unacknowledged"


def test_a_state_store_outage_loses_nothing_and_runs_nothing_twice(
        state_redis: RedisServer, broker: Broker, tmp_path: Path, record_property):
    ledger = tmp_path / "ledger.txt"
    procs = WorkerProcs(state_redis.url, tmp_path)
    # prefetch 1: with the broker on the state Redis, tasks a worker prefetched but had not started when the
    # connection dropped could only come back after the visibility timeout (see docs/reliability.md)
    # republish 30 s: with the broker on the state Redis, a task taken off its queue in the instant the server
    # stopped is lost to the broker; the admission's sweep publishes its call again (docs/reliability.md)
    env = {**broker.env, "AGENTQ_BROKER_URL": broker.url, "PROCS_LEDGER": str(ledger), "AGENTQ_LEASE_S": "30",
           "AGENTQ_VISIBILITY_TIMEOUT_S": "300", "AGENTQ_STORE_RETRY_S": "120", "AGENTQ_PREFETCH_MULTIPLIER": "1",
           "AGENTQ_ADMISSION_REPUBLISH_S": "30"}
    try:
        workers = [procs.start(["procCharge"], concurrency=3, **env) for _ in range(2)]
        for proc in workers:
            procs.wait_live(proc, ["procCharge"])
        job = _outage_job(12, 2.0)
        with Client(state_redis.url, broker_url=broker.url) as client:
            handle = client.submit(job)
            # the store goes away while the first charges run: they end during the outage
            wait_for(lambda: sum(1 for kind, *_ in _ledger(ledger) if kind == "start") >= 3, 30,
                     "the first charges to start")
            stopped_at = time.time()
            state_redis.halt()
            time.sleep(OUTAGE_S)  # the outage itself (what is asserted is awaited below)
            assert all(proc.alive() for proc in workers)
            state_redis.start()
            back_at = time.time()
            try:
                record = handle.result(timeout=90)
            except JobTimeoutError as error:
                calls = procs.store.call_statuses(handle.id)
                pytest.fail(f"{error}; calls: {Counter(calls.values())}; {_broker_holds(broker.url)}\n"
                            "--- worker logs ---\n"
                            + "\n".join(proc.output()[-4000:] for proc in workers), pytrace=False)
            ended_at = time.time()
            store = procs.store
            entries = _events(store, handle.id)
            records = store.call_records(handle.id)
        logs = "\n".join(proc.output() for proc in workers)
    finally:
        procs.close()

    assert record["status"] == "succeeded", record
    assert set(record["state"]["charges"]) == {f"c{i}" for i in range(12)} | {f"d{i}" for i in range(6)}
    # exactly one output per call
    assert _outputs(store, handle.id) == Counter({call_id: 1 for call_id in records})
    finished = Counter(e["call_id"] for _, e in entries if e["event"] == "call.finished")
    assert finished == Counter({call_id: 1 for call_id in records})
    assert [e["status"] for _, e in entries if e["event"] == "job.finished"] == ["succeeded"]
    # each charge ran once, those the outage hit while they ran included
    lines = _ledger(ledger)
    starts = Counter(tag for kind, tag, _ in lines if kind == "start")
    ends = Counter(tag for kind, tag, _ in lines if kind == "end")
    assert starts == ends == Counter({tag: 1 for tag in record["state"]["charges"]}), lines
    started = {tag: at for kind, tag, at in lines if kind == "start"}
    ended = {tag: at for kind, tag, at in lines if kind == "end"}
    held = sorted(tag for tag in started if started[tag] < stopped_at < ended[tag] < back_at)
    assert held, f"no charge was running when the store stopped: {lines}"
    # what the workers said about the outage
    retried = re.findall(r"state store reachable again: (\w+) of (\S+) ?(\S*) went through", logs)
    assert any(step == "commit" for step, *_ in retried), logs[-3000:]
    assert "handed back" not in logs, logs[-3000:]  # no step needed more than the retry window
    first_commit_after = min(int(entry_id.split("-")[0]) / 1000 for entry_id, e in entries
                             if e["event"] == "call.finished" and int(entry_id.split("-")[0]) / 1000 >= back_at)
    figures = {"outage_s": round(back_at - stopped_at, 2),
               "first_commit_after_restart_s": round(first_commit_after - back_at, 2),
               "job_end_after_restart_s": round(ended_at - back_at, 2),
               "charges_held_through_the_outage": len(held),
               "store_steps_retried": len(retried),
               "calls_retried": len({call for _, job, call in retried if call}),
               "commits_retried": sum(1 for step, *_ in retried if step == "commit"),
               "claims_retried": sum(1 for step, *_ in retried if step == "claim")}
    for name, value in figures.items():
        record_property(name, value)
    print("outage figures:", figures)


# ----------------------------------------------------------------------------------------- poison calls


def test_a_poison_call_stops_after_the_delivery_limit_and_fails_saying_so(worker_procs, redis_url):
    """procCrash ends its prefork child every time; the task comes back each time (reject on worker lost),
    the next delivery takes the call over once the dead attempt's lease expired, and after 3 lost
    deliveries the call fails without running again."""
    proc = worker_procs.start(["procCrash", "procA"], pool="prefork", concurrency=1, AGENTQ_MAX_DELIVERIES="3")
    worker_procs.wait_live(proc, ["procCrash", "procA"])
    store = worker_procs.store
    with Client(redis_url) as client:
        handle = client.submit({"calls": [{"_tool": "procCrash", "tag": "poison", "_outputPath": "†state.crash"},
                                          {"_tool": "procA", "x": 1, "tag": "ok", "_outputPath": "†state.a"}]})
        record = handle.result(timeout=90)
    assert record["status"] == "failed", record
    assert store.redis.get("procs:runs:procCrash:poison") == "3"  # it ran on 3 deliveries, not a 4th time
    assert record["state"]["a"]["value"] == 2  # the other call ran as usual
    assert "DeliveryLimitExceeded" in record["error"]["message"]
    assert "delivered 3 times" in record["error"]["message"]
    crash_id = next(c for c, r in store.call_records(handle.id).items() if r.tool == "procCrash")
    finished = [e for _, e in store.read_events(handle.id) if e["event"] == "call.finished"
                and e["call_id"] == crash_id]
    assert [(e["status"], e["error"]["type"]) for e in finished] == [("failed", "DeliveryLimitExceeded")]
    assert "AGENTQ_MAX_DELIVERIES=3" in finished[0]["error"]["message"]
    assert store.call_table(handle.id).attempts[crash_id] == 4  # 3 lost attempts, then the one that failed it
    assert proc.alive()  # the worker itself survived (its pool replaced each dead child)


# ------------------------------------------------------------------------------------ cancel, late outcome


def test_a_call_running_at_the_cancel_is_recorded_and_marked_after_cancel(worker_procs, redis_url):
    proc = worker_procs.start(["procSlow", "procA"])
    worker_procs.wait_live(proc, ["procSlow", "procA"])
    store = worker_procs.store
    with Client(redis_url) as client:
        handle = client.submit({"context": [{"type": "state", "data": {"before": True}}],
                                "calls": [{"_tool": "procSlow", "seconds": 2.0, "tag": "late",
                                           "_outputPath": "†state.slow"},
                                          {"_tool": "procA", "x": "†state.slow.start", "_outputPath": "†state.a"}]})
        wait_for(lambda: store.redis.get("procs:runs:procSlow:late"), 15, "procSlow to start")
        assert handle.cancel() == "canceled"
        slow_id = next(c for c, r in store.call_records(handle.id).items() if r.tool == "procSlow")
        wait_for(lambda: store.call_statuses(handle.id)[slow_id] == "done", 20, "the running call to end")
        record = handle.result(timeout=5)
    assert record["status"] == "canceled" and record["result"] is None
    # its outcome is in the canceled job's state and its log, marked as late
    assert record["state"]["slow"]["start"] == 1 and record["state"]["before"] is True
    assert "a" not in record["state"]  # what waited on it was canceled, not run
    late = [m for m in store.read_log(handle.id) if m.get("_call", {}).get("id") == slow_id]
    assert len(late) == 1 and late[0]["_afterCancel"] is True
    # its event comes after the job's end, marked too
    names = [(e["event"], e.get("call_id"), e.get("after_cancel")) for _, e in store.read_events(handle.id)]
    end = names.index(("job.finished", None, None))
    assert ("call.finished", slow_id, True) in names[end + 1:], names
    assert [n for n in names if n[0] == "call.finished"] == [("call.finished", slow_id, True)]
    [canceled] = [e for _, e in store.read_events(handle.id) if e["event"] == "job.finished"]
    assert (canceled["status"], canceled["running"]) == ("canceled", [slow_id])  # its outcome was announced
    statuses = store.call_statuses(handle.id)
    assert sorted(statuses.values()) == ["canceled", "done"]
