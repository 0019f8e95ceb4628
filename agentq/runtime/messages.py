"""What agentq's call tasks look like on the broker: lean task messages and their `task-sent` events in groups.

Celery writes every option `send_task` does not know into a message's properties, so what monitoring shows of a
task's arguments (`argsrepr`, `kwargsrepr`) rode in each message twice; `TaskMessages` keeps it in the headers,
where workers and Flower read it.

With task events on, a producer publishes one `task-sent` event per task: a whole kombu publish, as costly as the
task's own. `SentEvents` collects the events of the tasks one dispatch sends and publishes them in groups, as one
`task.multi` event message each (the form workers give their own task events; Celery's event receivers, Flower's
among them, read both forms alike). The events themselves are the ones Celery would send.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

log = logging.getLogger("agentq.runtime")

SENT_EVENTS_GROUP = 32
"""`task-sent` events per `task.multi` message: a dispatch of many tasks shows them to monitoring group by group,
while it goes on."""


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
    """The `task-sent` events of one dispatch, published `SENT_EVENTS_GROUP` at a time through its producer.

    Passed to `send_task` as its `event_dispatcher`: Celery hands it each task's event (`publish`); `flush`
    publishes what is left. `dispatcher` is an `EventDispatcher` of the app (its hostname, exchange and
    serializer are the events')."""

    def __init__(self, app: Any, dispatcher: Any, producer: Any):
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
        if len(self.events) >= SENT_EVENTS_GROUP:
            self.flush()

    def flush(self) -> None:
        """Publish the events collected so far as one `task.multi` message. As for Celery's own `task-sent`, a
        failure to publish them is no failure of the tasks (they were sent)."""
        if not self.events:
            return
        events, self.events = self.events, []
        evd = self.dispatcher
        retry, policy = self._retry
        try:
            self.producer.publish(events, routing_key="task.multi", exchange=evd.exchange.name,
                                  declare=[evd.exchange], serializer=evd.serializer, headers=evd.headers,
                                  delivery_mode=evd.delivery_mode, retry=retry, retry_policy=policy)
        except Exception:
            log.warning("could not publish the task-sent events of %d tasks", len(events), exc_info=True)
