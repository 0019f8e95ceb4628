"""What submit.lua writes for a planned job: the payload of its ARGV[1], built without touching Redis."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentq.protocol.continuation import Seed
from agentq.protocol.digests import dumps, now_iso, stored_json
from agentq.protocol.envelopes import Envelope
from agentq.protocol.jobs import JobPlan, PlannedCall
from agentq.protocol.records import CallRecord, JobKind
from agentq.protocol.status import CallStatus, JobStatus
from agentq.protocol.tenants import DEFAULT_TENANT
from agentq.store.codecs import entry


def held_calls(plan: JobPlan) -> set[str]:
    """The calls a reviewer must approve before they run, and that wait on nothing else."""
    return {c.id for c in plan.calls if c.approval and c.waiting == 0}


def submission_payload(plan: JobPlan, records: Sequence[CallRecord], *, submitted: Any,
                       events: Sequence[Envelope], parent: dict | None, traceparent: str | None = None,
                       tenant: str = DEFAULT_TENANT, seed: Seed | None = None) -> dict:
    """submit.lua's payload: the job hash's (hot) fields and its spec's (cold) ones, its log, its calls (as routed
    `records`) with their statuses, waiting counts, approvals and dependents, its tools and its first events. A
    continued or forked job's `seed` gives its log and exchanges as copied, and its counters and lineage."""
    waiting = {c.id: c.waiting for c in plan.calls}
    held = held_calls(plan)
    job = _job_fields(plan, parent=parent, held=len(held), traceparent=traceparent, tenant=tenant)
    return {
        **_seeded(plan, job, seed),
        "spec": _spec_fields(plan, submitted=submitted),
        "calls": {r.id: stored_json(r) for r in records},  # encoded once with their tasks' digests
        "status": _statuses(waiting, held),
        # each held call's `call.awaiting_approval` event: published now for a call held from the start, by the
        # commit that releases it for the others (_committed.lua)
        "approval": {c.id: entry(c.held_event(plan.id), plan.id) for c in _approval_calls(plan)},
        "waiting": {c: n for c, n in waiting.items() if n},  # only calls that wait: a commit decrements those
        "tools": {name: dumps(schema) for name, schema in plan.tools.items()},
        "events": [entry(e, plan.id) for e in events] + _held_events(plan, held),
        "dependents": _dependents(plan),
    }


def _seeded(plan: JobPlan, job: dict[str, Any], seed: Seed | None) -> dict[str, Any]:
    """The job hash's fields, its log and its exchanges: a new job's, or a copied one's (`seed`)."""
    if seed is None:
        return {"job": job, "log": [dumps(m) for m in plan.context], "exchanges": []}
    return {"job": {**job, **seed.fields}, "log": list(seed.log), "exchanges": list(seed.exchanges)}


def _approval_calls(plan: JobPlan) -> list[PlannedCall]:
    return [c for c in plan.calls if c.approval]


def _held_events(plan: JobPlan, held: set[str]) -> list[str]:
    """The `call.awaiting_approval` events of the calls held from the job's submission."""
    return [entry(c.held_event(plan.id), plan.id) for c in _approval_calls(plan) if c.id in held]


def _statuses(waiting: dict[str, int], held: set[str]) -> dict[str, str]:
    """Each call's first status: pending while it waits on others, else awaiting approval or ready."""
    return {call_id: (CallStatus.PENDING if n else CallStatus.AWAITING_APPROVAL if call_id in held
                      else CallStatus.READY).value for call_id, n in waiting.items()}


def _dependents(plan: JobPlan) -> dict[str, str]:
    """The calls waiting on each call that some wait on (what a commit releases)."""
    return {c.id: dumps(c.dependents) for c in plan.calls if c.dependents}


def _job_fields(plan: JobPlan, *, parent: dict | None, held: int, traceparent: str | None,
                tenant: str) -> dict[str, Any]:
    job = {
        "id": plan.id, "kind": plan.kind.value, "created_at": now_iso(),
        "status": (JobStatus.AWAITING_APPROVAL if held else JobStatus.QUEUED).value,
        "open": sum(1 for c in plan.calls if c.awaited), "ticks": 0, "awaiting": held,
        "options": dumps(plan.options), "output": dumps(plan.output),
    }
    if plan.options.get("concurrency"):  # it waits for its concurrency keys, then takes its status (docs/tenants.md)
        job["start_status"], job["status"] = job["status"], JobStatus.WAITING.value
    if plan.start_ms is not None:  # submitted for later (docs/waits.md#delayed-jobs): scheduled until then
        job.setdefault("start_status", job["status"])  # with concurrency keys, it then waits for them
        job["start_at_ms"], job["status"] = plan.start_ms, JobStatus.SCHEDULED.value
    if parent is not None:
        job["parent"] = dumps(parent)
    if tenant != DEFAULT_TENANT:
        job["tenant"] = tenant  # docs/tenants.md (absent: the default tenant)
    if traceparent:
        job["traceparent"] = traceparent  # the job's trace context (docs/tracing.md): its ticks continue it
    return job


def _spec_fields(plan: JobPlan, *, submitted: Any) -> dict[str, str]:
    """The job's cold spec (`keys.SPEC_FIELDS`): read only by an Idempotency-Key replay and an agent job's ticks."""
    spec = {"solution": dumps(plan.solution), "submitted": dumps(submitted)}
    if plan.kind is JobKind.AGENT:
        spec["registered"] = dumps(plan.registered)
    return spec
