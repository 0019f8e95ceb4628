"""The Celery app factory, the dispatcher, and the tasks agentq registers on an app.

This is the only module that builds a Celery app (the composition root, `runtime/root.py`, calls it and
registers the tasks a worker serves; this module never imports the root). Settings are explicit (no `current_app`, no
`shared_task`): JSON only, acks late with reject-on-worker-lost so a killed worker's call is redelivered,
results ignored because outputs live in the state store, task events on (Flower, `celery events`). A task
that cannot reach the state store is retried (`task.retry`), never acknowledged as done (`engine/outages.py`).

What monitoring shows of a task is true (docs/monitoring.md): a call that failed after its retries ends its task in
FAILURE (the task raises `CallFailedError` once the failure is committed), a retry is RETRY, anything else
SUCCESS with the outcome as its result; a task's shown arguments (`argsrepr`) name the job, the call, the tool
and the instance, never the call's parameters.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from agentq import telemetry
from agentq.engine.outages import store_backoff_s
from agentq.engine.routing import (
    LATENT_TASK,
    MODULE_TASK,
    SUBMIT_TASK,
    TICK_TASK,
    WAIT_TASK,
    Routing,
    activity_task,
    tick_task_id,
)
from agentq.engine.signing import TaskSigner
from agentq.errors import CallFailedError, RateLimited, StoreUnavailableError
from agentq.protocol.activities import ActivityRegistry
from agentq.protocol.digests import record_digest
from agentq.protocol.ids import job_id_problem
from agentq.protocol.records import CallRecord, ErrorInfo, OutcomeStatus
from agentq.protocol.tenants import DEFAULT_TENANT
from agentq.runtime.broker import broker_of
from agentq.runtime.messages import task_messages
from agentq.runtime.publish import CallTasks, TaskBatch
from agentq.settings import Settings

if TYPE_CHECKING:
    from agentq.engine.executor import Executor
    from agentq.runtime.admission import Admission
    from agentq.runtime.service import JobService

log = logging.getLogger("agentq.runtime")


def create_app(settings: Settings, *, name: str = "agentq") -> Any:
    """A Celery app configured for agentq; producers (clients) and workers both use it."""
    from celery import Celery

    broker = broker_of(settings, redis_options=broker_transport_options(settings))  # Redis, Sentinel or RabbitMQ
    app = Celery(name, broker=broker.url, set_as_current=False, amqp=task_messages())
    app.conf.update(
        task_serializer="json",
        result_serializer="json",
        event_serializer="json",
        accept_content=["json"],
        result_accept_content=["json"],
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_ignore_result=True,
        result_backend=None,
        task_default_queue=settings.engine_queue,
        task_create_missing_queues=True,
        worker_prefetch_multiplier=settings.prefetch_multiplier,
        broker_transport_options=broker.transport_options,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        # a lost broker connection (with a Redis broker on the state store's server: a store outage) must not
        # kill running activities: they finish and their result is held until the store answers; a copy the
        # broker redelivers meanwhile finds the call's lease and waits
        worker_cancel_long_running_tasks_on_connection_loss=False,
        worker_enable_remote_control=True,
        worker_send_task_events=settings.task_events,
        task_send_sent_event=settings.task_events,
    )
    from agentq.runtime import remote_control

    remote_control.install(app, settings.remote_control)  # what a broadcast on the broker may make workers do
    # the repaired transports are kombu aliases of the URL schemes, installed for the whole process (kombu has
    # no per-app way that survives what monitoring shows and a failover: see redis_transport.py)
    if broker.kind == "redis":
        from agentq.runtime.redis_transport import install

        install()  # kombu's Redis transport, repaired to survive a lost broker connection
    if broker.kind == "sentinel":
        from agentq.runtime.sentinel_transport import install

        install()  # kombu's Sentinel transport, repaired to survive a failover with tasks in flight
    return app


def broker_transport_options(settings: Settings) -> dict[str, Any]:
    """Redis broker options: a killed worker's unacknowledged tasks come back after the visibility timeout.

    kombu's Redis transport only looks for such tasks every `unacked_restore_interval` seconds times
    `unacked_restore_throttle` (10 x 10 by default: about 100 s whatever the visibility timeout), so sweep every
    `AGENTQ_UNACKED_RESTORE_S` (default: a quarter of the visibility timeout, between 0.5 and 60 s) on every
    tick of that timer instead.

    A sweep holds a lock in Redis (`unacked_mutex`) that kombu gives 300 s to live: a process killed, or cut from
    Redis, while holding it stopped every process's sweep for five minutes. A sweep reads ten entries and moves
    them in one transaction each (a second sweep beside it restores nothing twice), so the lock lives one sweep's
    interval (at least 1 s).
    """
    timeout = settings.visibility_timeout_s
    sweep = settings.unacked_restore_s or min(60.0, max(0.5, timeout / 4))
    return {"visibility_timeout": timeout, "unacked_restore_interval": sweep, "unacked_restore_throttle": 1,
            "unacked_mutex_expire": max(1.0, sweep)}


class Dispatcher:
    """Sends the task of each ready call to its queue; task ids are `<job>.<call>` (used to revoke).

    A call's task is `[job_id, call_id, record, signature]`: a pointer to the call, plus its record so the
    worker needs not read it back (the claim checks it against the stored one, which is what runs), signed so
    that a worker may run an idempotent activity's record before its claim (`engine/signing.py`)."""

    def __init__(self, app: Any, routing: Routing, signer: TaskSigner | None = None,
                 admission: Admission | None = None):
        self.app = app
        self.routing = routing
        self.signer = signer
        self.admission = admission  # None: every ready call is published at once
        self.tasks = CallTasks(app)  # publishes their messages
        # the start timeouts of ready calls whose tool has `x-start-timeout-s` (`root.connect` sets it)
        self.start_timeouts: Callable[[str, dict[str, int]], None] | None = None

    def __call__(self, job_id: str, records: list[CallRecord]) -> None:
        """Publish the tasks of a job's ready calls, those the admission lets through (the rest wait for places)."""
        timed = {r.id: r.start_timeout_s for r in records if r.start_timeout_s is not None}
        if timed and self.start_timeouts is not None:
            now = time.time()
            self.start_timeouts(job_id, {c: round((now + s) * 1000) for c, s in timed.items()})
        if self.admission is None:
            self.publish([(job_id, record) for record in records])
        elif records:
            self.publish(self.admission.admit(job_id, records))

    def ended(self, job_id: str, call_ids: list[str], released: list[CallRecord]) -> None:
        """Calls of a job ended: their places go to waiting calls, published with what the end released."""
        if self.admission is None:
            self.publish([(job_id, record) for record in released])
        else:
            self.publish(self.admission.ended(job_id, call_ids, released))

    def sweep(self, holder: str) -> None:
        """The admission's sweep (`runtime/admission.py`), in a heartbeat."""
        if self.admission is not None:
            self.publish(self.admission.sweep(holder))

    def publish(self, calls: list[tuple[str, CallRecord]]) -> None:
        """Send the task of each (job id, call record), in one batch of lean messages (`runtime/publish.py`)."""
        if not calls:
            return
        with self.tasks.batch(dict.fromkeys(record.queue for _, record in calls), len(calls)) as batch:
            self.send(batch, calls)

    def send(self, batch: TaskBatch, calls: Sequence[tuple[str, CallRecord]]) -> None:
        """Hand `batch` the task of each (job id, call record)."""
        for job_id, record in calls:
            batch.send(*self.task_of(job_id, record))

    def task_of(self, job_id: str, record: CallRecord) -> tuple[str, str, str, list[Any], str]:
        """A call's task: its name, queue, id, arguments and what monitoring shows of them."""
        stored = record.to_dict()  # what the task carries
        args: list[Any] = [job_id, record.id, record.to_task(stored)]
        if self.signer is not None:
            args.append(self.signer.sign(job_id, record.id, record_digest(record)))  # its stored JSON, encoded once
        return record.task, record.queue, task_id(job_id, record.id, record.run), args, \
            call_argsrepr(job_id, record.id, record)

    def tick(self, job_id: str, n: int = 0) -> None:
        """Send the task of an agent job's model request number `n` (0 for its first): published lean, as calls'
        tasks are (one round trip with its `task-sent` event), with the headers `send_task` gave it (no trace's)."""
        queue = self.routing.engine_queue
        with self.tasks.batch([queue], 1, traced=False) as batch:
            batch.send(TICK_TASK, queue, tick_task_id(job_id, n), [job_id, n], tick_argsrepr(job_id, n))

    def revoke(self, job_id: str, call_ids: list[str], run: int = 1) -> None:
        """Revoke the tasks of calls of the job's run `run` (a resumed run's tasks have ids of their own)."""
        if call_ids:
            self.app.control.revoke([task_id(job_id, c, run) for c in call_ids])


def task_id(job_id: str, call_id: str, run: int = 1) -> str:
    """A call task's id: `<job>.<call>`, and `.r<run>` in a resumed run (docs/resume.md)."""
    return f"{job_id}.{call_id}" if run <= 1 else f"{job_id}.{call_id}.r{run}"


def call_argsrepr(job_id: str, call_id: str, record: CallRecord | None) -> str:
    """What monitoring shows of a call task's arguments `[job_id, call_id, record]`: the record stands as the
    call's tool and instance, never its parameters (nor its whole record, which Celery would render with its slow
    `saferepr` only to cut it at 1024 characters)."""
    summary = {"tool": record.tool, "instance": record.instance} if record is not None else "<no record>"
    return repr([job_id, call_id, summary])


def tick_argsrepr(job_id: str, n: Any) -> str:
    """What monitoring shows of an agent tick's arguments `[job_id, n]`."""
    return repr([job_id, n])


class Redeliveries(Protocol):
    """What counts the call tasks the broker delivered again (`agentq.metrics.Metrics`)."""

    def count_redelivery(self, delivery_info: dict | None, task_name: str, record: CallRecord | None) -> None: ...


def register_activity_tasks(app: Any, executor: Executor, activities: ActivityRegistry, routing: Routing, *,
                            store_retry_s: float, redeliveries: Redeliveries | None = None) -> list[str]:
    """One task per activity, named `agentq.activity.<name>`, run by `executor`; returns the queues to consume.
    `redeliveries` counts the tasks the broker delivered again (the process's metrics).

    The soft time limit is the activity's timeout; the hard one leaves room for holding its result through a
    store outage (`store_retry_s`, AGENTQ_STORE_RETRY_S)."""
    queues: list[str] = []
    for spec in activities.specs():
        timeout = executor.timeout_of(spec)
        _register_call_task(app, executor, activity_task(spec.name), soft_time_limit=timeout,
                            time_limit=timeout * 1.5 + 5 + store_retry_s, rate_limit=spec.rate_limit,
                            redeliveries=redeliveries)
        for queue in (routing.activity_queue(spec), activity_task(spec.name)):
            if queue not in queues:
                queues.append(queue)
    return queues


def register_engine_tasks(app: Any, executor: Executor, service: JobService, routing: Routing, *,
                          redeliveries: Redeliveries | None = None) -> list[str]:
    """Engine tasks: submission by task name (`service`), latent and module calls, agent ticks (`executor`);
    returns the engine queue. `redeliveries` counts the call tasks the broker delivered again."""

    @app.task(name=SUBMIT_TASK, bind=True, shared=False, max_retries=None)
    def submit(task: Any, job: Any = None, job_id: Any = None, *args: Any, tenant: Any = DEFAULT_TENANT,
               **kwargs: Any) -> None:
        try:
            service.submit_by_task(job, job_id=job_id, tenant=tenant,
                                   traceparent=telemetry.task_traceparent(task.request))
        except RateLimited as error:  # the tenant's limit: the job waits in the broker, nothing was written
            raise task.retry(countdown=error.retry_after_s, exc=error) from error
        except StoreUnavailableError as error:
            raise _store_retry(task, error) from error

    for name in (LATENT_TASK, MODULE_TASK, WAIT_TASK):
        _register_call_task(app, executor, name, soft_time_limit=None, time_limit=None, rate_limit=None,
                            redeliveries=redeliveries)

    @app.task(name=TICK_TASK, bind=True, shared=False, acks_late=True, reject_on_worker_lost=True,
              max_retries=None)
    def tick(task: Any, job_id: Any = None, n: Any = 0, *args: Any, **kwargs: Any) -> None:
        if job_id_problem(job_id) is not None or not isinstance(n, int) or isinstance(n, bool) or n < 0:
            log.warning("task %s ignored: its arguments do not name a job's request (%.200r)", TICK_TASK,
                        [job_id, n])
            return
        try:
            wait = executor.tick(job_id, n)
        except StoreUnavailableError as error:
            raise _store_retry(task, error) from error
        except broker_errors() as error:  # what the tick sends did not go out: the tick is made again
            raise _store_retry(task, _unsent(error)) from error
        if wait is not None:
            raise _published_retry(task, wait, argsrepr=tick_argsrepr(job_id, n), kwargsrepr="{}")

    return [routing.engine_queue]


def _register_call_task(app: Any, executor: Executor, name: str, *, soft_time_limit: float | None,
                        time_limit: float | None, rate_limit: str | None,
                        redeliveries: Redeliveries | None) -> None:
    # `throws`: a failed call is an expected outcome, logged as one line without a traceback
    @app.task(name=name, bind=True, shared=False, acks_late=True, reject_on_worker_lost=True, ignore_result=True,
              soft_time_limit=soft_time_limit, time_limit=time_limit, rate_limit=rate_limit, max_retries=None,
              throws=(CallFailedError,))
    def run(task: Any, *args: Any, **kwargs: Any) -> str:
        pointer = call_pointer(args, kwargs)
        if pointer is None:
            log.warning("task %s ignored: its arguments do not point at a call (%.200r)", name, args or kwargs)
            return "ignored"
        job_id, call_id, record = pointer.job_id, pointer.call_id, pointer.record
        if redeliveries is not None:
            redeliveries.count_redelivery(task.request.delivery_info, name, record)
        try:
            with telemetry.call_span(task.request, job_id, call_id, record):
                outcome = executor.run_call(job_id, call_id, record=record, signature=pointer.signature, task=name)
        except StoreUnavailableError as error:
            raise _store_retry(task, error, **_shown(pointer)) from error
        except broker_errors() as error:  # committed, but what follows did not go out: its redelivery sends it
            raise _store_retry(task, _unsent(error), **_shown(pointer)) from error
        if outcome.retry_in is not None:  # Celery's retry re-sends the arguments; keep what monitoring shows
            raise _published_retry(task, outcome.retry_in, **_shown(pointer))
        if outcome.status is OutcomeStatus.FAILED:  # committed as failed: the task fails too (message acked)
            raise CallFailedError(failed_call_message(job_id, call_id, outcome.error))
        return outcome.status.value


def _shown(pointer: CallPointer) -> dict[str, str]:
    """What monitoring shows of a call task's arguments when it is sent again (a retry)."""
    return {"argsrepr": call_argsrepr(pointer.job_id, pointer.call_id, pointer.record), "kwargsrepr": "{}"}


def failed_call_message(job_id: str, call_id: str, error: ErrorInfo | None) -> str:
    """The message of the `CallFailedError` a failed call's task raises: the call and its (masked) error."""
    error = error or ErrorInfo.from_dict(None)
    return f"call {call_id} of job {job_id} failed: {error.type}: {error.message}"


def broker_errors() -> tuple[type[BaseException], ...]:
    """What publishing a task raises when the broker did not take it (kombu's `OperationalError`: the broker down,
    or a Redis broker loading its data after a restart)."""
    from kombu.exceptions import OperationalError

    return (OperationalError,)


def _unsent(error: BaseException) -> StoreUnavailableError:
    """A task this one sends could not be published. Whatever it committed stays; the task is handed back, and its
    next delivery finds its call committed and sends what follows (`JobProgress.recover`), or makes its tick again.
    Failing the task instead would acknowledge it and lose what follows for good: an agent job's next tick, a
    released call."""
    log.warning("a task could not be published (%s): the task that sends it is handed back", error)
    return StoreUnavailableError(f"the broker did not take a task: {error}")


RETRY_PUBLISH_S = 60.0  # how long a retry that cannot be published is tried again in the process (`_store_retry`)


def _store_retry(task: Any, error: StoreUnavailableError, **shown: Any) -> Any:
    """The retry of a task whose work the state store could not record: it goes back to the broker for a later
    delivery, so the broker never takes it as done (every step it took is safe to take again). `shown` keeps
    what monitoring shows of its arguments.

    Where the broker is the store's own Redis, the retry's message may not be publishable either (the server is
    down, or loading its data after a restart): Celery then rejects the task without requeueing it, and its call
    or tick would be lost. The publication is tried again every second for up to `RETRY_PUBLISH_S` (the store is
    down: the slot has nothing else to do); after that the task is rejected with requeue, left to the broker."""
    countdown = store_backoff_s(task.request.retries or 0)
    log.warning("task %s of %s handed back for a new delivery in %.1f s: %s", task.request.id, task.name,
                countdown, error)
    return _published_retry(task, countdown, exc=error, **shown)


def _published_retry(task: Any, countdown: float, **options: Any) -> Any:
    """Celery's `task.retry` (not thrown: the caller raises what it returns), its message published again every
    second for up to `RETRY_PUBLISH_S` while the broker refuses it; after that, the task rejected with requeue.
    Celery itself rejects a task whose retry it could not publish without requeue: the task, and its call or
    tick, would be lost (a call released for its next attempt stays `ready`; one that found another attempt's
    lease stays `running`, its lease gone once that attempt's process died)."""
    from celery.exceptions import Reject

    deadline = time.monotonic() + RETRY_PUBLISH_S
    while True:
        try:
            return task.retry(countdown=countdown, max_retries=None, throw=False, **options)
        except Reject as refused:
            if time.monotonic() >= deadline:
                return Reject(refused.reason, requeue=True)
            log.warning("task %s of %s: its retry could not be published (%s); trying again in 1 s",
                        task.request.id, task.name, refused.reason)
            time.sleep(1.0)


@dataclass(frozen=True)
class CallPointer:
    """What a call task's arguments say: the call, plus the record it carries and that record's signature."""

    job_id: str
    call_id: str
    record: CallRecord | None = None
    signature: str | None = None


def call_pointer(args: tuple, kwargs: dict) -> CallPointer | None:
    """The call a task's arguments `[job_id, call_id, record?, signature?]` point at, or None when they are not
    a call's task (garbage on the broker: one warning line, no traceback). A record that cannot be read is
    dropped (the claim reads the stored one), and so is its signature."""
    values = [*args, *kwargs.values()] if kwargs else list(args)
    if len(values) < 2 or job_id_problem(values[0]) is not None or not isinstance(values[1], str):
        return None
    record = _carried_record(values)
    signature = values[3] if record is not None and len(values) > 3 and isinstance(values[3], str) else None
    return CallPointer(values[0], values[1], record, signature)


def _carried_record(values: list[Any]) -> CallRecord | None:
    """The record a call task's arguments carry third (None: none, or one that cannot be read)."""
    if len(values) <= 2 or not isinstance(values[2], dict):
        return None
    try:
        return CallRecord.from_dict(values[2])
    except (KeyError, TypeError, ValueError):
        return None
