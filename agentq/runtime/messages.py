"""What agentq puts on the broker besides its tasks' bodies: lean task messages, and Celery task events in groups.

Celery writes every option `send_task` does not know into a message's properties, so what monitoring shows of a
task's arguments (`argsrepr`, `kwargsrepr`) rode in each message twice; `TaskMessages` keeps it in the headers,
where workers and Flower read it.

With task events on, a producer publishes one `task-sent` event per task: a whole kombu publish, as costly as the
task's own. `SentEvents` collects the events of the tasks one dispatch sends and publishes them in groups, as one
`task.multi` event message each. A worker buffers its own task events (received, started, succeeded...) but
Celery's consumer publishes its buffer on the next turn of its event loop, so at any rate below the buffer's size
every event is a publish of its own — in a prefork worker, most of what its main process does per task.
`events_consumer()` gives workers a consumer that publishes the events every task has (received, started,
succeeded) at most `TASK_EVENTS_FLUSH_S` after they happen instead (and when the buffer is full, as before), and any
other (a retry, a failure) on the next turn of the loop, as Celery does. Both are the form workers give their task
events (`task.multi`), which Celery's event receivers, Flower's among them, read as they read single events; the
events themselves are the ones Celery would send.
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Any

from agentq.store.step_constants import EVENTS_GROUP

log = logging.getLogger("agentq.runtime")

SENT_EVENTS_GROUP = EVENTS_GROUP
"""`task-sent` events per `task.multi` message: a dispatch of many tasks shows them to monitoring group by group,
while it goes on."""


TASK_EVENTS_FLUSH_S = 0.1
"""How long a worker's task events may wait in its buffer: what monitoring sees lags by that much at most."""

GROUPED_TASK_EVENTS = frozenset({"task-received", "task-started", "task-succeeded"})
"""The events a worker sends for every task; any other (a retry, a failure, a rejection, a revocation) is published
with those buffered before it on the next turn of the worker's event loop, as Celery publishes every event."""

TASK_EVENTS_GROUP = 24
"""Buffered task events that are published on the next turn of the loop without waiting (Celery's buffer size)."""

_NO_LIMIT = 1 << 30  # the event dispatcher's own limit: it never publishes from the thread that sends an event


def _buffered(dispatcher: Any) -> tuple[int, str | None]:
    """How many task events a worker's event dispatcher holds, and the type of the last (None: not known)."""
    buffered = getattr(dispatcher, "_group_buffer", {}).get("task") if dispatcher is not None else None
    if not buffered:
        return 0, None
    last = buffered[-1:]  # one step: the loop's thread may empty the buffer meanwhile
    return len(buffered), last[0].get("type") if last else None


@functools.cache
def task_messages() -> type:
    """The AMQP class of agentq's Celery apps (defined on first use: importing this module imports no Celery)."""
    from celery.app.amqp import AMQP

    class TaskMessages(AMQP):
        """Celery's task messages without a second copy of `argsrepr` and `kwargsrepr` in their properties."""

        def _create_task_sender(self) -> Any:
            send = super()._create_task_sender()

            def send_task_message(producer: Any, name: str, message: Any, *, argsrepr: Any = None,
                                  kwargsrepr: Any = None, **options: Any) -> Any:
                return send(producer, name, message, **options)

            return send_task_message

    return TaskMessages


class SentEvents:
    """The `task-sent` events of one dispatch, published `group` (`SENT_EVENTS_GROUP`) at a time through its
    producer.

    Passed to `send_task` as its `event_dispatcher`: Celery hands it each task's event (`publish`); `flush`
    publishes what is left. `dispatcher` is an `EventDispatcher` of the app (its hostname, exchange and
    serializer are the events')."""

    def __init__(self, app: Any, dispatcher: Any, producer: Any, group: int = SENT_EVENTS_GROUP):
        self.group = group
        self.app = app
        self.dispatcher = dispatcher
        self.producer = producer
        self.events: list[dict] = []
        self._retry: tuple[bool, Any] = (False, None)

    def publish(self, type: str, fields: dict, producer: Any, *, retry: bool = False, retry_policy: Any = None,
                **_: Any) -> None:
        from celery.events import Event
        from celery.utils.time import utcoffset

        evd = self.dispatcher
        self.events.append(Event(type, hostname=evd.hostname, utcoffset=utcoffset(), pid=evd.pid,
                                 clock=self.app.clock.forward(), **fields))
        self._retry = (retry, retry_policy)
        if len(self.events) >= self.group:
            self.flush()

    def flush(self) -> None:
        """Publish the events collected so far as one `task.multi` message. As for Celery's own `task-sent`, a
        failure to publish them is no failure of the tasks (they were sent)."""
        if not self.events:
            return
        events, self.events = self.events, []
        evd = self.dispatcher
        retry, policy = self._retry
        # the exchange is declared unless kombu declared it on this connection already (its own check, without
        # binding a copy of the exchange to the channel first)
        declared = getattr(self.producer.connection, "declared_entities", None) or ()
        declare = [] if hash(evd.exchange) in declared else [evd.exchange]
        try:
            self.producer.publish(events, routing_key="task.multi", exchange=evd.exchange.name,
                                  declare=declare, serializer=evd.serializer, headers=evd.headers,
                                  delivery_mode=evd.delivery_mode, retry=retry, retry_policy=policy)
        except Exception:
            log.warning("could not publish the task-sent events of %d tasks", len(events), exc_info=True)


@functools.cache
def events_consumer() -> type:
    """The consumer class of agentq's workers: Celery's, publishing buffered task events in groups."""
    from celery.worker.consumer import Consumer

    class GroupedEventsConsumer(Consumer):
        """Celery's worker consumer, whose buffered task events are published `TASK_EVENTS_FLUSH_S` after the first
        of them (Celery's: on the next turn of the event loop), and on the next turn once `TASK_EVENTS_GROUP` are
        buffered or one not in `GROUPED_TASK_EVENTS` is; always in the event loop's thread; and when it stops."""

        _flush_at = 0.0  # until then a flush is scheduled already

        def on_send_event_buffered(self) -> None:  # called by the event dispatcher, in any thread of the worker
            dispatcher = self.event_dispatcher
            if self.hub is None or dispatcher is None:
                return
            # Events are published in the loop's thread only. Celery's dispatcher publishes a full buffer from the
            # thread that sent the last event: a task's thread (threads pool) then publishes on the event
            # connection the loop also reads (AMQP heartbeats), which can take the reply it waits for.
            dispatcher.buffer_limit = _NO_LIMIT
            count, last = _buffered(dispatcher)
            if last not in GROUPED_TASK_EVENTS or count >= TASK_EVENTS_GROUP:
                # a retry, a failure...: on the next turn of the loop, as Celery publishes it, so that it is not
                # overtaken by the events of the task's next delivery on another worker; so is a full group
                self.hub.call_soon(self._flush_events)
                return
            now = time.monotonic()
            if now < self._flush_at:
                return
            self._flush_at = now + TASK_EVENTS_FLUSH_S  # a flush lost with its timer is made up by the next event
            self.hub.call_soon(self._schedule_flush)

        def _schedule_flush(self) -> None:  # in the event loop's own thread, which owns its timers
            self.hub.call_later(TASK_EVENTS_FLUSH_S, self._flush_events)

        def stop(self) -> None:
            self._flush_events()  # what the timer has not published yet
            super().stop()

        def shutdown(self) -> None:
            self._flush_events()
            super().shutdown()

    return GroupedEventsConsumer
