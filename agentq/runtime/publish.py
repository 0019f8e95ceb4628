"""Call tasks (and agent jobs' tick tasks) published lean: each task's Celery message copied from a template made
once per task name and queue.

`app.send_task` does per task what the tasks of agentq's calls need done once: it looks the task up in the app's
registry and merges its options, asks the router for the queue (the dispatcher names it), reads a dozen settings
through Celery's layered configuration, builds the whole message (headers, properties, body, the `task-sent`
event) field by field with the process's node name, sends the publish signals, and makes an `AsyncResult` agentq
never reads. `CallTasks` (one per `Dispatcher`) reads the settings once, as Celery's own task sender does, and keeps
one template per task name and queue, built by Celery's own `create_task_message` (made again after a fork, or when
the task registered under that name changes); a batch (`CallTasks.batch`: one producer, the queues declared once,
one kombu publish batch, the `task-sent` events grouped by `SentEvents`) finds the running task its tasks descend
from and the reply address once, and per task copies the template, sets what differs (the id, `root_id`,
`parent_id`, `argsrepr`, the trace headers) and hands it to kombu's `Producer.publish` with the options `send_task`
would have given it.

The message is the one `send_task` publishes for the same call, field for field (headers, properties, body, its
`task-sent` event; `tests/integration/test_lean_publish.py` compares the two as read back from the broker). Where
the app or the process asks for something the template does not do, a task goes through `send_task` as before: a
receiver of the publish signals (`before_task_publish`, `after_task_publish`, `task_sent`), a routing table
(`task_routes`), a result backend (agentq's apps have none), a task protocol other than 2, a parent task whose
priority is inherited (`task_inherit_parent_priority`), a queue whose exchange is not direct, or a task registered
in this process with publishing options other than its time limits and the app's serializer. One thing `send_task`
does is left out on purpose: it adds each task's `AsyncResult` to the trail of the task running in the worker
(`request.children`), which only a result backend stores, and agentq ignores results.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from agentq import telemetry
from agentq.runtime.messages import SENT_EVENTS_GROUP, SentEvents
from agentq.runtime.redis_transport import CapturesPublications, Commands, captured_publications

PUBLISH_BATCH_OPERATIONS = SENT_EVENTS_GROUP + 1
"""Transport operations per publish batch: with a Redis broker a task is one (its LPUSH) and the `task-sent`
events of `SENT_EVENTS_GROUP` tasks one more (a PUBLISH), so a batch is 32 tasks and their events. Small enough
that workers start on the first tasks of a large submission while the rest are still being built; large enough that
the round trips do not count."""

_TEMPLATE_ID = "\x00agentq-template"  # the task id a template is made with (never a real one)

# the publishing options of a registered task (Celery's `extract_exec_options`) a template carries itself
_TEMPLATE_OPTIONS = frozenset({"time_limit", "soft_time_limit", "serializer"})


class NotKept(Exception):
    """Tasks cannot be built without being sent on this broker (`CallTasks.kept`)."""


def publish_batch(producer: Any, operations: int) -> Any:
    """Several publishes (tasks, their `task-sent` events) go out in batches where the transport batches them
    (Redis: a pipeline, one round trip, per `PUBLISH_BATCH_OPERATIONS`); kombu publishes them one by one
    elsewhere, and so do kombu versions without batches."""
    batch = getattr(producer, "batch", None)
    if operations > 1 and batch is not None:
        return batch(max_size=PUBLISH_BATCH_OPERATIONS)
    return contextlib.nullcontext()


def declare_queues(app: Any, producer: Any, names: Iterable[str]) -> None:
    """Declare the queues tasks are about to be sent to, with the retries a task's publication has, unless kombu
    declared them on this connection already (it remembers them by hash: then nothing is sent)."""
    conf = app.conf
    declared = getattr(producer.connection, "declared_entities", None) or ()
    for name in names:
        queue = app.amqp.queues[name]
        if hash(queue) not in declared:
            producer.maybe_declare(queue, retry=conf.task_publish_retry, **(conf.task_publish_retry_policy or {}))


@dataclass(frozen=True)
class Template:
    """One task name's message on one queue as `send_task` builds it, with a placeholder id and no parent."""

    task: Any  # the task registered under the name when it was made (None: none)
    headers: dict[str, Any]
    embed: dict[str, Any]  # the body's third part (callbacks, errbacks, chain, chord)
    sent_event: dict[str, Any]
    options: dict[str, Any]  # what `Producer.publish` is given besides the body, headers and properties


@dataclass(frozen=True)
class _Settings:
    """The app's settings a task's publication reads, read once (Celery's task sender reads most of them once)."""

    serializer: str
    compression: str | None
    retry: bool
    retry_policy: dict[str, Any]
    delivery_mode: Any
    lean: bool  # the app publishes as the templates do: protocol 2, no routing table, no result backend (whose
    # `on_task_call` `send_task` would call)
    inherit_priority: bool
    sent_event: bool  # `task-sent` events (`task_send_sent_event`)

    @classmethod
    def of(cls, app: Any) -> _Settings:
        conf = app.conf
        return cls(serializer=conf.task_serializer, compression=conf.task_compression,
                   retry=conf.task_publish_retry, retry_policy=dict(conf.task_publish_retry_policy or {}),
                   delivery_mode=conf.task_default_delivery_mode,
                   lean=conf.task_protocol == 2 and not app.amqp.router.routes and not conf.result_backend,
                   inherit_priority=bool(conf.task_inherit_parent_priority),
                   sent_event=bool(conf.task_send_sent_event))


@dataclass(frozen=True)
class SendContext:
    """What every task sent at one time by one thread shares: the reply address (`app.thread_oid`, per thread), the
    running task the tasks descend from (`root_id`, `parent_id`: None outside a worker's task), the trace headers
    (`telemetry.task_headers`: None when tracing is off or not asked for), whether the app sends `task-sent`
    events, and whether the tasks can be published lean (`lean`: the app publishes as the templates do, nobody
    listens to the publish signals, and no parent's priority is inherited)."""

    reply_to: str
    root_id: str | None
    parent_id: str | None
    headers: dict[str, Any] | None
    sent_event: bool
    lean: bool

    @classmethod
    def of(cls, tasks: CallTasks, *, traced: bool) -> SendContext:
        from celery import signals

        app = tasks.app
        parent = app.current_worker_task
        settings = tasks.settings()
        listened = any(s.receivers for s in (signals.before_task_publish, signals.after_task_publish,
                                             signals.task_sent))
        return cls(reply_to=app.thread_oid,
                   root_id=(parent.request.root_id or parent.request.id) if parent else None,
                   parent_id=parent.request.id if parent else None,
                   headers=telemetry.task_headers() if traced else None,  # the trace the tasks continue
                   sent_event=settings.sent_event,
                   lean=settings.lean and not listened and not (parent is not None and settings.inherit_priority))


class CallTasks:
    """Publishes call tasks for one app: `batch()` gives the `TaskBatch` that sends them. Shared by every thread of
    the process (the templates are built again where two threads miss one at once: the same template)."""

    def __init__(self, app: Any):
        self.app = app
        self._settings: _Settings | None = None
        self._templates: dict[tuple[str, str], Template | None] = {}
        self._pid = 0  # the process the templates were made in (their `origin` names it)
        self._events: Any = None  # the app's event dispatcher for `task-sent` events (made on first use)

    @contextlib.contextmanager
    def batch(self, queues: Iterable[str], tasks: int, *, traced: bool = True) -> Iterator[TaskBatch]:
        """Publish up to `tasks` tasks to `queues` through one producer: each queue declared once (kombu would copy
        and bind it for each task), one kombu publish batch, their `task-sent` events grouped (`SentEvents`).
        `traced`: the tasks carry the trace of the span sending them (`telemetry.task_headers`)."""
        with self._producer(queues) as producer:
            events = SentEvents(self.app, self.event_dispatcher(), producer)
            batch = self._task_batch(producer, events, traced)
            with publish_batch(producer, tasks * (2 if batch.sent_event else 1)):
                yield batch
                events.flush()

    @contextlib.contextmanager
    def kept(self, queues: Iterable[str]) -> Iterator[tuple[TaskBatch, list[Commands]]]:
        """Build tasks as `batch` publishes them, and send nothing: the Redis commands of each publication are kept
        instead (`captured_publications`: a Redis broker of agentq's transport), each task's (its LPUSH) followed by
        its `task-sent` event's, when events are on (a PUBLISH of a `task.multi` message of that one event).
        `NotKept`: the broker's channel cannot keep them (nothing was built)."""
        with self._producer(queues) as producer:
            if not isinstance(producer.channel, CapturesPublications) or not hasattr(producer, "batch") or \
                    getattr(getattr(producer, "_batch_local", None), "current", None) is not None:
                # another transport, a kombu without publish batches, or a batch open already (it would send)
                raise NotKept("the broker's channel would send the tasks")
            events = SentEvents(self.app, self.event_dispatcher(), producer, group=1)
            batch = self._task_batch(producer, events, True)
            with captured_publications() as commands, producer.batch():
                yield batch, commands

    @contextlib.contextmanager
    def _producer(self, queues: Iterable[str]) -> Iterator[Any]:
        """A producer of the app's pool, `queues` declared on its connection."""
        if self._pid != os.getpid():  # a fork: the templates name the parent process
            self._templates, self._pid = {}, os.getpid()
        with self.app.producer_or_acquire() as producer:
            declare_queues(self.app, producer, queues)
            yield producer

    def _task_batch(self, producer: Any, events: SentEvents, traced: bool) -> TaskBatch:
        return TaskBatch(self, producer, events, self.context(traced=traced))

    def context(self, *, traced: bool) -> SendContext:
        """What the tasks sent now, in this thread, share (`SendContext`)."""
        return SendContext.of(self, traced=traced)

    def fresh(self) -> bool:
        """Whether the templates were made in this process (after a fork they are made again: their `origin`)."""
        return self._pid == os.getpid()

    def settings(self) -> _Settings:
        settings = self._settings
        if settings is None:
            settings = self._settings = _Settings.of(self.app)
        return settings

    def template(self, name: str, queue: str) -> Template | None:
        """The message of the task `name` on `queue` (None: it goes through `send_task`)."""
        task = self.app._tasks.get(name)  # the registry as `send_task` reads it: without finalizing the app
        key = (name, queue)
        if key in self._templates:
            template = self._templates[key]
            if template is None or template.task is task:
                return template
        template = self._templates[key] = self._make_template(name, queue, task)
        return template

    def _make_template(self, name: str, queue_name: str, task: Any) -> Template | None:
        settings = self.settings()
        options = _registered_options(task)
        exchange = self.app.amqp.queues[queue_name].exchange
        if options is None or exchange.type != "direct":
            return None
        message = self.app.amqp.create_task_message(
            _TEMPLATE_ID, name, (), {}, time_limit=options.get("time_limit"),
            soft_time_limit=options.get("soft_time_limit"), create_sent_event=True, ignore_result=None,
            argsrepr="", kwargsrepr="{}")
        sent_event = message.sent_event
        sent_event.update({"queue": queue_name, "exchange": "", "routing_key": queue_name})
        return Template(
            task=task, headers=message.headers, embed=message.body[2], sent_event=sent_event,
            options={"exchange": "", "routing_key": queue_name,
                     "serializer": options.get("serializer") or settings.serializer,
                     "compression": settings.compression, "retry": settings.retry,
                     "retry_policy": settings.retry_policy,
                     "delivery_mode": exchange.delivery_mode or settings.delivery_mode,
                     "timeout": None, "confirm_timeout": None})

    def event_dispatcher(self) -> Any:
        """The app's event dispatcher whose hostname, pid, exchange and serializer the `task-sent` events have."""
        if self._events is None:
            self._events = self.app.events.Dispatcher(enabled=False)  # publishes through the given producer only
        return self._events


class TaskBatch:
    """The tasks of one batch, published through `producer`: each the message `send_task` would publish, and its
    `task-sent` event (when `sent_event`) handed to `events` (`SentEvents`). `headers` are added to every task's.
    Made in the thread that publishes: the running task the tasks descend from is the one running now."""

    def __init__(self, tasks: CallTasks, producer: Any, events: SentEvents, context: SendContext):
        self.tasks = tasks
        self.producer = producer
        self.events = events
        self.context = context
        self.headers = context.headers
        self.sent_event = context.sent_event
        self.reply_to = context.reply_to
        self.root_id = context.root_id
        self.parent_id = context.parent_id
        self.lean = context.lean

    def send(self, name: str, queue: str, task_id: str, args: list[Any], argsrepr: str) -> None:
        """Publish the task `name` with positional `args` (and no keyword arguments) to `queue`."""
        template = self.tasks.template(name, queue) if self.lean else None
        if template is None:
            self.tasks.app.send_task(name, args=args, argsrepr=argsrepr, kwargsrepr="{}", queue=queue,
                                     task_id=task_id, producer=self.producer, declare=[],
                                     event_dispatcher=self.events, headers=self.headers)
            return
        headers = task_headers(template, self.context, task_id, argsrepr)
        try:
            self.producer.publish((args, {}, template.embed), headers=headers, declare=[], correlation_id=task_id,
                                  reply_to=self.reply_to, **template.options)
        except Exception as error:  # raised as `send_task` raises it (kombu's `_reraise_as_library_errors`)
            library_error = _library_error(self.producer.connection, error)
            if library_error is None:
                raise
            raise library_error from error
        if self.sent_event:
            self.events.publish("task-sent", sent_fields(template, self.context, task_id, argsrepr), self.producer,
                                retry=template.options["retry"], retry_policy=template.options["retry_policy"])


def task_headers(template: Template, context: SendContext, task_id: str, argsrepr: str) -> dict[str, Any]:
    """The headers of the task `task_id` made from `template`, sent in `context`."""
    headers = template.headers.copy()
    headers.update(id=task_id, root_id=context.root_id or task_id, parent_id=context.parent_id, argsrepr=argsrepr)
    if context.headers:
        headers.update(context.headers)
    return headers


def sent_fields(template: Template, context: SendContext, task_id: str, argsrepr: str) -> dict[str, Any]:
    """The fields of the `task-sent` event of the task `task_id` made from `template`, sent in `context` (the
    event dispatcher adds its host, pid, clock and time)."""
    event = template.sent_event.copy()
    event.update(uuid=task_id, root_id=context.root_id or task_id, parent_id=context.parent_id, args=argsrepr)
    return event


def _registered_options(task: Any) -> dict[str, Any] | None:
    """The publishing options `send_task` takes from `task`, the task registered under a name in this process
    (none when None), or None when they hold one a template does not carry."""
    get_options = getattr(task, "_get_exec_options", None)
    if get_options is None:
        return {}
    options = {k: v for k, v in (get_options() or {}).items() if v is not None}
    if set(options) - _TEMPLATE_OPTIONS:
        return None
    return options


def _library_error(connection: Any, error: Exception) -> Exception | None:
    """The kombu error `send_task` raises for `error`, raised while publishing on `connection` (None: `error`)."""
    from kombu.exceptions import OperationalError

    if isinstance(error, OperationalError):
        return None
    if isinstance(error, (*connection.recoverable_connection_errors, *connection.recoverable_channel_errors)):
        return OperationalError(str(error))
    return None
