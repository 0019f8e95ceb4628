"""A Redis Cluster state store (docs/architecture.md#runtime--the-only-place-that-knows-celery, docs/monitoring.md):
three masters on loopback (`local_cluster`, started once per session), the broker a plain Redis (kombu has no cluster
transport), real Celery workers in this process and as a separate `agentq worker` process.

Every job's keys share one hash slot, so its Lua steps run on one node; fleet-wide keys are written by separate
commands. Redis Cluster itself enforces the rule: a script or MULTI touching two slots fails with CROSSSLOT, and
(Redis 7) a script may not even read an undeclared key of another slot. The jobs below are given ids that land
on all three nodes, and a module's child job lands on another node than its parent.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterable
from pathlib import Path

import pytest
import redis

from agentq.client import Client
from agentq.engine.agent import call_ids
from agentq.engine.delegation import child_job_id
from agentq.errors import ConfigurationError, StoreUnavailableError
from agentq.runtime.worker import InProcessWorker
from agentq.settings import Settings
from agentq.store.fleet import RedisFleet
from tests.fake_anthropic import Answer, FakeAnthropic, RecordedRequest
from tests.integration.cluster import LocalCluster, _node
from tests.integration.conftest import Harness, store_of
from tests.integration.procs import MODULE, ROOT, TOOLS_DIR, base_env, wait_for
from tests.integration.test_plan_jobs import start_worker

pytestmark = pytest.mark.timeout(180)
TIMEOUT = 30.0
OUTPUT = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}


def job_key(job_id: str) -> str:
    return f"agentq:{{{job_id}}}:job"


def ids_on_nodes(cluster: LocalCluster, prefix: str, nodes: Iterable[int]) -> list[str]:
    """One job id per node of `nodes` (ports), each served by that node."""
    wanted, found = list(nodes), {}
    for n in range(10_000):
        candidate = f"{prefix}-{n}"
        node = cluster.node_of(job_key(candidate))
        if node in wanted and node not in found:
            found[node] = candidate
            if len(found) == len(wanted):
                return [found[node] for node in wanted]
    raise AssertionError(f"no ids found for nodes {wanted}")


def keys_of(cluster: LocalCluster, job_id: str) -> dict[int, list[str]]:
    """The job's keys by the node holding them (nodes without any left out)."""
    tag = f"{{{job_id}}}"
    return {port: [k for k in keys if tag in k] for port, keys in cluster.keys().items()
            if any(tag in k for k in keys)}


# ------------------------------------------------------------------------------------------------ plan jobs


def test_plan_jobs_on_every_node_of_the_cluster(cluster_harness: Harness, local_cluster: LocalCluster):
    h = cluster_harness
    h.tool("double", params={"n": {"type": "integer"}})
    h.tool("add", params={"a": {"type": "integer"}, "b": {"type": "integer"}})
    h.tool("flaky", params={"job": {"type": "integer"}})
    flaky_runs: list[int] = []

    def flaky(call):
        flaky_runs.append(call["job"])
        if flaky_runs.count(call["job"]) == 1:
            raise ConnectionError("try again")
        return "ok"

    h.activities.register("double", lambda call: call["n"] * 2)
    h.activities.register("add", lambda call: call["a"] + call["b"])
    h.activities.register("flaky", flaky, retries=1, retry_backoff=0.05)
    start_worker(h, concurrency=4)
    client = h.client()
    ids = ids_on_nodes(local_cluster, "plan", local_cluster.ports)
    handles = [client.submit({"context": [{"type": "data", "kind": "input", "data": {"n": i + 1}}], "calls": [
        {"_tool": "double", "n": "†input.n", "_outputPath": "†state.a"},
        {"_tool": "double", "n": "†state.a", "_outputPath": "†state.b"},  # waits on the first
        {"_tool": "add", "a": "†state.a", "b": "†state.b", "_outputPath": "†state.sum && †state.copy"},
        {"_tool": "flaky", "job": i, "_outputPath": "†state.flaky"},  # fails once, then retried
    ]}, job_id=job_id) for i, job_id in enumerate(ids)]
    for i, handle in enumerate(handles):
        record = handle.result(timeout=TIMEOUT)
        n = i + 1
        assert record["status"] == "succeeded", record
        assert record["state"] == {"a": 2 * n, "b": 4 * n, "sum": 6 * n, "copy": 6 * n, "flaky": "ok"}
        events = [e.data["event"] for e in handle.events(follow=False)]
        assert events[0] == "job.queued" and events[-1] == "job.finished" and "call.retrying" in events

    # the jobs live on three different nodes, each job wholly on the node serving its slot
    homes = {job_id: keys_of(local_cluster, job_id) for job_id in ids}
    assert [list(home) for home in homes.values()] == [[port] for port in local_cluster.ports], homes
    for job_id, home in homes.items():
        assert job_key(job_id) in next(iter(home.values()))
    # fleet-wide keys exist beside them, written outside every job's script
    every_key = {k for keys in local_cluster.keys().values() for k in keys}
    assert {"agentq:jobs", "agentq:workers", "agentq:activities", "agentq:tools"} <= every_key
    store = store_of(client)
    assert set(store.recent_jobs()) == set(ids)
    assert {w.id for w in RedisFleet(store).live_workers()}  # MGET-free read of announcements across slots
    assert set(RedisFleet(store).known_activities(memory_s=60)) == {"double", "add", "flaky"}


# ------------------------------------------------------------------------------------------- approvals, cancel


def test_approve_and_reject_on_a_cluster(cluster_harness: Harness, local_cluster: LocalCluster):
    h = cluster_harness
    ran: list[str] = []
    h.tool("wire", params={"amount": {"type": "number"}})

    def wire(call: dict) -> dict:
        ran.append(f"wire {call['amount']}")
        return {"wired": call["amount"]}

    h.activities.register("wire", wire)
    start_worker(h)
    client = h.client()
    ids = ids_on_nodes(local_cluster, "approval", local_cluster.ports[:2])
    handles = [client.submit({"options": {"approval": ["wire"]}, "calls": [
        {"_tool": "wire", "amount": amount, "_outputPath": "†state.wire || †state.refused"}]}, job_id=job_id)
        for job_id, amount in zip(ids, (10, 20), strict=True)]
    for handle in handles:
        assert handle.status() == "awaiting_approval"
    approve, reject = handles
    approved = approve.approve(approve.calls()[0]["id"])
    assert approved["status"] in ("ready", "running", "done")
    rejected = reject.reject(reject.calls()[0]["id"], reason="too much")
    assert rejected["status"] == "failed"
    first, second = approve.result(timeout=TIMEOUT), reject.result(timeout=TIMEOUT)
    assert first["status"] == "succeeded" and first["state"] == {"wire": {"wired": 10}}, first
    assert second["status"] == "succeeded", second  # the `||` branch took the rejection
    assert second["state"] == {"refused": {"error": {"type": "Rejected",
                                                     "message": "rejected by reviewer: too much"}}}
    assert ran == ["wire 10"]


def test_cancel_on_a_cluster(cluster_harness: Harness, local_cluster: LocalCluster):
    h = cluster_harness
    gate, started = threading.Event(), threading.Event()
    ran: list[str] = []

    def slow(call):
        started.set()
        gate.wait(TIMEOUT)
        ran.append("slow")
        return "late"

    h.tool("slow", params={})
    h.tool("after", params={"x": {}})
    h.activities.register("slow", slow)

    def after(call: dict) -> str:
        ran.append("after")
        return "never"

    h.activities.register("after", after)
    start_worker(h)
    client = h.client()
    (job_id,) = ids_on_nodes(local_cluster, "cancel", local_cluster.ports[2:])
    handle = client.submit({"calls": [{"_tool": "slow", "_outputPath": "†state.slow"},
                                      {"_tool": "after", "x": "†state.slow", "_outputPath": "†state.after"}]},
                           job_id=job_id)
    try:
        assert started.wait(TIMEOUT), "the slow call never started"
        assert handle.cancel() == "canceled"
    finally:
        gate.set()
    record = handle.result(timeout=TIMEOUT)
    assert record["status"] == "canceled"
    store = store_of(client)

    def by_tool() -> dict[str, str]:
        records = store.call_records(job_id)
        return {records[c].tool: s.value for c, s in store.call_statuses(job_id).items()}

    wait_for(lambda: by_tool()["slow"] == "done", TIMEOUT, "the running call to commit")
    assert by_tool() == {"slow": "done", "after": "canceled"}
    assert ran == ["slow"]  # the canceled call never ran
    assert handle.status() == "canceled"


# ------------------------------------------------------------------------------------------- agent, module


def test_an_agent_job_on_a_cluster(cluster_harness: Harness, local_cluster: LocalCluster,
                                   anthropic_env: FakeAnthropic):
    h = cluster_harness
    h.tool("weather", params={"city": {"type": "string"}}, output={"type": "object"}, required=["city"])
    h.activities.register("weather", lambda call: {"city": call["city"], "temp_c": 21})
    h.worker(llm="anthropic", concurrency=4)
    anthropic_env.script(
        Answer.solution({"calls": [{"_tool": "weather", "city": "Oslo", "_outputPath": "†state.oslo"},
                                   {"_tool": "weather", "city": "Rome", "_outputPath": "†state.rome"}],
                         "output": None}),
        Answer.solution({"calls": [], "output": {"answer": "Rome is warmer"}}))
    (job_id,) = ids_on_nodes(local_cluster, "agent", local_cluster.ports[1:2])
    record = h.client().submit({"context": [{"type": "text", "text": "Where is it warmer?"}],
                                "tools": ["weather"], "output": OUTPUT}, job_id=job_id).result(timeout=TIMEOUT)
    assert record["status"] == "succeeded", record
    assert record["result"] == {"answer": "Rome is warmer"}
    assert record["state"] == {"oslo": {"city": "Oslo", "temp_c": 21}, "rome": {"city": "Rome", "temp_c": 21}}
    assert record["usage"]["requests"] == 2
    assert list(keys_of(local_cluster, job_id)) == [local_cluster.ports[1]]


def test_a_module_job_whose_child_lives_on_another_node(cluster_harness: Harness, local_cluster: LocalCluster,
                                                        anthropic_env: FakeAnthropic, tmp_path: Path):
    h = cluster_harness
    (tmp_path / "researcher.json").write_text(json.dumps({
        "context": [{"type": "text", "role": "system", "text": "You are the Researcher."}],
        "tools": ["lookup"],
        "output": {"type": "object", "properties": {"facts": {"type": "array"}}, "required": ["facts"]},
        "input": {"type": "object", "properties": {"question": {"type": "string"}}}}), encoding="utf-8")
    h.tool("lookup", params={"topic": {"type": "string"}}, output={"type": "array"}, required=["topic"])
    h.tool("research", params={"question": {"type": "string"}}, output={"type": "object"},
           _module={"const": "researcher"})
    h.activities.register("lookup", lambda call: [f"{call['topic']} is old"])
    h.worker(llm="anthropic", module_dirs=[tmp_path], concurrency=4)

    # a parent whose module call's child job (its id derives from the call's) is served by another node
    def child_of(job_id: str) -> str:
        return child_job_id(call_ids(job_id, 0)(0))

    job_id = next(f"parent-{n}" for n in range(1000)
                  if local_cluster.node_of(job_key(f"parent-{n}")) != local_cluster.node_of(
                      job_key(child_of(f"parent-{n}"))))
    child = child_of(job_id)
    parent_answers = [Answer.solution({"calls": [{"_tool": "research", "question": "the lighthouse",
                                                  "_outputPath": "†state.research"}], "output": None}),
                      Answer.solution({"calls": [], "output": "done"})]
    child_answers = [Answer.solution({"calls": [{"_tool": "lookup", "topic": "lighthouse",
                                                 "_outputPath": "†state.facts"}], "output": None}),
                     Answer.solution({"calls": [], "output": {"facts": ["lighthouse is old"]}})]

    def answer(request: RecordedRequest) -> Answer:
        system = " ".join(block["text"] for block in request.body.get("system") or [])
        return (child_answers if "You are the Researcher." in system else parent_answers).pop(0)

    anthropic_env.responder = answer
    client = h.client()
    handle = client.submit({"context": [{"type": "text", "text": "Research the lighthouse."}],
                            "tools": ["research"]}, job_id=job_id)
    record = handle.result(timeout=TIMEOUT)
    assert record["status"] == "succeeded", record
    assert record["state"] == {"research": {"facts": ["lighthouse is old"]}}
    child_record = client.job(child).result(timeout=1)
    assert child_record["status"] == "succeeded" and child_record["result"] == {"facts": ["lighthouse is old"]}
    # the child's events were relayed onto the parent's stream, across nodes
    relayed = [e.data for e in handle.events(follow=False) if e.data.get("relayed_from") == child]
    assert relayed, "no event of the child job was relayed to its parent"
    parent_home, child_home = keys_of(local_cluster, job_id), keys_of(local_cluster, child)
    assert len(parent_home) == len(child_home) == 1 and set(parent_home) != set(child_home)


# ----------------------------------------------------------------------------- a separate worker process


def test_an_agentq_worker_process_configured_for_the_cluster(local_cluster: LocalCluster, redis_url: str,
                                                              tmp_path: Path):
    local_cluster.flush()
    env = base_env(local_cluster.url, AGENTQ_REDIS_CLUSTER="true", AGENTQ_BROKER_URL=redis_url,
                   PROCS_REDIS_URL=redis_url, PROCS_ACTIVITIES="procA,procB")
    log_path = tmp_path / "worker.log"
    with open(log_path, "wb") as log:
        worker = subprocess.Popen([sys.executable, "-m", "agentq.cli", "worker", "-m", MODULE, "--pool", "prefork",
                                   "--concurrency", "2", "--loglevel", "WARNING"], env=env, cwd=str(ROOT),
                                  stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    settings = Settings(redis_url=local_cluster.url, redis_cluster=True, broker_url=redis_url,
                        tools_dirs=[TOOLS_DIR])
    client = Client(settings=settings)
    try:
        store = store_of(client)
        fleet = RedisFleet(store)
        wait_for(lambda: {"procA", "procB"} <= set(fleet.known_activities(60)), 30, "the worker to announce itself",
                 on_timeout=lambda: log_path.read_text(errors="replace"))
        ids = ids_on_nodes(local_cluster, "proc", local_cluster.ports)
        handles = [client.submit({"calls": [{"_tool": "procA", "x": i, "_outputPath": "†state.a"},
                                            {"_tool": "procB", "a": "†state.a.value", "_outputPath": "†state.b"}]},
                                 job_id=job_id) for i, job_id in enumerate(ids)]
        for i, handle in enumerate(handles):
            record = handle.result(timeout=TIMEOUT)
            assert record["status"] == "succeeded", (record, log_path.read_text(errors="replace"))
            assert record["state"]["b"]["value"] == (i + 1) * 10
            assert record["state"]["a"]["pid"] != worker.pid  # a prefork child ran it
    finally:
        client.close()
        worker.terminate()  # warm shutdown, then the whole process group (the prefork children) for sure
        with contextlib.suppress(subprocess.TimeoutExpired):
            worker.wait(20)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(worker.pid, signal.SIGKILL)
        if worker.poll() is None:
            worker.wait(5)


# ------------------------------------------------------------------------------------------- refusals


def test_a_cluster_store_refuses_a_cluster_broker(local_cluster: LocalCluster, redis_url: str):
    from agentq.protocol.activities import ActivityRegistry
    from agentq.protocol.tools import ToolRegistry
    from agentq.runtime.root import Runtime

    with pytest.raises(ConfigurationError, match="no Redis Cluster transport") as unset:
        Client(settings=Settings(redis_url=local_cluster.url, redis_cluster=True))
    assert "AGENTQ_BROKER_URL" in str(unset.value)
    with pytest.raises(ConfigurationError, match="no Redis Cluster transport"):
        Client(settings=Settings(redis_url=local_cluster.url, redis_cluster=True, broker_url=local_cluster.url))

    # another node of the same cluster is not the store's URL: the worker asks the broker itself as it starts
    other_node = f"redis://127.0.0.1:{local_cluster.ports[1]}/0"
    activities = ActivityRegistry()
    activities.register("noop", lambda call: None)
    tools = ToolRegistry()
    tools.register("noop", {"type": "object", "description": "noop", "properties": {
        "_tool": {"type": "string", "const": "noop"}, "_output": {}}})
    runtime = Runtime(settings=Settings(redis_url=local_cluster.url, redis_cluster=True, broker_url=other_node),
                      activities=activities, tools=tools)
    try:
        with pytest.raises(ConfigurationError, match="is a Redis Cluster node"):
            InProcessWorker(runtime).start()
    finally:
        runtime.close()

    with pytest.raises(ConfigurationError, match="a cluster node's URL"):
        Client(settings=Settings(redis_url="redis+sentinel://127.0.0.1:26379/m/0", redis_cluster=True,
                                 broker_url=redis_url))
    with pytest.raises(ConfigurationError, match="database 0 only"):
        Client(settings=Settings(redis_url=f"redis://127.0.0.1:{local_cluster.ports[0]}/3", redis_cluster=True,
                                 broker_url=redis_url))


def test_a_store_that_does_not_match_its_setting_is_one_clear_error(local_cluster: LocalCluster, redis_url: str):
    from agentq.store.state import StateStore

    # a cluster node used as one server: the first key another node serves says what to set
    plain = StateStore(local_cluster.url)
    try:
        other = next(f"job-{n}" for n in range(1000)
                     if local_cluster.node_of(job_key(f"job-{n}")) != local_cluster.ports[0])
        with pytest.raises(ConfigurationError, match="is a Redis Cluster node: set AGENTQ_REDIS_CLUSTER=true"):
            plain.job_status(other)
    finally:
        plain.close()
    # the async store maps the same errors through the same boundary
    import asyncio

    from agentq.store.aio import AsyncStateStore

    async def async_status() -> None:
        reads = AsyncStateStore(local_cluster.url)
        try:
            await reads.job_status(other)
        finally:
            await reads.close()

    with pytest.raises(ConfigurationError, match="is a Redis Cluster node: set AGENTQ_REDIS_CLUSTER=true"):
        asyncio.run(async_status())
    # AGENTQ_REDIS_CLUSTER=true with a plain Redis, or with nothing listening
    with pytest.raises(ConfigurationError, match="is no Redis Cluster node"):
        Client(settings=Settings(redis_url=redis_url, redis_cluster=True, broker_url=redis_url.replace("/0", "/1")))
    with pytest.raises(StoreUnavailableError, match=r"cannot reach the state store at 'redis://127\.0\.0\.1:1/0'"):
        Client(settings=Settings(redis_url="redis://127.0.0.1:1/0", redis_cluster=True, broker_url=redis_url))


def test_a_cluster_client_keeps_no_connection_per_thread(local_cluster: LocalCluster):
    """A cluster has a pool per node: the synchronous client's are plain blocking pools (`store/pinned.py` pins
    connections on one server or a Sentinel master only), and a thread's commands give their connection back."""
    from agentq.store.connect import connect_redis
    from agentq.store.pinned import PinnedPoolMixin

    local_cluster.flush()
    client = connect_redis(local_cluster.url, cluster=True, max_connections=4)
    try:
        ids = ids_on_nodes(local_cluster, "pools", local_cluster.ports)
        for job_id in ids:
            client.set(job_key(job_id), job_id)
        pools = [node.redis_connection.connection_pool for node in client.get_nodes()]
        assert pools and all(type(pool) is redis.BlockingConnectionPool for pool in pools)
        assert not any(isinstance(pool, PinnedPoolMixin) for pool in pools)
        for pool in pools:  # every connection made is idle in its node's queue again
            assert sum(1 for c in pool.pool.queue if c is not None) == len(pool._connections)
    finally:
        client.close()


def test_the_async_client_of_the_factory_reaches_every_node(local_cluster: LocalCluster):
    """`connect_redis(..., asynchronous=True)` (for asyncio services such as the HTTP API) follows the slots."""
    import asyncio

    from agentq.store.connect import connect_redis

    local_cluster.flush()
    ids = ids_on_nodes(local_cluster, "async", local_cluster.ports)

    async def roundtrip() -> list[str]:
        client = connect_redis(local_cluster.url, cluster=True, asynchronous=True)
        try:
            for job_id in ids:
                await client.set(job_key(job_id), job_id)
            return [await client.get(job_key(job_id)) for job_id in ids]
        finally:
            await client.aclose()

    assert asyncio.run(roundtrip()) == ids
    assert [list(keys_of(local_cluster, job_id)) for job_id in ids] == [[port] for port in local_cluster.ports]


def test_the_cluster_rejects_a_script_that_spans_two_slots(local_cluster: LocalCluster):
    """The cluster really enforces the rule the store is built on (control for the tests above)."""
    local_cluster.flush()
    client = redis.cluster.RedisCluster(host="127.0.0.1", port=local_cluster.ports[0], decode_responses=True)
    try:
        a, b = ids_on_nodes(local_cluster, "control", local_cluster.ports[:2])
        script = "redis.call('SET', KEYS[1], 1) return redis.call('GET', ARGV[1])"
        with pytest.raises(redis.RedisError):
            client.execute_command("EVAL", script, 1, job_key(a), job_key(b), target_nodes=client.get_node(
                port=local_cluster.ports[0]))
        assert client.eval("redis.call('SET', KEYS[1], 1) return redis.call('GET', KEYS[2])", 2,
                           job_key(a), f"agentq:{{{a}}}:log") is None
    finally:
        client.close()


# ------------------------------------------------------------------------------------- the API and AsyncClient


def test_the_api_and_the_async_client_follow_jobs_on_every_node(cluster_harness: Harness, local_cluster: LocalCluster):
    import asyncio

    from agentq import AsyncClient
    from tests.api_server import ApiServer

    h = cluster_harness
    h.tool("double", params={"n": {"type": "integer"}})
    h.activities.register("double", lambda call: call["n"] * 2)
    start_worker(h)
    ids = ids_on_nodes(local_cluster, "api", local_cluster.ports)
    with ApiServer(h.settings, tools=h.tools) as api:
        for n, job_id in enumerate(ids):
            job = {"calls": [{"_tool": "double", "n": n, "_outputPath": "†state.a"},
                             {"_tool": "double", "n": "†state.a", "_outputPath": "†state.b"}]}
            h.client().submit(job, job_id=job_id)
        for n, job_id in enumerate(ids):  # each stream lives on its own node: followers read for themselves
            events = [m.event for m in api.sse(f"/v1/jobs/{job_id}/events") if m.event]
            assert events[0] == "job.queued" and events[-1] == "job.finished"
            assert api.request("GET", f"/v1/jobs/{job_id}").json()["state"] == {"a": 2 * n, "b": 4 * n}
            history = api.request("GET", f"/v1/jobs/{job_id}/history").json()
            assert [p["activity_type"] for p in history["parts"]].count("tool_call") == 2
        # the listing reads the records of jobs on every node in one pipeline (split by node)
        listed = api.request("GET", f"/v1/jobs?limit={len(ids)}").json()
        assert sorted(r["id"] for r in listed) == sorted(ids)
        assert all(r["status"] == "succeeded" and r["state"]["b"] == 4 * ids.index(r["id"]) for r in listed)

    async def follow_all() -> list[list[str]]:
        async with AsyncClient(settings=h.settings) as client:
            handles = [await client.submit({"calls": [{"_tool": "double", "n": 1, "_outputPath": "†state.a"}]},
                                           job_id=f"{job_id}-again") for job_id in ids]

            async def names(handle) -> list[str]:
                return [event.event async for event in handle.events()]

            return await asyncio.gather(*(names(handle) for handle in handles))

    for names in asyncio.run(follow_all()):
        assert names[0] == "job.queued" and names[-1] == "job.finished"


def test_a_node_whose_bus_port_was_taken_starts_on_another():
    """The cluster's test fixture: a node's bus port taken before it binds (a client's ephemeral port, say) is
    replaced by another free one; the node's own port is retried by the server itself."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        cluster = LocalCluster()
        cluster.bus_ports[0] = taken.getsockname()[1]
        cluster.servers[0] = _node(cluster.bus_ports[0])
        try:
            cluster.start()
            assert cluster.bus_ports[0] != taken.getsockname()[1]
            with redis.Redis(host="127.0.0.1", port=cluster.ports[0], decode_responses=True) as node:
                assert "cluster_state:ok" in node.execute_command("CLUSTER", "INFO")
        finally:
            cluster.stop()
