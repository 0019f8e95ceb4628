"""The Celery app factory and the tasks agentq registers on it.

This is the only module that builds a Celery app. Settings are explicit (no `current_app`, no
`shared_task`): JSON only, acks late with reject-on-worker-lost so a killed worker's call is redelivered,
results ignored because outputs live in the state store.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any

from agentq.protocol.activities import ActivityRegistry, ActivitySpec
from agentq.protocol.jobs import LATENT_TASK, MODULE_TASK
from agentq.protocol.tools import ToolRegistry
from agentq.settings import Settings

log = logging.getLogger("agentq.runtime")

SUBMIT_TASK = "agentq.engine.submit"
TICK_TASK = "agentq.engine.tick"


def create_app(settings: Settings, *, name: str = "agentq") -> Any:
    """A Celery app configured for agentq; producers (clients) and workers both use it."""
    from celery import Celery

    app = Celery(name, broker=settings.effective_broker_url, set_as_current=False)
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
        broker_transport_options=broker_transport_options(settings),
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        worker_cancel_long_running_tasks_on_connection_loss=True,
        worker_enable_remote_control=True,
    )
    return app


def broker_transport_options(settings: Settings) -> dict[str, Any]:
    """Redis broker options: a killed worker's unacknowledged tasks come back after the visibility timeout.

    kombu's Redis transport only looks for such tasks every `unacked_restore_interval` seconds times
    `unacked_restore_throttle` (10 x 10 by default: about 100 s whatever the visibility timeout), so sweep at
    a quarter of the visibility timeout (between 0.5 and 60 s) on every tick of that timer instead.
    """
    timeout = settings.visibility_timeout_s
    return {"visibility_timeout": timeout, "unacked_restore_interval": min(60.0, max(0.5, timeout / 4)),
            "unacked_restore_throttle": 1}


class Dispatcher:
    """Sends the task of each ready call to its queue; task ids are `<job>.<call>` (used to revoke)."""

    def __init__(self, app: Any):
        self.app = app

    def __call__(self, job_id: str, records: list[dict]) -> None:
        with self.app.producer_or_acquire() as producer, _publish_batch(producer, len(records)):
            for record in records:
                args = [job_id, record["id"], record.get("needs_log", True), record.get("locale", "en")]
                self.app.send_task(
                    record["task"], args=[*args, task_record(record)],
                    # what monitoring shows of the arguments: the record is left out (Celery would otherwise
                    # render it with its slow `saferepr` for every task, only to cut it at 1024 characters)
                    argsrepr=repr([*args, "<record>"]), kwargsrepr="{}",
                    queue=record["queue"], task_id=task_id(job_id, record["id"]), producer=producer,
                )

    def tick(self, job_id: str, queue: str) -> None:
        self.app.send_task(TICK_TASK, args=[job_id], queue=queue, task_id=f"{job_id}.tick")

    def revoke(self, job_id: str, call_ids: list[str]) -> None:
        if call_ids:
            self.app.control.revoke([task_id(job_id, c) for c in call_ids])


def _publish_batch(producer: Any, count: int) -> Any:
    """Several tasks go out as one batch where the transport batches publishes (Redis: one pipeline, one
    round trip); kombu publishes them one by one elsewhere, and so do kombu versions without batches."""
    batch = getattr(producer, "batch", None)
    return batch() if count > 1 and batch is not None else contextlib.nullcontext()


def task_id(job_id: str, call_id: str) -> str:
    return f"{job_id}.{call_id}"


def task_record(record: dict) -> dict:
    """The call record a call's task carries, so the worker needs not read it back from the store: the record
    without its `dependents` (only the commit step uses them, from the store; they can be many)."""
    return {k: v for k, v in record.items() if k != "dependents"}


@dataclass
class Runtime:
    """One process's agentq runtime: settings, Celery app, store, dispatcher, executor, job service."""

    settings: Settings
    activities: ActivityRegistry
    tools: ToolRegistry
    app: Any = field(init=False)
    store: Any = field(init=False)
    dispatcher: Dispatcher = field(init=False)
    executor: Any = field(init=False)
    service: Any = field(init=False)

    def __post_init__(self) -> None:
        from agentq.runtime.executor import Executor
        from agentq.runtime.service import JobService
        from agentq.store.state import StateStore

        self.app = create_app(self.settings)
        self.store = StateStore.from_settings(self.settings)
        self.dispatcher = Dispatcher(self.app)
        self.executor = Executor(self.store, self.activities, self.dispatcher, lease_s=self.settings.lease_s)
        self.service = JobService(self.store, self.dispatcher, settings=self.settings, tools=self.tools,
                                  activities=self.activities)

    def register_activity_tasks(self) -> list[str]:
        """One task per activity, named `agentq.activity.<name>`; returns the queues to consume."""
        queues: list[str] = []
        for spec in self.activities.specs():
            _register_activity_task(self.app, self.executor, spec)
            for queue in (spec.queue_name, spec.task_name):
                if queue not in queues:
                    queues.append(queue)
        return queues

    def register_engine_tasks(self) -> list[str]:
        """Engine tasks: submission by task name, latent and module calls, agent ticks."""
        app, executor, service = self.app, self.executor, self.service

        @app.task(name=SUBMIT_TASK, bind=True, shared=False)
        def submit(task: Any, job: Any, job_id: str | None = None) -> None:
            service.submit_by_task(job, job_id=job_id)

        for name in (LATENT_TASK, MODULE_TASK):
            _register_call_task(app, executor, name, soft_time_limit=None, time_limit=None, rate_limit=None)

        @app.task(name=TICK_TASK, bind=True, shared=False)
        def tick(task: Any, job_id: str) -> None:
            executor.tick(job_id)

        return [self.settings.engine_queue]

    def close(self) -> None:
        self.executor.leases.stop()
        try:
            self.store.redis.close()
        finally:
            self.app.close()


def _register_activity_task(app: Any, executor: Any, spec: ActivitySpec) -> None:
    hard = None if spec.timeout is None else spec.timeout * 1.5 + 5
    _register_call_task(app, executor, spec.task_name, soft_time_limit=spec.timeout, time_limit=hard,
                        rate_limit=spec.rate_limit)


def _register_call_task(app: Any, executor: Any, name: str, *, soft_time_limit: float | None,
                        time_limit: float | None, rate_limit: str | None) -> None:
    @app.task(name=name, bind=True, shared=False, acks_late=True, reject_on_worker_lost=True, ignore_result=True,
              soft_time_limit=soft_time_limit, time_limit=time_limit, rate_limit=rate_limit, max_retries=None)
    def run(task: Any, job_id: str, call_id: str, needs_log: bool = True, locale: str = "en",
            record: dict | None = None) -> str:
        outcome = executor.run_call(job_id, call_id, needs_log=needs_log, locale=locale, record=record)
        if outcome.retry_in is not None:
            raise task.retry(countdown=outcome.retry_in, max_retries=None)
        return outcome.status
