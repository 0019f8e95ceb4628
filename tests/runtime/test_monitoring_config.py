"""What monitoring shows, unit by unit: the Celery app's settings, a task's shown arguments and message, worker node
names and the FAILURE message (the real Flower and worker processes are in tests/integration/test_flower.py)."""

from __future__ import annotations

import base64
import json
import socket
import time
import uuid

import redis

from agentq.engine.routing import Routing
from agentq.engine.signing import TaskSigner
from agentq.protocol.digests import record_digest
from agentq.protocol.records import CallMode, CallRecord, ErrorInfo
from agentq.runtime.app import Dispatcher, call_argsrepr, create_app, failed_call_message, tick_argsrepr
from agentq.runtime.messages import SENT_EVENTS_GROUP, TASK_EVENTS_FLUSH_S, TASK_EVENTS_GROUP, events_consumer
from agentq.runtime.nodes import node_name
from agentq.settings import Settings

HOST = socket.gethostname()


def test_the_app_sends_task_events_prefetches_one_and_acks_late():
    conf = create_app(Settings(redis_url="redis://127.0.0.1:1/0")).conf
    assert (conf.worker_send_task_events, conf.task_send_sent_event) == (True, True)
    assert (conf.worker_prefetch_multiplier, conf.task_acks_late, conf.task_reject_on_worker_lost) == (1, True, True)
    quiet = create_app(Settings(redis_url="redis://127.0.0.1:1/0", task_events=False)).conf
    assert (quiet.worker_send_task_events, quiet.task_send_sent_event) == (False, False)


def test_the_shown_arguments_name_job_call_tool_and_instance_never_parameters():
    record = CallRecord(id="call_1", index=0, call={"_tool": "charge", "card": {"number": "4111 1111 1111 1111"}},
                        tool="charge", activity="charge", mode=CallMode.EXPLICIT, awaited=True, instance="line_2")
    shown = call_argsrepr("job_1", "call_1", record)
    assert shown == "['job_1', 'call_1', {'tool': 'charge', 'instance': 'line_2'}]"
    assert "4111" not in shown
    assert call_argsrepr("job_1", "call_1", None) == "['job_1', 'call_1', '<no record>']"
    assert tick_argsrepr("job_1", 3) == "['job_1', 3]"


def test_worker_names_carry_the_real_hostname_and_are_stable():
    assert node_name(None, engine=False) == f"agentq-worker@{HOST}"
    assert node_name(None, engine=True) == f"agentq-dispatcher@{HOST}"  # with -m too: a dispatcher is one
    assert node_name(None, engine=False) == node_name(None, engine=False)


def test_hostname_overrides_with_celery_expansions():
    first_label, _, domain = HOST.partition(".")
    assert node_name("orders-2@%h", engine=False) == f"orders-2@{HOST}"
    assert node_name("%n-w@%d", engine=False) == f"{first_label}-w@{domain}"
    assert node_name("box.example", engine=False) == "agentq-worker@box.example"  # a bare host
    assert node_name("w@box", engine=True) == "w@box"


def test_the_failure_message_names_call_job_and_error():
    message = failed_call_message("job_1", "call_2", ErrorInfo("RuntimeError", "card [redacted] declined"))
    assert message == "call call_2 of job job_1 failed: RuntimeError: card [redacted] declined"
    assert failed_call_message("job_1", "call_2", None) == "call call_2 of job job_1 failed: Error: "


def test_a_call_task_message_carries_its_record_once_and_its_shown_arguments_in_the_headers(redis_url):
    settings = Settings(redis_url=redis_url)
    app = create_app(settings)
    signer = TaskSigner(lambda: b"k" * 32)
    plain = CallRecord(id="call_1", index=0, call={"_tool": "charge", "x": 1}, tool="charge", activity="charge",
                   mode=CallMode.EXPLICIT, awaited=True, task="agentq.activity.charge", queue="test.messages")
    instanced = CallRecord(id="call_2", index=1, call={"_tool": "charge", "x": 2}, tool="charge", activity="charge",
                       mode=CallMode.EXPLICIT, awaited=False, instance="line_2", scopes=("state",), needs_log=True,
                       locale="fr", task="agentq.activity.charge", queue="test.messages")
    client = redis.Redis.from_url(redis_url)
    client.delete("test.messages")
    try:
        Dispatcher(app, Routing.from_settings(settings), signer)("job_1", [plain, instanced])
        messages = [json.loads(m) for m in reversed(client.lrange("test.messages", 0, -1))]
    finally:
        client.delete("test.messages")
        app.close()
    assert [m["headers"]["argsrepr"] for m in messages] == [call_argsrepr("job_1", r.id, r) for r in (plain, instanced)]
    assert all("argsrepr" not in m["properties"] and "kwargsrepr" not in m["properties"] for m in messages)
    for message, record in zip(messages, (plain, instanced), strict=True):
        (job_id, call_id, carried, signature), _, _ = json.loads(base64.b64decode(message["body"]))
        assert (job_id, call_id) == ("job_1", record.id)
        assert CallRecord.from_dict(carried) == record  # what the task leaves out, reading it back gives
        assert signer.verify("job_1", record.id, record_digest(CallRecord.from_dict(carried)), signature)
    plain_carried = json.loads(base64.b64decode(messages[0]["body"]))[0][2]
    assert not {"instance", "scopes", "needs_log", "locale"} & set(plain_carried)  # defaults are left out


def test_the_task_sent_events_of_a_dispatch_go_out_in_groups_as_workers_send_theirs(redis_url) -> None:
    settings = Settings(redis_url=redis_url)
    app = create_app(settings)
    job_id = f"job_{uuid.uuid4().hex}"
    records = [CallRecord(id=f"call_{i}", index=i, call={"_tool": "charge", "x": i}, tool="charge",
                          activity="charge", mode=CallMode.EXPLICIT, awaited=True, task="agentq.activity.charge",
                          queue="test.events") for i in range(SENT_EVENTS_GROUP + 8)]
    client = redis.Redis.from_url(redis_url)
    listener = client.pubsub(ignore_subscribe_messages=True)
    listener.psubscribe("*celeryev*")  # kombu's fanout of the event exchange over Redis
    published: list[tuple[str, list[dict]]] = []  # (routing key, events) of the messages about this job's tasks
    try:
        Dispatcher(app, Routing.from_settings(settings))(job_id, records)
        deadline = time.monotonic() + 10
        while sum(len(events) for _, events in published) < len(records) and time.monotonic() < deadline:
            message = listener.get_message(timeout=1)  # None also for the subscription's own confirmation
            if message is None:
                continue
            body = json.loads(base64.b64decode(json.loads(message["data"])["body"]))
            events = body if isinstance(body, list) else [body]
            if any(str(event.get("uuid", "")).startswith(job_id) for event in events):
                published.append((message["channel"].decode().rsplit("/", 1)[1], events))
    finally:
        listener.close()
        client.delete("test.events")
        app.close()
    assert [(key, len(events)) for key, events in published] == [("task.multi", SENT_EVENTS_GROUP), ("task.multi", 8)]
    events = [event for _, group in published for event in group]
    assert {event["type"] for event in events} == {"task-sent"}
    assert [event["uuid"] for event in events] == [f"{job_id}.{r.id}" for r in records]
    assert {(event["name"], event["queue"]) for event in events} == {("agentq.activity.charge", "test.events")}
    assert all(event["hostname"] and event["clock"] and event["timestamp"] for event in events)


class _Hub:
    """What the consumer asks of Celery's event loop: callbacks for its next turn and timers."""

    def __init__(self) -> None:
        self.soon: list = []
        self.later: list[tuple[float, object]] = []

    def call_soon(self, callback) -> None:
        self.soon.append(callback)

    def call_later(self, delay: float, callback) -> None:
        self.later.append((delay, callback))

    def turn(self) -> None:
        soon, self.soon = self.soon, []
        for callback in soon:
            callback()


class _Dispatcher:
    """A worker's event dispatcher as the consumer sees it: the task events it buffered, and its flushes."""

    def __init__(self) -> None:
        self.flushes = 0
        self.buffer_limit = 24  # Celery's: it publishes a full buffer itself, in the thread that sent the event
        self._group_buffer: dict[str, list[dict]] = {"task": []}

    def send(self, type: str) -> None:
        self._group_buffer["task"].append({"type": type})

    def flush(self) -> None:
        self.flushes += 1
        self._group_buffer["task"] = []


class _Steps:
    def stop(self, parent: object) -> None:
        pass


def test_a_worker_publishes_its_buffered_task_events_once_per_flush_period(monkeypatch):
    consumer_class = events_consumer()
    consumer = consumer_class.__new__(consumer_class)  # the scheduling alone, without a broker connection
    hub, events = consumer.hub, consumer.event_dispatcher = _Hub(), _Dispatcher()
    now = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])

    def send(type: str) -> None:
        events.send(type)
        consumer.on_send_event_buffered()

    for _ in range(7):  # events buffered within one period: one flush is scheduled, in the loop's thread
        for type in ("task-received", "task-started", "task-succeeded"):
            send(type)
    assert len(hub.soon) == 1 and hub.later == []
    assert events.buffer_limit > 10_000  # the dispatcher never publishes from the sending thread itself
    hub.turn()
    assert [delay for delay, _ in hub.later] == [TASK_EVENTS_FLUSH_S]
    assert events.flushes == 0  # Celery's consumer would have published on this turn
    hub.later.pop()[1]()
    assert events.flushes == 1

    now[0] += TASK_EVENTS_FLUSH_S  # the next event after the period schedules the next flush
    send("task-received")
    hub.turn()
    assert len(hub.later) == 1 and events.flushes == 1
    send("task-retried")  # anything but the events of every task: published on the next turn, with what is buffered
    hub.turn()
    assert events.flushes == 2

    for _ in range(TASK_EVENTS_GROUP):  # a full group: published on the next turn, without waiting
        send("task-succeeded")
    hub.turn()
    assert events.flushes == 3

    send("task-received")
    consumer.blueprint = _Steps()  # what Celery's stop goes on with: not under test here
    consumer.stop()  # a stopping worker publishes what is buffered, timer or not
    assert events.flushes == 4
