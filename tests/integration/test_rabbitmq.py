"""RabbitMQ as the broker (docs/architecture.md#runtime--the-only-place-that-knows-celery, docs/monitoring.md):
`AGENTQ_BROKER_URL=amqp://...`, the state store on Redis.

Against the RabbitMQ the tests reach (`tests/integration/rabbitmq.py`: 127.0.0.1:5672 by default; skipped with
the reason where none answers, a failure under TEST_REQUIRE_RABBITMQ=1 as in CI). Each test has queues of its
own, deleted afterwards. What is shown: plan jobs whose ready calls go out in one dispatch (kombu's publish
batch falls back to one publish per task on AMQP) and whose retries are countdown tasks; an agent job whose
tick is retried with a countdown after a 429; cancel revoking a queued call through the workers' broadcast
queue; a killed `agentq worker` process whose unacknowledged task RabbitMQ hands to another worker at once.
"""

from __future__ import annotations

import itertools
import os
import signal
import threading
import time
from collections import Counter

import pytest

from agentq.client import Client
from agentq.runtime.app import task_id
from agentq.runtime.broker import broker_of
from tests.fake_anthropic import Answer, FakeAnthropic
from tests.integration.conftest import Harness, store_of
from tests.integration.procs import WorkerProcs, wait_for
from tests.integration.rabbitmq import AmqpNames
from tests.integration.test_plan_jobs import engine_messages

pytestmark = pytest.mark.timeout(120)
TIMEOUT = 30.0
OUTPUT = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}


def outputs_per_call(store, job_id: str) -> Counter:
    return Counter(m["_call"]["id"] for m in store.read_log(job_id) if m.get("_call"))


class Counting:
    """A dispatcher that counts the calls of each dispatch, then sends them."""

    def __init__(self, inner):
        self.inner, self.batches = inner, []

    def __call__(self, job_id: str, records: list) -> None:
        self.batches.append(len(records))
        self.inner(job_id, records)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


def test_the_app_speaks_amqp_with_publisher_confirms(rabbit_harness: Harness):
    app = rabbit_harness.runtime().app
    assert app.conf.broker_url.startswith("amqp://")
    assert app.conf.broker_transport_options == {"confirm_publish": True}  # no Redis-only options
    assert broker_of(rabbit_harness.settings, redis_options={"visibility_timeout": 1}).kind == "amqp"
    with app.connection_for_write() as connection:
        assert connection.transport.driver_type == "amqp"


def test_plan_jobs_over_rabbitmq(rabbit_harness: Harness, amqp_names: AmqpNames):
    h = rabbit_harness
    h.tool("square", params={"n": {"type": "integer"}})
    h.tool("total", params={"values": {"type": "object"}})
    h.tool("flaky", params={})
    flaky_runs: list[float] = []

    def flaky(call):
        flaky_runs.append(time.monotonic())
        if len(flaky_runs) < 3:
            raise ConnectionError(f"attempt {len(flaky_runs)} failed")
        return "third time lucky"

    h.activities.register("square", lambda call: call["n"] ** 2, queue=amqp_names.activity("square"))
    h.activities.register("total", lambda call: sum(call["values"].values()), queue=amqp_names.activity("total"))
    h.activities.register("flaky", flaky, retries=2, retry_backoff=0.2, queue=amqp_names.activity("flaky"))
    h.worker(concurrency=4)
    client = h.client()
    dispatched = Counting(client._parts.jobs.dispatcher)
    client._parts.jobs.dispatcher = dispatched
    squares = [{"_tool": "square", "n": n, "_outputPath": f"†state.squares.n{n}"} for n in range(12)]
    handle = client.submit({"calls": [
        *squares,  # twelve ready calls: dispatched at submission in one go
        {"_tool": "total", "values": "†state.squares", "_outputPath": "†state.total"},  # released by the last one
        {"_tool": "flaky", "_outputPath": "†state.flaky"}]})
    record = handle.result(timeout=TIMEOUT)
    assert dispatched.batches == [13]  # the squares and flaky: one dispatch, one producer batch
    assert record["status"] == "succeeded", record
    assert record["state"]["squares"] == {f"n{n}": n * n for n in range(12)}
    assert record["state"]["total"] == sum(n * n for n in range(12))
    assert record["state"]["flaky"] == "third time lucky"
    store = store_of(client)
    assert set(outputs_per_call(store, handle.id).values()) == {1}  # every call wrote its output once
    assert len(engine_messages(store.read_log(handle.id))) == 14
    events = [e.data for e in handle.events(follow=False)]
    retrying = [e for e in events if e["event"] == "call.retrying"]
    assert [e["attempt"] for e in retrying] == [1, 2] and all(e["retry_in_s"] > 0 for e in retrying)
    # the retries were countdown tasks: each attempt started no earlier than its announced wait (less jitter)
    gaps = [b - a for a, b in itertools.pairwise(flaky_runs)]
    assert all(gap >= 0.05 for gap in gaps), gaps
    for queue in ("square", "total", "flaky"):
        assert amqp_names.depth(f"{amqp_names.prefix}.{queue}") == 0  # nothing left behind on the broker


def test_an_agent_tick_retried_with_a_countdown_over_rabbitmq(rabbit_harness: Harness, amqp_names: AmqpNames,
                                                               anthropic_env: FakeAnthropic):
    h = rabbit_harness
    h.tool("weather", params={"city": {"type": "string"}}, output={"type": "object"}, required=["city"])
    h.activities.register("weather", lambda call: {"city": call["city"], "temp_c": 21},
                          queue=amqp_names.activity("weather"))
    h.worker(llm="anthropic", concurrency=4)
    anthropic_env.script(
        Answer.http_error(429, headers={"retry-after": "1"}),  # the tick task retries itself in 1 s
        Answer.solution({"calls": [{"_tool": "weather", "city": "Oslo", "_outputPath": "†state.oslo"}],
                         "output": None}),
        Answer.solution({"calls": [], "output": {"answer": "cold"}}))
    record = h.client().submit({"context": [{"type": "text", "text": "Weather in Oslo?"}],
                                "tools": ["weather"], "output": OUTPUT}).result(timeout=TIMEOUT)
    assert record["status"] == "succeeded", record
    assert record["result"] == {"answer": "cold"}
    assert record["state"] == {"oslo": {"city": "Oslo", "temp_c": 21}}
    asked = [r.received_at for r in anthropic_env.requests]
    assert len(asked) == 3
    assert asked[1] - asked[0] >= 0.9  # the retry waited for retry-after, as a countdown on the broker


def test_cancel_revokes_a_queued_call_through_the_broadcast(rabbit_harness: Harness, amqp_names: AmqpNames):
    from celery.worker import state as worker_state

    h = rabbit_harness
    gate, started = threading.Event(), threading.Event()
    ran: list[str] = []

    def slow(call):
        started.set()
        gate.wait(TIMEOUT)
        return "slow"

    h.tool("slow", params={})
    h.tool("later", params={})
    slow_queue, later_queue = amqp_names.activity("slow"), amqp_names.activity("later")
    h.activities.register("slow", slow, queue=slow_queue)
    later_only = type(h.activities)()

    def later(call: dict) -> str:
        ran.append("later")
        return "later"

    later_only.register("later", later, queue=later_queue)
    # `later` is known (a worker announced it, then stopped), so its call waits on its queue for a worker
    h.worker(activities=later_only, engine=False).stop()
    slow_only = type(h.activities)()
    slow_only.register("slow", slow, queue=slow_queue)
    h.worker(activities=slow_only)
    client = h.client()
    handle = client.submit({"calls": [{"_tool": "slow", "_outputPath": "†state.slow"},
                                      {"_tool": "later", "_outputPath": "†state.later"}]})
    store = store_of(client)
    later_id = next(c for c, r in store.call_records(handle.id).items() if r.tool == "later")
    later_task = task_id(handle.id, later_id)
    try:
        assert started.wait(TIMEOUT), "the slow call never started"
        wait_for(lambda: amqp_names.depth(later_queue) == 1, TIMEOUT, "the later call's task to wait on its queue")
        assert handle.cancel() == "canceled"
        # the revoke went out on the broadcast exchange and reached the live worker
        wait_for(lambda: later_task in worker_state.revoked, TIMEOUT, "the worker to receive the revoke")
    finally:
        gate.set()
    h.worker(activities=later_only, engine=False)  # a worker for the queued task arrives after the cancel
    wait_for(lambda: amqp_names.depth(later_queue) == 0, TIMEOUT, "the revoked task to be taken off its queue")
    assert handle.result(timeout=TIMEOUT)["status"] == "canceled"
    assert ran == []
    assert store.call_statuses(handle.id)[later_id] == "canceled"


def test_a_killed_worker_process_hands_its_call_to_another_at_once(amqp_names: AmqpNames, redis_url: str,
                                                                    tmp_path, record_property):
    """With RabbitMQ, a dead consumer's unacknowledged tasks go back to their queue as soon as its connection
    closes (no visibility timeout to wait for): the other worker takes the call over once the dead attempt's
    lease (2 s here) expired, and the result is committed once."""
    env = {"AGENTQ_BROKER_URL": amqp_names.url, "AGENTQ_ENGINE_QUEUE": amqp_names.queue("engine"),
           "PROCS_QUEUE_PREFIX": amqp_names.prefix, "AGENTQ_VISIBILITY_TIMEOUT_S": "3600"}
    amqp_names.activity("procSlow")
    procs = WorkerProcs(redis_url, tmp_path)
    try:
        workers = [procs.start(["procSlow"], pool="prefork", concurrency=1, **env) for _ in range(2)]
        for proc in workers:
            procs.wait_live(proc, ["procSlow"])
        store = procs.store
        with Client(redis_url, broker_url=amqp_names.url) as client:
            handle = client.submit({"calls": [{"_tool": "procSlow", "seconds": 2.0, "tag": "amqp",
                                               "_outputPath": "†state.slow"}]})
            outputs = lambda: "".join(f"\n--- worker {w.pid} ---\n{w.output()}" for w in workers)  # noqa: E731
            first = int(wait_for(lambda: store.redis.lindex("procs:pids:procSlow:amqp", 0), 20, "procSlow to start",
                                 on_timeout=outputs))
            victim = next(p for p in workers if _is_child_of(first, p.pid))  # the handler runs in a pool child
            killed_at = time.monotonic()
            os.killpg(victim.pid, signal.SIGKILL)  # the whole worker (main process and pool child), no goodbye
            record = handle.result(timeout=40)
            recovered_in = time.monotonic() - killed_at
        record_property("amqp_kill_to_job_end_s", round(recovered_in, 2))
        assert record["status"] == "succeeded", record
        assert store.redis.get("procs:runs:procSlow:amqp") == "2"  # started twice ...
        assert set(outputs_per_call(store, handle.id).values()) == {1}  # ... committed once
        assert record["state"]["slow"]["start"] == 2
        assert recovered_in < 20, f"recovery took {recovered_in:.1f} s"
    finally:
        procs.close()  # before the test's queues are deleted


def _is_child_of(pid: int, parent: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[1]) == parent
    except (OSError, ValueError, IndexError):
        return False
