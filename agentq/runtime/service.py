"""Job submission and cancellation, shared by the Python client, the CLI, the engine's submit task and
the HTTP API.

Submission validates the whole job before anything is written (`plan_job`), writes it in one atomic
step, then sends the tasks of the calls that are ready at once. Tool schemas come from the store (what
workers and dispatchers published) plus this process's own registry, so a submitter needs no tool or
activity code.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from agentq.errors import JobValidationError, Problem
from agentq.protocol.activities import ActivityRegistry
from agentq.protocol.events import activity_part
from agentq.protocol.jobs import JobLimits, plan_job
from agentq.protocol.tools import ToolRegistry
from agentq.runtime.events import envelope
from agentq.settings import Settings

log = logging.getLogger("agentq.service")


class JobService:
    def __init__(self, store: Any, dispatcher: Any, *, settings: Settings, tools: ToolRegistry | None = None,
                 activities: ActivityRegistry | None = None, local_activities_are_live: bool = False):
        self.store = store
        self.dispatcher = dispatcher
        self.settings = settings
        self.tools = tools if tools is not None else ToolRegistry()
        self.activities = activities if activities is not None else ActivityRegistry()
        self.local_activities_are_live = local_activities_are_live
        self.limits = JobLimits(max_job_bytes=settings.max_job_bytes, max_calls=settings.max_calls,
                                default_ttl_s=settings.job_ttl_s)

    def available_tools(self) -> dict[str, dict]:
        """Published tools, overridden by this process's own registry."""
        return {**self.store.published_tools(), **self.tools.snapshot()}

    def live_activities(self) -> dict[str, dict]:
        live = self.store.live_activities()
        if self.local_activities_are_live:
            for spec in self.activities.specs():
                live.setdefault(spec.name, spec.to_announcement())
        return live

    def submit(self, job: Any, *, job_id: str | None = None) -> str:
        """Validate, write and start a job; returns its id. Raises `JobValidationError` and writes nothing."""
        if isinstance(job, (str, bytes)):
            size = len(job if isinstance(job, bytes) else job.encode())
            try:
                job = json.loads(job)
            except ValueError as error:
                raise JobValidationError("job is not valid JSON", [Problem("", str(error))]) from None
        else:
            size = len(json.dumps(job, ensure_ascii=False, default=str).encode())
        plan = plan_job(job, tools=self.available_tools(), live_activities=self.live_activities(),
                        limits=self.limits, size=size, job_id=job_id)
        queued = envelope("job.queued", plan.id, status="queued", kind=plan.kind, calls=len(plan.calls),
                          part=activity_part("Job queued", source="agentq", locale=plan.options["locale"]))
        if not self.store.create_job(plan, submitted=job, events=[queued]):
            raise JobValidationError("job rejected", [Problem("", f"a job with id {plan.id!r} exists already")])
        if plan.kind == "agent":
            self.dispatcher.tick(plan.id, self.settings.engine_queue)
        else:
            self.dispatcher(plan.id, [c.record() for c in plan.ready])
            if not any(c.awaited for c in plan.calls):
                # nothing awaited (no calls, or only fire-and-forget ones): no commit will finalize this job,
                # and SPEC §5/§9 say it must not wait for fire-and-forget calls, so it is complete now
                from agentq.runtime.finalize import finalize_job

                finalize_job(self.store, plan.id)
        log.info("job %s queued: %d calls, %d ready", plan.id, len(plan.calls), len(plan.ready))
        return plan.id

    def submit_by_task(self, job: Any, *, job_id: str | None) -> None:
        """Submission through the `agentq.engine.submit` task: a rejected job with an id is recorded as failed."""
        try:
            self.submit(job, job_id=job_id)
        except JobValidationError as error:
            log.warning("job %s rejected: %s", job_id or "(no id)", error)
            if job_id:
                self.store.record_rejection(job_id, error.to_dict(), ttl_s=self.settings.job_ttl_s)

    def cancel(self, job_id: str) -> str:
        """Cancel a job: no call starts after this; queued tasks are revoked. Returns the job's status."""
        from agentq.store.records import job_record

        event = envelope("job.finished", job_id, status="canceled", error=None,
                         part=activity_part("Job canceled", source="agentq"))
        outcome, ready = self.store.cancel(job_id, event=event)
        if outcome == "final":
            return ready[0] if ready else self.store.job_status(job_id)
        self.dispatcher.revoke(job_id, ready)
        fields = self.store.job_fields(job_id)
        self.store.save_record(job_id, job_record(fields, self.store.read_log(job_id)))
        return "canceled"

    def record(self, job_id: str) -> dict:
        return self.store.record(job_id)
