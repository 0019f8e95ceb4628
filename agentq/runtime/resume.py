"""Resuming an ended job where it stopped (docs/resume.md): `JobResumes`, a mixin of `JobService`
(`runtime/service.py`), which builds the parts it uses.

A failed, canceled or deadline-exceeded job goes back to running in one store step (`store/resume.py`): its committed
calls keep their outputs and never run again; its failed and canceled calls run afresh (new attempts, fresh retry
counts); an agent job's model is asked again with a note of what happened. Around that step, what the job's end gave
back is taken again: its place among its tenant's active jobs (admitted before the step, given back when the step
refuses), its concurrency keys (it waits for them as a new job does), its expiry (`ttl_s` from the resume), its
deadline (a new one, `options.deadline_s` from the resume; none without it), the metrics' active jobs (the store
step) and its webhook's watch. Then its ready calls' tasks, or its next tick, are sent.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from agentq.engine.progress import JobProgress
from agentq.errors import ConflictError, JobNotFoundError, RateLimited
from agentq.protocol.envelopes import JobResumed
from agentq.protocol.events import job_part
from agentq.protocol.jobs import JobLimits
from agentq.protocol.records import CallMode, JobInfo, JobKind
from agentq.protocol.resume import RESUMABLE, conflict_message, deadline_kind, resume_note, resume_options
from agentq.protocol.status import CallStatus, JobStatus
from agentq.runtime.decisions import Dispatch
from agentq.runtime.fleet_config import FleetConfig
from agentq.settings import Settings
from agentq.store.base import Store
from agentq.store.contracts import TenantLimitStore, WebhookStore
from agentq.store.job_timers import DEADLINE
from agentq.store.resume_contract import ResumeConflict, Resumed, ResumeMissing

log = logging.getLogger("agentq.service")


class JobResumes:
    """Resume a failed or canceled job where it stopped."""

    store: Store
    dispatcher: Dispatch
    progress: JobProgress
    settings: Settings
    limits: JobLimits
    config: FleetConfig
    tenant_limits: TenantLimitStore  # the tenants' job limits (`store/tenants.py`)
    webhooks: WebhookStore | None

    def resume(self, job_id: str, options: Any = None) -> Resumed:
        """Resume job `job_id` with `options` overrides (a larger `budget`, `max_ticks`, a `deadline_s`, ...).
        Raises `JobValidationError` (bad overrides, every problem by its pointer), `JobExpiredError` (its data
        expired), `JobNotFoundError`, `ConflictError` (it succeeded, is active, or is a module's child job) or
        `RateLimited` (its tenant's limits); nothing is written then."""
        overrides = resume_options(options, self.limits)
        info = self._resumable(job_id)
        merged = {**info.options, **overrides}
        ttl_s = int(merged.get("ttl_s") or self.settings.job_ttl_s)
        expire_at_ms = int((time.time() + ttl_s) * 1000)
        admitted = self._admit_resume(info, expire_at_ms)
        waiting = bool(info.job_options.concurrency)
        error = info.error or (info.record.error if info.record is not None else None)
        previous = {"status": info.status.value, "error": error.to_dict() if error is not None else None}
        event = JobResumed(job_id=job_id, status=(JobStatus.WAITING if waiting else JobStatus.RUNNING).value,
                           previous=previous, part=job_part("Job resumed", kind=info.kind.value, source="agentq",
                                                            locale=info.locale))
        note = resume_note(info.status, error, len(info.runs) + 2) if info.kind is JobKind.AGENT else None
        try:
            reply = self._step(info, event=event, expire_at_ms=expire_at_ms, waiting=waiting,
                               options=merged if overrides else None, note=note)
        except BaseException:
            self._give_back(info, admitted)
            raise
        self._restart(info, reply, merged, expire_at_ms)
        log.info("job %s resumed: run %d, %d call(s) ready", job_id, reply.run, len(reply.ready))
        return reply

    def _step(self, info: JobInfo, **step: Any) -> Resumed:
        """The store's resume step; raises when it did not resume the job (nothing was written)."""
        match self.store.resume_job(info.id, **step):
            case ResumeMissing():
                raise self.store.missing(info.id)
            case ResumeConflict(status=status):  # another resume (or an end) changed it since it was read
                raise ConflictError(conflict_message(info.id, status))
            case resumed:
                return resumed

    def _resumable(self, job_id: str) -> JobInfo:
        """The job, when it may be resumed (see `resume`)."""
        try:
            info = self.store.job_info(job_id)
        except JobNotFoundError:
            raise self.store.missing(job_id) from None
        if info.status not in RESUMABLE:
            raise ConflictError(conflict_message(job_id, info.status))
        if info.parent is not None:
            raise ConflictError(f"job {job_id} is a module's child job: resume its parent job {info.parent.job}")
        if not info.options:  # recorded as rejected at submission: it never ran
            raise ConflictError(f"job {job_id} was rejected at submission: there is nothing to resume "
                                "(submit it again)")
        ended = (CallStatus.FAILED, CallStatus.CANCELED)
        again = [call for call, status in self.store.call_statuses(job_id).items() if status in ended]
        modules = sorted(c for c, r in self.store.call_records(job_id, again).items() if r.mode is CallMode.MODULE)
        if modules:  # its child job ended with it and keeps its id: the call would wait for it forever
            raise ConflictError(f"job {job_id} cannot be resumed: its module call(s) {', '.join(modules)} would run "
                                "again, and a module's child job is not resumed (submit the job again)")
        return info

    def _admit_resume(self, info: JobInfo, expire_at_ms: int) -> bool:
        """Take a place among the tenant's active jobs again (its end gave it back), under its limits; whether it
        holds one. Raises `RateLimited`."""
        limits = self.config.tenant_limits().get(info.tenant)
        if limits is None or not limits.limited:
            return False
        refused = self.tenant_limits.admit_job(info.tenant, info.id, limits, expire_at_ms=expire_at_ms)
        if refused is not None:
            what = (f"{limits.max_active_jobs} active jobs" if refused.by_active
                    else f"{limits.jobs_per_minute:g} jobs per minute")
            raise RateLimited(f"tenant {info.tenant!r} is at its limit of {what} (config tenants): the job was not "
                              f"resumed; resume it again in {refused.wait_s:.3g} s", tenant=info.tenant,
                              retry_after_s=refused.wait_s)
        return limits.max_active_jobs is not None

    def _give_back(self, info: JobInfo, admitted: bool) -> None:
        if admitted:
            self.tenant_limits.release_job(info.tenant, info.id)

    def _restart(self, info: JobInfo, resumed: Resumed, options: dict[str, Any], expire_at_ms: int) -> None:
        """What follows the step: the webhook's watch, a new deadline, then the concurrency keys or the tasks."""
        job_id, now = info.id, time.time()
        if self.webhooks is not None and options.get("webhook") is not None:
            self.webhooks.watch(job_id, int(now * 1000))
        self.store.drop_job_timer(job_id, deadline_kind(resumed.run - 1, DEADLINE))  # a canceled run's, if left
        deadline_s = options.get("deadline_s")
        if deadline_s is not None:  # this run's own timer: an earlier run's, still firing, cannot end it
            due_ms = round((now + float(deadline_s)) * 1000)
            self.store.set_job_timer(job_id, deadline_kind(resumed.run, DEADLINE), due_ms)
        admission = getattr(self.dispatcher, "admission", None)
        if admission is not None:
            admission.know(job_id, info.tenant, options.get("priority"))
        if keys := info.job_options.concurrency:
            started = self.store.admit_concurrency(info.tenant, job_id, keys, expire_at_ms=expire_at_ms)
            self.progress.start(info.tenant, started)
            return
        if resumed.ready:
            self.dispatcher(job_id, resumed.ready)
        if resumed.open_calls > 0:
            return
        if resumed.kind is JobKind.AGENT:
            self.dispatcher.tick(job_id, resumed.exchanges)
        else:
            self.progress.finish(job_id)  # nothing left to run: it ends now

