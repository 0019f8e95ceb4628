"""Tasks the admission step pushes itself (`runtime/pushed.py`): with the broker on the state store's Redis, a call
waiting for admission carries its task's message, and the step pushes it onto the queue's list when it admits the
call, at once or later. What reaches the broker is the message `send_task` publishes for the same call (built when
the call asked to be admitted: by a client, inside a worker's task, traced), in admission order, and its `task-sent`
event is the one `send_task` publishes. Where the broker is anything else, calls wait as `[job id, task]` and are
published by the process that admits them."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
import redis

from agentq.client import Client
from agentq.engine.routing import Routing
from agentq.engine.signing import TaskSigner
from agentq.protocol.admission import PUSHED, AdmissionConfig, Ticket, admission_member
from agentq.protocol.records import WorkerAnnouncement
from agentq.protocol.tools import ToolRegistry
from agentq.runtime.admission import Admission
from agentq.runtime.app import Dispatcher, create_app
from agentq.runtime.pushed import PushedTasks, broker_is_store
from agentq.settings import Settings
from agentq.store.fleet import RedisFleet
from agentq.store.state import StateStore
from tests.integration.test_lean_publish import (
    CASES,
    _prepare,
    _record,
    _send_task,
    on_redis_broker,
    take_message,
    task_events,
)


class _Admitting:
    """An admission of `window` calls at a time (default one) on `queue`, its tasks pushed by the step."""

    def __init__(self, redis_url: str, queue: str, window: int = 1):
        self.settings = Settings(redis_url=redis_url, admission_window=window)
        self.app = create_app(self.settings)
        self.store = StateStore(redis_url)
        self.dispatcher = Dispatcher(self.app, Routing.from_settings(self.settings), TaskSigner(lambda: b"k" * 32))
        # no publisher: an end's step is made at once
        self.admission = Admission(self.store, self.settings, fleet=RedisFleet(self.store))
        self.admission.pushed = PushedTasks(self.dispatcher)
        self.queue = queue

    def close(self) -> None:
        self.store.close()
        self.app.close()


@pytest.mark.parametrize("case", CASES)
def test_a_pushed_task_is_the_message_send_task_publishes_with_its_task_sent_event(
        redis_url: str, case: str, monkeypatch: pytest.MonkeyPatch):
    queue = f"test.pushed.{uuid.uuid4().hex[:8]}"
    admitting = _Admitting(redis_url, queue)
    job_id = f"job_{uuid.uuid4().hex[:12]}"
    first, second = _record(queue, 1), _record(queue, 2)
    admission, dispatcher = admitting.admission, admitting.dispatcher
    admission.know(job_id, "default", None, {})
    try:
        with on_redis_broker(redis_url, queue) as (client, listener):
            with _prepare(case, admitting.app, monkeypatch):
                # nothing to publish: the first pushed at once, the second parked
                assert admission.admit(job_id, [first, second]) == []
                pushed = [take_message(client, queue)]
                parked = admitting.store.redis.lrange(f"agentq:{{admission}}:q:p:{queue}\tdefault\t2", 0, -1)
                assert len(parked) == 1 and parked[0].split("\n", 1)[1].startswith(f"{PUSHED}{queue}\n")
                references = []
                for record in (first, second):
                    _send_task(dispatcher, job_id, record)
                    references.append(take_message(client, queue))
            # the second pushed as the first's place is given back: nothing to publish
            assert admission.ended(job_id, [first.id], []) == []
            pushed.append(take_message(client, queue))
            events = task_events(listener, 4)
    finally:
        admitting.close()
    assert pushed == references
    assert [m["headers"]["id"] for m in pushed] == [f"{job_id}.call_1", f"{job_id}.call_2"]
    by_task: dict[str, list[dict]] = {}
    for event in events:
        by_task.setdefault(event["uuid"], []).append(event)
    assert [len(e) for e in by_task.values()] == [2, 2]
    for pair in by_task.values():
        assert pair[0] == pair[1]  # pushed and referenced: the same event


@pytest.mark.parametrize("case", CASES)
def test_a_payload_made_from_an_envelope_is_the_one_kombu_builds(redis_url: str, case: str,
                                                                 monkeypatch: pytest.MonkeyPatch):
    """After the first task of a name and queue (built through kombu), its payloads are made from an envelope,
    without a kombu publish: the message and `task-sent` event `send_task` publishes, headers in the same order."""
    from kombu import Producer

    queue = f"test.pushed.{uuid.uuid4().hex[:8]}"
    admitting = _Admitting(redis_url, queue, window=8)
    job_id = f"job_{uuid.uuid4().hex[:12]}"
    admission, dispatcher = admitting.admission, admitting.dispatcher
    assert admission.pushed is not None
    messages = admission.pushed.messages
    admission.know(job_id, "default", None, {})
    publishes: list[Any] = []
    publish = Producer.publish
    try:
        with on_redis_broker(redis_url, queue) as (client, listener):
            with _prepare(case, admitting.app, monkeypatch):
                assert messages.payloads([dispatcher.task_of(job_id, _record(queue, 1))]) is None  # not learnt
                assert admission.pushed.payloads([(job_id, _record(queue, 1))]) is not None  # built, learnt

                def counted(*args: Any, **kwargs: Any) -> Any:
                    publishes.append(args)
                    return publish(*args, **kwargs)

                monkeypatch.setattr(Producer, "publish", counted)
                assert admission.admit(job_id, [_record(queue, 2)]) == []  # pushed by the step
                made = take_message(client, queue)
                assert publishes == []  # nothing went through kombu
                _send_task(dispatcher, job_id, _record(queue, 2))
                reference = take_message(client, queue)
            made_event, reference_event = task_events(listener, 2)
    finally:
        admitting.close()
    assert made == reference
    assert list(made["headers"]) == list(reference["headers"])
    assert made["headers"]["id"] == f"{job_id}.call_2"
    assert made_event == reference_event


def test_an_envelope_that_does_not_remake_its_payload_is_not_kept(redis_url: str):
    queue = f"test.pushed.{uuid.uuid4().hex[:8]}"
    admitting = _Admitting(redis_url, queue)
    pushed, dispatcher = admitting.admission.pushed, admitting.dispatcher
    assert pushed is not None
    try:
        tasks = [dispatcher.task_of("job_a", _record(queue, 1))]
        built = pushed.payloads([("job_a", _record(queue, 1))])
        assert built is not None and pushed.messages.payloads(tasks) is not None  # learnt: made from the envelope
        fresh = PushedTasks(dispatcher)  # learns from a payload kombu would not have written (other spacing)
        fresh.messages.learn(tasks, [built[0].replace('", "', '","')], dispatcher.tasks.context(traced=True))
        assert fresh.messages.payloads(tasks) is None  # so every payload goes through kombu
    finally:
        admitting.close()


def test_a_one_call_job_is_submitted_in_one_request_to_redis(redis_url: str):
    """With the broker on the store's Redis, a client submits a one-call job of a live activity in one request:
    the job's write with its admission step, which pushes the task and its event (made from an envelope after the
    first: nothing is published through kombu, nothing else is read or written)."""
    queue = f"test.submit.{uuid.uuid4().hex[:8]}"
    tools = ToolRegistry()
    tools.register("noop", {"type": "object", "properties": {"_tool": {"type": "string", "const": "noop"},
                                                             "i": {"type": "integer"}, "_output": {}}})
    client = Client(settings=Settings(redis_url=redis_url), tools=tools)
    worker = {"id": "w1", "queues": [queue], "activities": [{"name": "noop", "task": "agentq.activity.noop",
                                                              "queue": queue}]}
    client._parts.fleet.announce_worker("w1", WorkerAnnouncement.from_dict(worker), ttl_s=60)
    admin = redis.Redis.from_url(redis_url)

    def requests() -> int:
        return int(admin.info("stats")["total_reads_processed"])  # this INFO's own request counts too

    job = {"calls": [{"_tool": "noop", "i": 1, "_outputPath": "†state.r"}]}
    try:
        client.submit(job)  # the first: the fleet read, the task's template and envelope made
        before = requests()
        for _ in range(3):
            client.submit(job)
        assert requests() - before - 1 == 3
        assert admin.llen(queue) == 4  # every task pushed
    finally:
        admin.close()
        client.close()


def test_a_free_place_goes_to_a_waiting_call_at_once_only_where_the_step_pushes_its_task(redis_url: str):
    """Where the process publishes what a step admits, waiting calls wait for a group of free places (half the
    window here: 2); where the step pushes their tasks, each place goes to one at once."""
    queue = f"test.pushed.{uuid.uuid4().hex[:8]}"
    admitting = _Admitting(redis_url, queue, window=4)
    admission = admitting.admission
    records = [_record(queue, n) for n in range(1, 7)]
    try:
        with on_redis_broker(redis_url, queue) as (client, _):
            admission.know("job_p", "default", None, {})
            assert admission.admit("job_p", records) == []  # four pushed, two waiting
            assert client.llen(queue) == 4
            assert admission.ended("job_p", [records[0].id], []) == []
            assert client.llen(queue) == 5  # one place free: one waiting call pushed
            admission.pushed = None  # this process publishes what its steps admit: records
            admission.know("job_r", "default", None, {})
            later = [_record(queue, n) for n in range(7, 9)]
            assert admission.admit("job_r", later) == []  # the window is full: both wait
            assert admission.ended("job_p", [records[1].id], []) == []  # one free place: less than a group
            assert client.llen(queue) == 5
            # two free places: the call waiting as a task is pushed by the step, the record is to publish
            assert [r.id for _, r in admission.ended("job_p", [records[2].id], [])] == ["call_7"]
            assert client.llen(queue) == 6
    finally:
        admitting.close()


def test_the_step_pushes_what_it_admits_in_admission_order_and_answers_the_rest(redis_url: str):
    store = StateStore(redis_url)
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    listener = client.pubsub(ignore_subscribe_messages=True)
    listener.subscribe("events")
    config = AdmissionConfig(windows={"q": 2}, batch=1)

    def pushed(n: int) -> str:  # calls 0 to 2 with an event each, 3 and 4 without
        return f"{PUSHED}q\n{'events' if n < 3 else ''}\n{'event ' + str(n) if n < 3 else ''}\nmessage {n}"

    try:
        tickets = [Ticket(member=admission_member("job_a", f"c{n}"), queue="q", tenant="a",
                          payload=pushed(n) if n != 2 else '["job_a",{}]') for n in range(5)]
        # c0 and c1 admitted at once and pushed; c2 (a record, not a task), c3 and c4 parked
        assert store.admit_calls(tickets, config) == [PUSHED, PUSHED]
        assert client.lrange("q", 0, -1) == ["message 1", "message 0"]  # LPUSH: a worker pops message 0 first
        assert [_message(listener) for _ in range(2)] == ["event 0", "event 1"]
        # two places back: c2's payload is answered (to publish), c3's task pushed (no event: events off)
        answer = store.admit_calls([], config, ended=[admission_member("job_a", "c0"), admission_member("job_a", "c1")])
        assert answer == ['["job_a",{}]', PUSHED]
        assert client.lrange("q", 0, -1) == ["message 3", "message 1", "message 0"]
        # a task sent again while admitted (a recovery) is pushed again
        assert store.admit_calls([tickets[3]], config) == [PUSHED]
        assert client.llen("q") == 4
        client.publish("events", "the end")
        assert _message(listener) == "the end"  # no event but those of c0 and c1 before it
    finally:
        listener.close()
        store.close()


def _message(listener: Any) -> str:
    """The next message published on the listener's channel (a subscription's confirmation skipped)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        message = listener.get_message(timeout=1)
        if message is not None:
            return str(message["data"])
    raise AssertionError("nothing was published")


def test_a_broker_other_than_agentq_s_redis_transport_gets_calls_as_records(redis_url: str):
    settings = Settings(redis_url=redis_url, broker_url="memory://", admission_window=1)
    app = create_app(settings)
    dispatcher = Dispatcher(app, Routing.from_settings(settings), TaskSigner(lambda: b"k" * 32))
    store = StateStore(redis_url)
    try:
        assert PushedTasks(dispatcher).payloads([("job_a", _record("test.memory"))]) is None
        admission = Admission(store, settings, fleet=RedisFleet(store))
        admission.pushed = PushedTasks(dispatcher)
        admission.know("job_a", "default", None, {})
        assert [r.id for _, r in admission.admit("job_a", [_record("q", 1), _record("q", 2)])] == ["call_1"]
        parked = store.redis.lrange("agentq:{admission}:q:p:q\tdefault\t2", 0, -1)
        assert json.loads(parked[0].split("\n", 1)[1])[0] == "job_a"  # the record, published when admitted
    finally:
        store.close()
        app.close()


@pytest.mark.parametrize(("broker", "cluster", "options", "pushes"), [
    (None, False, {}, True),  # the broker is the store's URL
    ("{url}", False, {}, True),  # named alike
    ("redis://127.0.0.1:1/0", False, {}, False),  # another Redis
    (None, True, {}, False),  # a cluster
    (None, False, {"global_keyprefix": "x:"}, False),  # kombu would prefix the queue's list
])
def test_the_step_pushes_tasks_only_where_the_broker_is_the_store_s_redis(
        redis_url: str, broker: str | None, cluster: bool, options: dict, pushes: bool):
    settings = Settings(redis_url=redis_url, broker_url=broker.format(url=redis_url) if broker else None)
    app = create_app(settings)
    app.conf.broker_transport_options = {**app.conf.broker_transport_options, **options}
    # the store's own connection, told it is a cluster's where the case says so (nothing is sent)
    store = StateStore(redis_url, cluster=cluster, client=redis.Redis.from_url(redis_url))
    try:
        assert broker_is_store(settings, app, store) is pushes
    finally:
        store.close()
        app.close()


def test_a_task_built_into_anything_but_one_push_and_its_event_is_not_pushed():
    from agentq.runtime.pushed import _payloads

    task, event = [("lpush", ("q", "message"))], [("publish", ("events", "event"))]
    assert _payloads([task, event], 1, events=True) == ["!q\nevents\nevent\nmessage"]
    assert _payloads([task], 1, events=False) == ["!q\n\n\nmessage"]
    expiring = [("lpush", ("q", "message")), ("pexpire", ("q", 5000))]  # a queue declared with x-expires
    assert _payloads([expiring, event], 1, events=True) is None
    assert _payloads([task], 1, events=True) is None  # the event is missing
    assert _payloads([[("lpush", ("odd\nname", "message"))]], 1, events=False) is None


def test_the_task_sent_events_of_the_calls_one_step_admits_go_out_as_one_message_per_channel(redis_url: str):
    """Five calls admitted by one step: their tasks pushed one by one, their `task-sent` events in one `task.multi`
    message, which Celery's event receiver reads as it reads a dispatch's own: the five events, as each call's
    builder made them."""
    from celery.events.receiver import EventReceiver

    queue = f"test.pushed.{uuid.uuid4().hex[:8]}"
    admitting = _Admitting(redis_url, queue, window=8)
    records = [_record(queue, n) for n in range(1, 6)]
    admission = admitting.admission
    admission.know("job_g", "default", None, {})
    try:
        with on_redis_broker(redis_url, queue) as (client, listener):
            assert admission.admit("job_g", records) == []
            assert client.llen(queue) == 5
            client.publish("end.celeryev", "the end")
            messages: list[bytes] = []
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and b"the end" not in messages:
                if (message := listener.get_message(timeout=1)) is not None:
                    messages.append(message["data"])
            assert messages.pop() == b"the end"
            assert len(messages) == 1  # one PUBLISH for the five
        received: list[dict] = []
        with admitting.app.connection_for_read() as connection:
            receiver = EventReceiver(connection, handlers={"*": received.append}, app=admitting.app)
            channel = connection.default_channel
            payload = json.loads(messages[0])
            receiver._receive(channel.Message(payload, channel=channel).decode(), None)
    finally:
        admitting.close()
    assert [e["type"] for e in received] == ["task-sent"] * 5
    assert [e["uuid"] for e in received] == [f"job_g.{r.id}" for r in records]
    assert {e["queue"] for e in received} == {queue}


def test_an_event_message_made_joinable_reads_as_before_and_anything_else_is_left_as_it_is():
    import base64

    from agentq.runtime.pushed import _joinable

    event = {"type": "task-sent", "uuid": "u", "name": "é"}
    body = base64.b64encode(json.dumps([event]).encode()).decode()
    message = json.dumps({"body": body, "content-type": "application/json", "headers": {},
                          "properties": {"body_encoding": "base64", "delivery_tag": "t"}})
    joinable = _joinable(message)
    assert joinable.startswith('{"body": "WyAg')  # "[  ", then the event padded to a multiple of three bytes
    decoded = json.loads(joinable)
    assert json.loads(base64.b64decode(decoded.pop("body"))) == [event]
    assert decoded == {k: v for k, v in json.loads(message).items() if k != "body"}
    assert base64.b64decode(json.loads(joinable)["body"]).endswith(b"  ]")
    for other in ("event", json.dumps({"body": body, "properties": {}}), json.dumps({"body": "e30="})):
        assert _joinable(other) == other  # not JSON; not base64-encoded; not a list
