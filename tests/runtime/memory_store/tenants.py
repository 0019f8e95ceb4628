"""The memory store's tenants' limits: tenant_admit.lua step by step, on the store's clock; a job leaves its
tenant's active set when it ends (`_end`)."""

from __future__ import annotations

import math

from agentq.protocol.status import JobStatus
from agentq.protocol.tenants import TenantLimits
from agentq.store.replies import TenantRefusal
from agentq.store.tenants import NO_HINT_S
from tests.runtime.memory_store.core import MemoryCore


class TenantSteps(MemoryCore):
    def _tenant(self, tenant: str) -> tuple[dict[str, float], dict[str, float]]:
        """The tenant's active jobs (job id -> expiry, s) and its rate (`tat`, ms)."""
        active = self.__dict__.setdefault("_tenant_active", {}).setdefault(tenant, {})
        rate = self.__dict__.setdefault("_tenant_rate", {}).setdefault(tenant, {})
        return active, rate

    def admit_job(self, tenant: str, job_id: str, limits: TenantLimits, *,
                  expire_at_ms: int) -> TenantRefusal | None:
        with self._changed:
            now = self.clock() * 1000
            active, rate = self._tenant(tenant)
            for job in [j for j, expiry in active.items() if expiry * 1000 <= now]:
                del active[job]
            if limits.max_active_jobs and len(active) >= limits.max_active_jobs and job_id not in active:
                self._drop_ended(active)  # `TenantSteps._drop_ended`: an ended job holds no place
            if limits.max_active_jobs and len(active) >= limits.max_active_jobs and job_id not in active:
                return TenantRefusal(by_active=True, wait_s=NO_HINT_S)
            if limits.jobs_per_minute:
                interval = round(60_000 / limits.jobs_per_minute)
                tat = max(rate.get("tat", 0), now)
                tolerance = interval * (max(1, math.floor(limits.jobs_per_minute)) - 1)
                if tat - now > tolerance:
                    return TenantRefusal(by_active=False, wait_s=max((tat - now - tolerance) / 1000, 0.001))
                rate["tat"] = tat + interval
            if limits.max_active_jobs:
                active[job_id] = expire_at_ms / 1000
            return None

    def _drop_ended(self, active: dict[str, float]) -> None:
        for job in list(active):
            state = self._jobs.get(job)
            status = state.job.get("status") if state is not None else None
            if status is not None and JobStatus(status).is_final:
                del active[job]

    def release_job(self, tenant: str, job_id: str) -> None:
        with self._changed:
            self._tenant(tenant)[0].pop(job_id, None)
