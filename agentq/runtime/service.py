"""Job submission, shared by the Python client, the CLI, the engine's submit task and
the HTTP API.

Submission validates the whole job before anything is written (`plan_job`, after the id, size and nesting
checks), routes its calls, writes it in one atomic step, then sends the tasks of the calls that are ready at
once. Tool schemas come from the store (what workers and dispatchers published) plus this process's own
registry, so a submitter needs no tool or activity code. A reviewer's decisions and a cancellation are in
`decisions.py`.

A job is planned against what the fleet published and announced, read once per heartbeat (`fleet_view.py`).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from agentq import telemetry
from agentq.engine.hooks import Hook
from agentq.engine.progress import JobProgress
from agentq.engine.routing import Routing
from agentq.errors import (
    JobExistsError,
    JobValidationError,
    Problem,
)
from agentq.protocol.activities import ActivityRegistry
from agentq.protocol.concurrency import concurrency_keys
from agentq.protocol.digests import stored_forms
from agentq.protocol.envelopes import JobQueued
from agentq.protocol.events import job_part
from agentq.protocol.ids import job_id_problem
from agentq.protocol.jobs import JobLimits, JobPlan, ModuleLoader
from agentq.protocol.jsonsafe import loads_limited, value_depth_problem
from agentq.protocol.records import CallRecord, ErrorInfo, JobKind, JobRecord, ParentLink
from agentq.protocol.status import JobStatus
from agentq.protocol.tenants import DEFAULT_TENANT, tenant_problem
from agentq.protocol.tools import ToolRegistry
from agentq.runtime.decisions import Dispatch, JobDecisions
from agentq.runtime.fleet_config import FleetConfig
from agentq.runtime.fleet_view import FleetView, FleetViews
from agentq.runtime.job_timers import JobTimers
from agentq.runtime.resume import JobResumes
from agentq.runtime.signals import JobSignals
from agentq.runtime.tenant_gate import TenantGate
from agentq.settings import Settings
from agentq.store.base import Store
from agentq.store.contracts import FleetStore, TenantLimitStore, WebhookStore
from agentq.webhooks.records import Delivery
from agentq.webhooks.targets import LiveAllowlist, webhook_problems

if TYPE_CHECKING:
    from agentq.runtime.admission import Admission, WithWrite

log = logging.getLogger("agentq.service")


class JobService(JobDecisions, JobSignals, JobTimers, FleetViews, TenantGate, JobResumes):
    """Submission and the reads shells need; a reviewer's decisions and a cancellation are `JobDecisions`'
    (`runtime/decisions.py`)."""

    def __init__(self, store: Store, dispatcher: Dispatch, *, settings: Settings, routing: Routing,
                 tools: ToolRegistry | None = None, activities: ActivityRegistry | None = None,
                 local_activities_are_live: bool = False,
                 module_loader: ModuleLoader | None = None,
                 clock: Callable[[], float] = time.monotonic, hooks: Hook | None = None,
                 webhooks: WebhookStore | None = None, config: FleetConfig | None = None,
                 fleet: FleetStore, tenants: TenantLimitStore):
        self.store = store
        self.fleet_store = fleet  # what the fleet published and announced (`fleet_view.py`)
        self.tenant_limits = tenants  # the tenants' job limits (`tenant_gate.py`)
        self.dispatcher = dispatcher
        # a rejection or a cancellation takes its job forward as any commit does (and resumes a module's parent)
        self.progress = JobProgress(store, dispatcher, hooks=hooks)
        self.settings = settings
        self.routing = routing
        self.tools = tools if tools is not None else ToolRegistry()
        self.activities = activities if activities is not None else ActivityRegistry()
        self.local_activities_are_live = local_activities_are_live
        self.module_loader = module_loader  # upfront module resolution at composition (docs/protocol.md#modules)
        # the fleet's shared settings (tenants' limits, prices, the webhook allowlist), read once per heartbeat
        self.config = config if config is not None else FleetConfig.of(settings, None)
        allowlist = LiveAllowlist(self.config.allowlist)
        self.limits = JobLimits(max_job_bytes=settings.max_job_bytes, max_calls=settings.max_calls,
                                default_ttl_s=settings.job_ttl_s, default_budget=settings.default_budget,
                                known_model=self.known_model, max_output_tokens=settings.llm_max_tokens,
                                model=settings.model,
                                webhook_problems=lambda value, pointer: webhook_problems(value, pointer, allowlist))
        # the webhook keys: a job with a webhook is watched before it is written (None: a store without them)
        self.webhooks = webhooks
        self.fleet_ttl_s = settings.heartbeat_s  # how long a submission reuses what the fleet announced
        self._clock = clock
        self._fleet: FleetView | None = None
        self._fleet_lock = threading.Lock()

    def known_model(self, model: str) -> bool:
        """Whether the fleet's price table (`llm_prices` over the shipped prices) prices `model`: a tool's `x-model`
        must be one (docs/rate-limits.md)."""
        return self.config.prices().price(model) is not None

    def submit(self, job: Any, *, job_id: str | None = None, parent: ParentLink | None = None,
               traceparent: str | None = None, tenant: str = DEFAULT_TENANT) -> str:
        """Validate, write and start a job of `tenant`; returns its id. Raises `JobValidationError` and writes
        nothing. `parent` links a module's child job to the call it runs for (see `engine/delegation.py`); the
        job's trace continues `traceparent` (W3C), else the current context (docs/tracing.md), whether or not this
        process traces: one that does not stores `traceparent` with the job for those that do."""
        if (tenant_error := tenant_problem(tenant)) is not None:
            raise JobValidationError("job rejected", [Problem("", f"tenant: {tenant_error}")])
        with telemetry.submission(traceparent) as trace, stored_forms():  # its records' JSON: encoded once
            return self._submit(job, job_id, parent, trace, tenant)

    def _submit(self, job: Any, job_id: str | None, parent: ParentLink | None, trace: telemetry.Submission,
                tenant: str) -> str:
        job, size = self._decode(job, job_id)
        plan, known = self._plan(job, size, job_id)
        submitted_s = time.time()
        plan = self.scheduled(plan, submitted_s)
        trace.job(plan.id, plan.kind.value)
        records = self.routing.route_calls(plan.calls, known, tenant)
        queued = _queued(plan)
        if parent is not None:
            records = [replace(r, relay=parent.job) for r in records]
        if self.webhooks is not None and plan.options.get("webhook") is not None:
            self.webhooks.watch(plan.id, int(time.time() * 1000))
        with self._admitted(plan, tenant, child=parent is not None) as taken_back:
            with_write = self._with_write(plan, records, tenant, fresh=job_id is None and parent is None)
            check_ms = self.start_check(plan, _ready(plan, records), with_write, submitted_s)
            written = self._write(plan, records, job, queued, parent, trace.traceparent, tenant, with_write,
                                  check_ms)
            if not written:
                taken_back()
        if not written:
            if parent is not None:
                return plan.id  # a redelivered module call: its child job was submitted already
            raise JobExistsError("job rejected", [Problem("", f"a job with id {plan.id!r} exists already")])
        self.set_deadline(plan.id, plan.options, submitted_s)
        self._start(plan, records, tenant)
        return plan.id

    def _write(self, plan: JobPlan, records: list[CallRecord], job: Any, queued: JobQueued,
               parent: ParentLink | None, traceparent: str | None, tenant: str, with_write: WithWrite | None,
               check_ms: int | None) -> bool:
        """Write the job (`Store.create_job`) with its admission step, if any (withdrawn when it is not written), and
        its `@unstarted` timer when `_start` alone sends its first tasks (`JobTimers.start_check`)."""
        written = False
        try:
            written = self.store.create_job(plan, records, submitted=job, events=[queued],
                                            parent=parent.to_dict() if parent is not None else None,
                                            traceparent=traceparent, tenant=tenant,
                                            admission=with_write.request if with_write is not None else None,
                                            start_check_ms=check_ms)
        finally:
            if not written and with_write is not None:
                with_write.withdraw()
        return written

    def _with_write(self, plan: JobPlan, records: list[CallRecord], tenant: str, *,
                    fresh: bool) -> WithWrite | None:
        """The admission step of a job's ready calls to make with its write (`Admission.with_write`)."""
        admission: Admission | None = getattr(self.dispatcher, "admission", None)
        if admission is None or plan.start_ms is not None:  # a job started later is admitted then
            return None
        return admission.with_write(plan, _ready(plan, records), tenant, fresh=fresh)

    def _start(self, plan: JobPlan, records: list[CallRecord], tenant: str) -> None:
        """Send a written job's first tasks: an agent job's first tick, or a plan job's ready calls; a job with
        concurrency keys once it holds them."""
        admission = getattr(self.dispatcher, "admission", None)
        if admission is not None:  # what its calls' admission needs of the job (docs/tenants.md), known here
            admission.know(plan.id, tenant, plan.options.get("priority"), plan.tools)
        if plan.start_ms is not None:  # its start timer sends them (`runtime/job_timers.py`)
            log.info("job %s scheduled: %d calls", plan.id, len(plan.calls))
            return
        if keys := concurrency_keys(plan.options.get("concurrency")):
            self._admit_keys(plan.id, tenant, keys, plan.ttl_s)
            return
        log.info("job %s queued: %d calls, %d ready", plan.id, len(plan.calls), len(plan.ready))
        if plan.kind is JobKind.AGENT:
            self.dispatcher.tick(plan.id)
            return
        self.dispatcher(plan.id, _ready(plan, records))  # what a step made `with_write` admitted, if one was
        if not any(c.awaited for c in plan.calls):
            # nothing awaited (no calls, or only fire-and-forget ones): no commit will finalize this job,
            # and a job does not wait for its fire-and-forget calls (docs/protocol.md#jobs), so it is complete now
            self.progress.finish(plan.id)

    def _decode(self, job: Any, job_id: str | None) -> tuple[Any, int]:
        """The job as a JSON value and its size in bytes, after the checks that must come before planning:
        the sender's id (it becomes part of every key), the encoding and the nesting depth."""
        if job_id is not None and (id_problem := job_id_problem(job_id)):
            raise JobValidationError("job rejected", [Problem("", id_problem)])
        max_depth = self.settings.max_depth
        if isinstance(job, (str, bytes)):
            size = len(job if isinstance(job, bytes) else job.encode("utf-8", "surrogatepass"))
            if size > self.limits.max_job_bytes:
                limit = self.limits.max_job_bytes
                raise JobValidationError("job rejected", [
                    Problem("", f"job is {size} bytes; the limit is {limit} (AGENTQ_MAX_JOB_BYTES)")])
            job, text_problem = loads_limited(job, max_depth)
            if text_problem is not None:
                raise JobValidationError("job rejected", [text_problem])
            return job, size
        if (depth_problem := value_depth_problem(job, max_depth)) is not None:
            raise JobValidationError("job rejected", [depth_problem])
        try:
            return job, len(json.dumps(job, ensure_ascii=False).encode())
        except (TypeError, ValueError) as error:
            raise JobValidationError("job rejected", [Problem("", f"not JSON: {error}")]) from None

    def submit_by_task(self, job: Any, *, job_id: Any = None, tenant: Any = DEFAULT_TENANT,
                       traceparent: str | None = None) -> None:
        """Submission through the `agentq.engine.submit` task: a rejected job with a usable id is recorded
        as failed so its sender can read why; an id that cannot be used is only logged (no key is written).
        `traceparent`: the message's header, which the job's trace continues."""
        if job_id is not None and (problem := job_id_problem(job_id)):
            log.warning("submission by task name rejected before anything was written: %s", problem)
            return
        try:
            self.submit(job, job_id=job_id, tenant=tenant, traceparent=traceparent)
        except JobValidationError as error:
            log.warning("job %s rejected: %s", job_id or "(no id)", error)
            if job_id:
                self.store.record_rejection(job_id, ErrorInfo.from_dict(error.to_dict()),
                                            ttl_s=self.settings.job_ttl_s,
                                            tenant=DEFAULT_TENANT if tenant_problem(tenant) else tenant)

    def submit_child(self, job: Any, *, job_id: str, parent: ParentLink, tenant: str) -> str:
        """Submit a module's child job, of its parent's tenant (idempotent: a child job that exists already is
        left as it is)."""
        return self.submit(job, job_id=job_id, parent=parent, tenant=tenant)

    def record(self, job_id: str) -> JobRecord:
        return self.store.record(job_id)

    def deliveries(self, job_id: str) -> list[dict]:
        """The job's webhook deliveries, oldest first (`agentq/webhooks/records.py`); `JobNotFoundError` for a
        job that neither exists nor left deliveries."""
        found = [Delivery.from_dict(d) for d in self.webhooks.deliveries(job_id)] if self.webhooks is not None else []
        if not found:
            self.store.job_status(job_id)  # JobNotFoundError for an unknown job
        return [d.to_dict() for d in sorted(found, key=lambda d: (d.created_at, d.id))]

    def calls(self, job_id: str) -> list[dict]:
        """The job's calls as the HTTP API's `/calls` items (`agentq.engine.call_views.job_calls`)."""
        from agentq.engine.call_views import job_calls

        return job_calls(self.store, job_id)

    def check(self, job: Any, *, job_id: str | None = None) -> JobPlan:
        """Validate `job` as `submit` would and write nothing (a schedule's job, `runtime/schedules.py`); raises
        `JobValidationError`."""
        job, size = self._decode(job, job_id)
        return self._plan(job, size, job_id)[0]


def _queued(plan: JobPlan) -> JobQueued:
    """A job's first event: queued, scheduled for later, or waiting for its concurrency keys."""
    waits = bool(plan.options.get("concurrency"))
    status, text = ((JobStatus.SCHEDULED, "Job scheduled") if plan.start_ms is not None else
                    (JobStatus.WAITING, "Job waiting for its concurrency keys") if waits else
                    (JobStatus.QUEUED, "Job queued"))
    return JobQueued(job_id=plan.id, kind=plan.kind.value, calls=len(plan.calls), status=status.value,
                     part=job_part(text, kind=plan.kind.value, source="agentq", locale=plan.options["locale"]))


def _ready(plan: JobPlan, records: list[CallRecord]) -> list[CallRecord]:
    """The records of a plan's calls ready at submission."""
    ready = {c.id for c in plan.ready}
    return [r for r in records if r.id in ready]
