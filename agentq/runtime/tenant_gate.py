"""A job's tenant limits at submission (docs/tenants.md): `TenantGate`, a mixin of `JobService`
(`runtime/service.py`), which builds the parts it uses.

A valid job is admitted under its tenant's limits (the fleet's `tenants`: its active jobs and its rate of jobs)
before anything is written, and the admission is taken back when the job is not written after all; a written job
with concurrency keys waits until it holds every one.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator

from agentq.engine.progress import JobProgress
from agentq.errors import RateLimited
from agentq.protocol.concurrency import ConcurrencyKeys
from agentq.protocol.jobs import JobPlan
from agentq.runtime.fleet_config import FleetConfig
from agentq.store.base import Store
from agentq.store.contracts import TenantLimitStore

log = logging.getLogger("agentq.service")


class TenantGate:
    """Admit a job under its tenant's limits and its concurrency keys."""

    store: Store  # the jobs' concurrency keys (the job steps')
    tenant_limits: TenantLimitStore  # the tenants' job limits (`store/tenants.py`)
    config: FleetConfig
    progress: JobProgress

    @contextlib.contextmanager
    def _admitted(self, plan: JobPlan, tenant: str, *, child: bool) -> Iterator[Callable[[], None]]:
        """Admit the job under its tenant's limits (`_admit`) around its writing; what it yields takes the
        admission back (an id that exists already), as does an error while it is written."""
        admitted = self._admit(plan, tenant, child=child)

        def take_back() -> None:
            if admitted:
                self.tenant_limits.release_job(tenant, plan.id)

        try:
            yield take_back
        except BaseException:
            take_back()
            raise

    def _admit(self, plan: JobPlan, tenant: str, *, child: bool) -> bool:
        """Admit a valid job under its tenant's limits (the fleet's `tenants`, docs/tenants.md) before anything is
        written; whether it now holds a place among its tenant's active jobs. Raises `RateLimited`. A module's child
        job is part of its parent's work and is not limited again."""
        limits = self.config.tenant_limits().get(tenant)
        if child or limits is None or not limits.limited:
            return False
        expire_at_ms = int((time.time() + plan.ttl_s) * 1000)
        refused = self.tenant_limits.admit_job(tenant, plan.id, limits, expire_at_ms=expire_at_ms)
        if refused is not None:
            what = (f"{limits.max_active_jobs} active jobs" if refused.by_active
                    else f"{limits.jobs_per_minute:g} jobs per minute")
            raise RateLimited(f"tenant {tenant!r} is at its limit of {what} (config tenants): nothing was written; "
                              f"submit again in {refused.wait_s:.3g} s", tenant=tenant, retry_after_s=refused.wait_s)
        return limits.max_active_jobs is not None

    def _admit_keys(self, job_id: str, tenant: str, keys: ConcurrencyKeys, ttl_s: int) -> None:
        """A written job with concurrency keys waits until it holds every one (docs/tenants.md): it starts now when they
        have room (and so do the jobs let in before it, whose holders had expired or ended)."""
        expire_at_ms = int((time.time() + ttl_s) * 1000)
        started = self.store.admit_concurrency(tenant, job_id, keys, expire_at_ms=expire_at_ms)
        self.progress.start(tenant, started)
        log.info("job %s %s", job_id, "queued" if job_id in started else "waiting for its concurrency keys")
