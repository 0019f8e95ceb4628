"""Redis Sentinel for the state store and the broker (docs/monitoring.md): a master, a replica and a sentinel that the
tests start on loopback (`tests/integration/cluster.py` `SentinelGroup`), agentq given only the sentinel's
address and the master's name (`redis+sentinel://127.0.0.1:<port>/agentqmaster/<db>`), real Celery workers.

The store and the broker find the master through the sentinel; when the master dies during a job, the sentinel
promotes the replica and both find the new master: the job ends succeeded with one output per call.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest
import redis

from agentq.client import Client
from agentq.settings import Settings
from tests.integration.cluster import MASTER_NAME, SentinelGroup
from tests.integration.conftest import Harness, store_of
from tests.integration.procs import WorkerProcs, wait_for
from tests.integration.test_plan_jobs import start_worker

pytestmark = pytest.mark.timeout(120)
TIMEOUT = 30.0


@pytest.fixture(scope="module")
def group() -> Iterator[SentinelGroup]:
    with SentinelGroup() as started:
        yield started


@pytest.fixture
def sentinel_harness(group: SentinelGroup) -> Iterator[Harness]:
    """State store on db 0, broker on db 1 of the group's master, both reached through the sentinel."""
    group.flush()
    h = Harness(group.url_for(0), broker_url=group.url_for(1))
    try:
        yield h
    finally:
        h.close()


def outputs_per_call(store, job_id: str) -> Counter:
    return Counter(m["_call"]["id"] for m in store.read_log(job_id) if m.get("_call"))


def chain_job(n: int) -> dict:
    return {"context": [{"type": "data", "kind": "input", "data": {"n": n}}], "calls": [
        {"_tool": "double", "n": "†input.n", "_outputPath": "†state.a"},
        {"_tool": "double", "n": "†state.a", "_outputPath": "†state.b"}]}


def test_the_store_and_the_broker_find_the_master_through_the_sentinel(sentinel_harness: Harness,
                                                                       group: SentinelGroup):
    h = sentinel_harness
    h.tool("double", params={"n": {"type": "integer"}})
    h.activities.register("double", lambda call: call["n"] * 2)
    worker = start_worker(h)
    app = worker.runtime.app
    assert group.sentinel is not None
    assert app.conf.broker_url == f"sentinel://127.0.0.1:{group.sentinel.port}/1"  # kombu's form of the URL
    assert app.conf.broker_transport_options["master_name"] == MASTER_NAME
    record = h.run(chain_job(3), timeout=TIMEOUT)
    assert record["status"] == "succeeded", record
    assert record["state"] == {"a": 6, "b": 12}

    # what was written went to the master (db 0: the job; db 1: kombu's bindings) and was replicated
    master, replica = group.master(), group.replica()
    job_key = f"agentq:{{{record['id']}}}:job"
    with redis.Redis(port=master.port, db=0) as store_db, redis.Redis(port=master.port, db=1) as broker_db:
        assert store_db.exists(job_key) == 1
        assert any(k.startswith(b"_kombu.binding.") for k in broker_db.scan_iter())
    with redis.Redis(port=replica.port, db=0) as copy:
        wait_for(lambda: copy.exists(job_key) == 1, 10, "the replica to hold the job")


def test_an_agentq_worker_process_through_the_sentinel(group: SentinelGroup, tmp_path):
    group.flush()
    procs = WorkerProcs(group.url_for(0), tmp_path)
    try:
        master = f"redis://127.0.0.1:{group.master_port()}/2"  # where procs_activities counts its runs
        proc = procs.start(["procA", "procB"], pool="prefork", concurrency=2, AGENTQ_BROKER_URL=group.url_for(1),
                           PROCS_REDIS_URL=master)
        procs.wait_live(proc, ["procA", "procB"])
        with Client(settings=Settings(redis_url=group.url_for(0), broker_url=group.url_for(1))) as client:
            record = client.submit({"calls": [
                {"_tool": "procA", "x": 4, "_outputPath": "†state.a"},
                {"_tool": "procB", "a": "†state.a.value", "_outputPath": "†state.b"}]}).result(timeout=TIMEOUT)
        assert record["status"] == "succeeded", (record, proc.output())
        assert record["state"]["b"]["value"] == 50
        assert record["state"]["a"]["pid"] != proc.pid  # a prefork child of the worker ran it
    finally:
        procs.close()


def test_the_async_client_of_the_factory_finds_the_master(group: SentinelGroup):
    """`connect_redis(..., asynchronous=True)` (for asyncio services such as the HTTP API) asks the sentinel."""
    import asyncio

    from agentq.store.connect import connect_redis

    group.flush()

    async def roundtrip() -> str:
        client = connect_redis(group.url_for(0), asynchronous=True)
        try:
            await client.set("agentq:async-check", "found")
            return await client.get("agentq:async-check")
        finally:
            await client.aclose()

    assert asyncio.run(roundtrip()) == "found"
    with redis.Redis(port=group.master_port(), decode_responses=True) as master:
        assert master.get("agentq:async-check") == "found"


def test_a_bad_sentinel_url_is_one_clear_error():
    from agentq.errors import ConfigurationError

    with pytest.raises(ConfigurationError) as caught:
        Client(settings=Settings(redis_url="redis+sentinel://127.0.0.1:notaport,/"))
    message = str(caught.value)
    assert "'127.0.0.1:notaport' is not host:port" in message and "names no master" in message
    assert "redis+sentinel://" in message  # the form is named
    with pytest.raises(ConfigurationError, match="redis\\+sentinel://"):
        Client(settings=Settings(redis_url="redis://127.0.0.1:1/0",
                                 broker_url="sentinel://127.0.0.1:26379;sentinel://127.0.0.1:26380"))


def test_the_master_dies_during_a_job(record_property) -> None:
    """The master ends (SHUTDOWN NOSAVE) while a call runs: the sentinel promotes the replica, the worker's broker
    connection and the store find it (the worker survives: `runtime/sentinel_transport.py`), the call commits once,
    its task is acknowledged on the new master, the job succeeds and the next one runs."""
    with SentinelGroup(down_after_ms=1000) as group:
        h = Harness(group.url_for(0), broker_url=group.url_for(1))
        try:
            gate, started = threading.Event(), threading.Event()
            runs: list[int] = []

            def hold(call):
                runs.append(call["n"])
                started.set()
                gate.wait(TIMEOUT)
                return call["n"] * 2

            h.tool("hold", params={"n": {"type": "integer"}})
            h.tool("double", params={"n": {"type": "integer"}})
            h.activities.register("hold", hold)
            h.activities.register("double", lambda call: call["n"] * 2)
            start_worker(h)
            client = h.client()
            handle = client.submit({"calls": [
                {"_tool": "hold", "n": 5, "_outputPath": "†state.a"},
                {"_tool": "double", "n": "†state.a", "_outputPath": "†state.b"}]})
            assert started.wait(TIMEOUT), "the call never started"
            old, new = group.master(), group.replica()
            _replicated(old.port, new.port)  # what the job wrote so far is on the replica
            killed_at = time.monotonic()
            old.stop()
            group.await_master(new.port)
            failover_s = time.monotonic() - killed_at
            gate.set()
            record = handle.result(timeout=TIMEOUT)
            recovered_s = time.monotonic() - killed_at
            record_property("sentinel_failover_s", round(failover_s, 2))
            record_property("sentinel_kill_to_job_end_s", round(recovered_s, 2))
            assert record["status"] == "succeeded", record
            assert record["state"] == {"a": 10, "b": 20}
            store = store_of(client)
            assert set(outputs_per_call(store, handle.id).values()) == {1}
            assert runs == [5]  # the held call ran once: its attempt outlived the failover
            # the next job runs on the new master as well
            after = client.submit({"calls": [{"_tool": "double", "n": 1, "_outputPath": "†state.x"}]})
            assert after.result(timeout=TIMEOUT)["state"] == {"x": 2}
            with redis.Redis(port=new.port) as promoted, redis.Redis(port=new.port, db=1) as broker:
                assert promoted.exists(f"agentq:{{{after.id}}}:job") == 1
                # the held call's task was acknowledged on the new master (not left for a redelivery)
                wait_for(lambda: broker.hlen("unacked") == 0, 10, "every task to be acknowledged")
        finally:
            h.close()


def _replicated(master_port: int, replica_port: int, timeout: float = 10.0) -> None:
    with redis.Redis(port=master_port) as master, redis.Redis(port=replica_port) as replica:
        def caught_up() -> bool:
            offset = int(master.info("replication")["master_repl_offset"])
            return int(replica.info("replication").get("slave_repl_offset", -1)) >= offset

        wait_for(caught_up, timeout, "the replica to catch up")


def test_the_api_streams_a_job_through_the_sentinel(sentinel_harness: Harness):
    from tests.api_server import ApiServer

    h = sentinel_harness
    h.tool("double", params={"n": {"type": "integer"}})
    h.activities.register("double", lambda call: call["n"] * 2)
    start_worker(h)
    with ApiServer(h.settings, tools=h.tools) as api:
        job_id = api.request("POST", "/v1/jobs", json_body=chain_job(5)).json()["id"]
        events = [m.event for m in api.sse(f"/v1/jobs/{job_id}/events") if m.event]  # the hub's reader too
        assert events[0] == "job.queued" and events[-1] == "job.finished"
        assert api.request("GET", f"/v1/jobs/{job_id}").json()["state"] == {"a": 10, "b": 20}
        assert api.request("GET", "/v1/ready").status == 200
