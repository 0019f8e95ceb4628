"""The store's side of the tenants' limits (docs/tenants.md): `RedisTenants`.

A limited tenant's active jobs (a zset: job id -> its expiry) and its rate (a GCRA hash) share a hash tag of the
tenant's name (`agentq:tenant:{<tenant>}:…`), so admitting a job is one Lua step on one node of a cluster
(tenant_admit.lua), run on the server's clock. A job leaves its tenant's active set when it ends (`stats.py`: in
the step that ended it on a single Redis when that is finalize or the commit that ends its job, else just after
it); one that expired without ending is dropped by the next admission. When the set
is full, the jobs it holds are looked at before the refusal stands: one that ended already (its end's bookkeeping
not yet done, or lost with a process that died in between) leaves it then, so a place is never held by an ended job.
"""

from __future__ import annotations

import math

from agentq.protocol.status import JobStatus
from agentq.protocol.tenants import TenantLimits
from agentq.store.boundary import map_store_errors
from agentq.store.part import StorePart
from agentq.store.replies import TenantRefusal
from agentq.store.step_args import TenantAdmitArgs
from agentq.store.step_constants import MINUTE_MS

NO_HINT_S = 5.0  # what a refusal for too many active jobs advises to wait: no step knows when one will end


@map_store_errors
class RedisTenants(StorePart):
    """Admitting a limited tenant's jobs (see the module docstring): the `TenantLimitStore` contract, a part over
    the store's connection (`part.py`)."""

    def admit_job(self, tenant: str, job_id: str, limits: TenantLimits, *,
                  expire_at_ms: int) -> TenantRefusal | None:
        """Admit `job_id` of `tenant` under `limits` before it is written: None when admitted (it counts as active
        until it ends or expires), else why not and when to try again."""
        interval_ms = round(MINUTE_MS / limits.jobs_per_minute) if limits.jobs_per_minute else 0
        burst = max(1, math.floor(limits.jobs_per_minute or 1))
        keys = [self.fleet.tenant_active(tenant), self.fleet.tenant_rate(tenant)]
        args = [TenantAdmitArgs(job_id=job_id, expire_at_s=expire_at_ms / 1000, max_active=limits.max_active_jobs or 0,
                                interval_ms=interval_ms, burst=burst).encode()]
        verdict, wait_ms = (int(n) for n in self.scripts.run("tenant_admit", keys, args))
        if verdict == 1:  # full: once its ended jobs are out (another process may have just taken one out), again
            self._drop_ended(tenant)
            verdict, wait_ms = (int(n) for n in self.scripts.run("tenant_admit", keys, args))
        if verdict == 0:
            return None
        return TenantRefusal(by_active=verdict == 1, wait_s=NO_HINT_S if verdict == 1 else max(wait_ms / 1000, 0.001))

    def _drop_ended(self, tenant: str) -> None:
        """Take the jobs that ended out of the tenant's active set. (A job not written yet, admitted a moment ago,
        has no status: it keeps its place; one that expired is trimmed by its score.)"""
        active = self.fleet.tenant_active(tenant)
        members = list(self.redis.zrange(active, 0, -1))
        if not members:
            return
        pipe = self.redis.pipeline(transaction=False)
        for job_id in members:
            pipe.hget(self.keys(job_id).job, "status")
        statuses = pipe.execute()
        ended = [job_id for job_id, status in zip(members, statuses, strict=True)
                 if status is not None and JobStatus(status).is_final]
        if ended:
            self.redis.zrem(active, *ended)

    def release_job(self, tenant: str, job_id: str) -> None:
        """Take an admitted job out of its tenant's active set (its submission failed after it was admitted)."""
        self.redis.zrem(self.fleet.tenant_active(tenant), job_id)
