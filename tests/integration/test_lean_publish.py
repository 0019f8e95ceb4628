"""A call's task published lean (`runtime/publish.py`) is the message `send_task` publishes for the same call.

Each case publishes one call's task both ways to the same queue and compares the two messages as the broker
hands them back: on Redis the raw JSON kombu stored (headers, properties, body, encoding), on RabbitMQ what a
`basic_get` reads (headers, properties, body, delivery info); only what the broker or kombu makes per message
(Redis's `delivery_tag`, RabbitMQ's delivery tag and redelivery flag) may differ. The cases cover what differs by
process: a client (no task registered), a worker (the task registered with its time limits, published while one of
its tasks runs: `root_id`, `parent_id`), tracing on (the `traceparent` header), and their `task-sent` events.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import pytest
import redis

from agentq import telemetry
from agentq.engine.routing import Routing
from agentq.engine.signing import TaskSigner
from agentq.protocol.digests import record_digest
from agentq.protocol.records import CallMode, CallRecord
from agentq.runtime.app import Dispatcher, call_argsrepr, create_app, task_id
from agentq.settings import Settings
from tests.integration.rabbitmq import AmqpNames

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def _record(queue: str, n: int = 1) -> CallRecord:
    return CallRecord(id=f"call_{n}", index=n, call={"_tool": "charge", "x": n, "_outputPath": "†state.paid"},
                      tool="charge", activity="charge", mode=CallMode.EXPLICIT, awaited=True, instance="line_2",
                      task="agentq.activity.charge", queue=queue)


def _send_task(dispatcher: Dispatcher, job_id: str, record: CallRecord) -> None:
    """The call's task as the dispatcher published it before: one `send_task` (the reference)."""
    app = dispatcher.app
    args: list[Any] = [job_id, record.id, record.to_task()]
    if dispatcher.signer is not None:
        args.append(dispatcher.signer.sign(job_id, record.id, record_digest(record)))
    with dispatcher.tasks.batch([record.queue], 1) as batch:  # the producer, events and headers the lean path has
        app.send_task(record.task, args=args, argsrepr=call_argsrepr(job_id, record.id, record),
                      kwargsrepr="{}", queue=record.queue, task_id=task_id(job_id, record.id),
                      producer=batch.producer, declare=[], event_dispatcher=batch.events, headers=batch.headers)


@contextmanager
def _running_task(app: Any) -> Iterator[None]:
    """As inside a worker's task: the task `send_task` takes the new task's `root_id` and `parent_id` from."""
    from celery._state import _task_stack

    task = SimpleNamespace(request=SimpleNamespace(id="job_parent.call_0", root_id="job_root.call_0",
                                                   called_directly=False, delivery_info={"priority": None}),
                           add_trail=lambda result: None)  # `send_task` hands it the sent task's AsyncResult
    _task_stack.push(task)
    try:
        assert app.current_worker_task is task
        yield
    finally:
        _task_stack.pop()


def _worker_app(app: Any) -> None:
    """The app as a worker has it: the call's task registered with its time limits, the app finalized."""

    def charge(*args: Any) -> None:
        """The activity's task (never run here)."""

    app.task(name="agentq.activity.charge", shared=False, bind=False, acks_late=True, ignore_result=True,
             soft_time_limit=30, time_limit=50)(charge)
    app.finalize(auto=True)


CASES = ["client", "worker", "traced"]


def _prepare(case: str, app: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    if case == "worker":
        _worker_app(app)
        return _running_task(app)
    if case == "traced":
        monkeypatch.setattr(telemetry, "task_headers", lambda: {"traceparent": TRACEPARENT})
    return _nothing()


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def _both_ways(dispatcher: Dispatcher, record: CallRecord, read: Any) -> tuple[Any, Any]:
    job_id = f"job_{uuid.uuid4().hex[:12]}"
    dispatcher.publish([(job_id, record)])
    lean = read()
    _send_task(dispatcher, job_id, record)
    reference = read()
    return lean, reference


@pytest.mark.parametrize("case", CASES)
def test_on_redis_a_lean_call_task_is_the_message_send_task_publishes(redis_url: str, case: str,
                                                                      monkeypatch: pytest.MonkeyPatch):
    settings = Settings(redis_url=redis_url)
    app = create_app(settings)
    queue = f"test.lean.{uuid.uuid4().hex[:8]}"
    dispatcher = Dispatcher(app, Routing.from_settings(settings), TaskSigner(lambda: b"k" * 32))
    try:
        with on_redis_broker(redis_url, queue) as (client, listener):
            with _prepare(case, app, monkeypatch):
                lean, reference = _both_ways(dispatcher, _record(queue), lambda: take_message(client, queue))
            events = task_events(listener, 2)
    finally:
        app.close()
    assert lean == reference
    assert list(lean["headers"]) == list(reference["headers"])  # in the same order, too
    headers = lean["headers"]
    assert headers["argsrepr"] == call_argsrepr(headers["id"].split(".")[0], "call_1", _record(queue))
    assert (headers["root_id"], headers["parent_id"], headers["timelimit"]) == {
        "client": (headers["id"], None, [None, None]), "traced": (headers["id"], None, [None, None]),
        "worker": ("job_root.call_0", "job_parent.call_0", [50, 30])}[case]
    assert headers.get("traceparent") == (TRACEPARENT if case == "traced" else None)
    body = json.loads(base64.b64decode(lean["body"]))
    assert body[0][:2] == [headers["id"].split(".")[0], "call_1"] and body[1] == {}
    lean_event, reference_event = events
    assert lean_event == reference_event
    assert lean_event["uuid"] == headers["id"] and lean_event["args"] == headers["argsrepr"]


def _events(listener: Any, count: int) -> list[dict]:
    """The next `count` task-sent events published on the Redis broker."""
    events: list[dict] = []
    deadline = time.monotonic() + 10
    while len(events) < count and time.monotonic() < deadline:
        message = listener.get_message(timeout=1)
        if message is not None:
            body = json.loads(base64.b64decode(json.loads(message["data"])["body"]))
            events.extend(e for e in (body if isinstance(body, list) else [body]) if e.get("type") == "task-sent")
    assert len(events) == count
    return events


@contextmanager
def on_redis_broker(redis_url: str, queue: str) -> Iterator[tuple[redis.Redis, Any]]:
    """A client of the Redis broker and a listener of its task events (`task_events`); `queue` deleted after."""
    client = redis.Redis.from_url(redis_url)
    listener = client.pubsub(ignore_subscribe_messages=True)
    listener.psubscribe("*celeryev*")  # the task-sent events, as monitoring receives them
    try:
        yield client, listener
    finally:
        listener.close()
        client.delete(queue)


def take_message(client: redis.Redis, queue: str) -> dict:
    """The one message on the Redis broker's `queue`, taken, without what kombu makes per message."""
    raw = client.rpop(queue)
    assert isinstance(raw, bytes) and client.llen(queue) == 0
    message = json.loads(raw)
    message["properties"].pop("delivery_tag")  # kombu's own, per message
    return message


def task_events(listener: Any, count: int) -> list[dict]:
    """The next `count` task-sent events, without what each event makes anew (its time and clock)."""
    events = _events(listener, count)
    for event in events:
        for made_per_event in ("timestamp", "clock"):
            event.pop(made_per_event)
    return events


@pytest.mark.parametrize("case", CASES)
def test_on_rabbitmq_a_lean_call_task_is_the_message_send_task_publishes(redis_url: str, amqp_names: AmqpNames,
                                                                         case: str,
                                                                         monkeypatch: pytest.MonkeyPatch):
    from kombu import Connection

    settings = Settings(redis_url=redis_url, broker_url=amqp_names.url, engine_queue=amqp_names.queue("engine"))
    app = create_app(settings)
    assert app.conf.broker_transport_options.get("confirm_publish") is True
    queue = amqp_names.queue("lean")
    dispatcher = Dispatcher(app, Routing.from_settings(settings), TaskSigner(lambda: b"k" * 32))
    with Connection(amqp_names.url) as connection:
        channel: Any = connection.channel()

        def read() -> dict:
            message = None
            deadline = time.monotonic() + 10
            while message is None and time.monotonic() < deadline:
                message = channel.basic_get(queue, no_ack=True)
            assert message is not None
            return {"headers": message.headers, "properties": message.properties,
                    "body": message.body, "content_type": message.content_type,
                    "content_encoding": message.content_encoding,
                    "delivery_info": {k: v for k, v in message.delivery_info.items()
                                      if k not in ("delivery_tag", "redelivered", "message_count")}}

        try:
            with _prepare(case, app, monkeypatch):
                lean, reference = _both_ways(dispatcher, _record(queue), read)
        finally:
            app.close()
    lean_id = lean["headers"]["id"]
    assert lean == reference
    assert lean["properties"]["correlation_id"] == lean_id and lean["properties"]["delivery_mode"] == 2
    assert (lean["content_type"], lean["content_encoding"]) == ("application/json", "utf-8")
    assert lean["delivery_info"]["routing_key"] == queue


@pytest.mark.parametrize("case", CASES)
def test_on_redis_an_agent_tick_task_is_the_message_send_task_published(redis_url: str, case: str,
                                                                        monkeypatch: pytest.MonkeyPatch):
    """An agent job's tick task (`Dispatcher.tick`, from a client's submission or a dispatcher's tick) is published
    lean too: the message and `task-sent` event `send_task` published for it, with no trace header when tracing is
    on (`send_task` was given none)."""
    from agentq.engine.routing import TICK_TASK
    from agentq.runtime.app import tick_argsrepr

    queue = f"test.lean.tick.{uuid.uuid4().hex[:8]}"
    settings = Settings(redis_url=redis_url, engine_queue=queue)
    app = create_app(settings)
    dispatcher = Dispatcher(app, Routing.from_settings(settings), None)
    try:
        if case == "worker":  # the tick task as the dispatcher registers it
            def tick(task: Any, job_id: Any = None, n: Any = 0) -> None:
                """The engine's tick task (never run here)."""

            app.task(name=TICK_TASK, bind=True, shared=False, acks_late=True, reject_on_worker_lost=True,
                     max_retries=None)(tick)
            app.finalize(auto=True)
        with on_redis_broker(redis_url, queue) as (client, listener):
            with _prepare(case, app, monkeypatch) if case != "worker" else _running_task(app):
                job_id = f"job_{uuid.uuid4().hex[:12]}"
                dispatcher.tick(job_id, 1)
                assert dispatcher.tasks.template(TICK_TASK, queue) is not None  # lean, not through `send_task`
                lean = take_message(client, queue)
                app.send_task(TICK_TASK, args=[job_id, 1], queue=queue, task_id=f"{job_id}.tick.1",
                              argsrepr=tick_argsrepr(job_id, 1), kwargsrepr="{}")
                reference = take_message(client, queue)
            events = task_events(listener, 2)
    finally:
        app.close()
    assert lean == reference
    assert list(lean["headers"]) == list(reference["headers"])
    headers = lean["headers"]
    assert headers["id"] == f"{job_id}.tick.1" and "traceparent" not in headers
    assert json.loads(base64.b64decode(lean["body"]))[:2] == [[job_id, 1], {}]
    assert events[0] == events[1] and events[0]["uuid"] == headers["id"]
