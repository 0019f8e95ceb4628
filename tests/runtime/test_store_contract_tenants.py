"""The tenants' limits (docs/tenants.md), the same contract on Redis and a Redis Cluster: a rate of
jobs (a burst of `jobs_per_minute`, then one every 60 / jobs_per_minute s) and a cap on active jobs, where a job holds
its place from its admission until it ends (finalized or canceled), expires, or its submission is taken back."""

from __future__ import annotations

import time

from agentq.protocol.envelopes import JobFinished
from agentq.protocol.records import JobRecord
from agentq.protocol.status import JobStatus
from agentq.protocol.tenants import TenantLimits
from agentq.store.replies import TenantRefusal
from agentq.store.tenants import RedisTenants
from tests.runtime.conftest import Backend, make_plan, records_of

AN_HOUR_MS = 3_600_000


def expiry_ms(backend: Backend, in_ms: int = AN_HOUR_MS) -> int:
    return int(time.time() * 1000) + in_ms


def test_a_rate_lets_a_burst_through_then_one_job_per_interval(backend: Backend):
    store, two_a_minute = backend.store, TenantLimits(jobs_per_minute=2)
    tenant_limits = RedisTenants(store)
    assert tenant_limits.admit_job("acme", "job_a", two_a_minute, expire_at_ms=expiry_ms(backend)) is None
    assert tenant_limits.admit_job("acme", "job_b", two_a_minute, expire_at_ms=expiry_ms(backend)) is None
    refused = tenant_limits.admit_job("acme", "job_c", two_a_minute, expire_at_ms=expiry_ms(backend))
    assert isinstance(refused, TenantRefusal) and not refused.by_active
    assert 29 < refused.wait_s <= 30  # the next one in 30 s at 2 a minute
    assert tenant_limits.admit_job("globex", "job_c", two_a_minute, expire_at_ms=expiry_ms(backend)) is None  # its own


def test_active_jobs_are_capped_until_one_ends_is_canceled_expires_or_is_released(backend: Backend):
    store, two_active = backend.store, TenantLimits(max_active_jobs=2)
    tenant_limits = RedisTenants(store)
    plans = [make_plan({"calls": []}, {}, job_id=f"job_{n}") for n in range(2)]
    for plan in plans:
        assert tenant_limits.admit_job("acme", plan.id, two_active, expire_at_ms=expiry_ms(backend)) is None
        assert store.create_job(plan, records_of(plan), submitted={}, events=[], tenant="acme")
    refused = tenant_limits.admit_job("acme", "job_x", two_active, expire_at_ms=expiry_ms(backend))
    assert isinstance(refused, TenantRefusal) and refused.by_active and refused.wait_s > 0
    assert tenant_limits.admit_job("acme", "job_0", two_active, expire_at_ms=expiry_ms(backend)) is None  # already in

    record = JobRecord(id="job_0", status=JobStatus.SUCCEEDED, tenant="acme")
    assert store.finalize("job_0", record=record, event=JobFinished(job_id="job_0", status="succeeded"))
    assert tenant_limits.admit_job("acme", "job_x", two_active, expire_at_ms=expiry_ms(backend)) is None  # job_0 ended
    assert tenant_limits.admit_job("acme", "job_y", two_active, expire_at_ms=expiry_ms(backend)) is not None
    store.cancel("job_1", event=JobFinished(job_id="job_1", status="canceled"))
    assert tenant_limits.admit_job("acme", "job_y", two_active, expire_at_ms=expiry_ms(backend)) is None  # job_1 ended
    tenant_limits.release_job("acme", "job_y")  # a submission taken back after its admission
    assert tenant_limits.admit_job("acme", "job_z", two_active, expire_at_ms=expiry_ms(backend, 200)) is None
    assert tenant_limits.admit_job("acme", "job_w", two_active, expire_at_ms=expiry_ms(backend)) is not None
    backend.advance(0.4)  # job_z expired without ending: its place is free again
    assert tenant_limits.admit_job("acme", "job_w", two_active, expire_at_ms=expiry_ms(backend)) is None


def test_an_ended_job_whose_end_bookkeeping_was_lost_holds_no_place(backend: Backend):
    """The step that ends a job and the one that takes it out of its tenant's active set are two on a cluster
    (different slots), and everywhere for the ends off the hot path (cancel, a deadline): a process dying between
    them, or an admission between them, finds an ended job in the set."""
    store, one_active = backend.store, TenantLimits(max_active_jobs=1)
    tenant_limits = RedisTenants(store)
    plan = make_plan({"calls": []}, {}, job_id="job_ended")
    assert tenant_limits.admit_job("acme", plan.id, one_active, expire_at_ms=expiry_ms(backend)) is None
    assert store.create_job(plan, records_of(plan), submitted={}, events=[], tenant="acme")
    record = JobRecord(id=plan.id, status=JobStatus.SUCCEEDED, tenant="acme")
    assert store.finalize(plan.id, record=record, event=JobFinished(job_id=plan.id, status="succeeded"))
    # as if the end's bookkeeping never ran
    store.redis.zadd(store.fleet.tenant_active("acme"), {plan.id: expiry_ms(backend) / 1000})
    assert tenant_limits.admit_job("acme", "job_next", one_active, expire_at_ms=expiry_ms(backend)) is None
    assert tenant_limits.admit_job("acme", "job_after", one_active, expire_at_ms=expiry_ms(backend)) is not None
