"""The metrics' bookkeeping of jobs (docs/metrics.md): the fleet-wide sets of active jobs and of jobs that may hold
calls for a reviewer, and the counts of ended jobs, written by the job's steps (`JobCounts`, a part the
job-step parts are given); `fleet_stats.py`'s `RedisStats` reads them at scrape time.

These keys are fleet-wide: on a Redis Cluster they are in other hash slots than a job's, so they are written by
separate commands after the job's script, never inside it. On a single Redis (Sentinel too: one master) the steps
that end a job on the hot path, finalize.lua and the commit that ends its job (commit.lua), write the count of the
end themselves, in the same round trip (`in_step`); the other ends (cancel, deadline, a rejected submission) are
counted after their step everywhere. Written after a step, it is best effort: the job's own state is already
written, and `RedisStats.fleet_stats` repairs what a process that died in between left behind.
"""

from __future__ import annotations

import logging

from agentq.protocol.status import JobStatus
from agentq.store.boundary import map_store_errors
from agentq.store.part import StorePart
from agentq.store.step_args import EndCount

log = logging.getLogger("agentq.store")


@map_store_errors
class JobCounts(StorePart):
    """Counting jobs for the metrics as they end: a collaborator of the job-step parts that end or hold jobs
    (`RedisJobs`, `RedisCalls`, `RedisTicks`, `RedisJobTimers`), not a base of theirs."""

    def may_hold_approvals(self, job_id: str) -> None:
        """A step may have held a call of `job_id` for a reviewer: (re)add it to the approvals set, with a new
        score (see `fleet_stats.py`'s `_drop_settled`). Best effort, after the job's script (never inside it)."""
        try:
            self.redis.zadd(self.fleet.approval_jobs, {job_id: self.clock()})
        except Exception:
            log.warning("job %s may hold calls for a reviewer, but the metrics' approvals set could not be updated",
                        job_id, exc_info=True)

    def in_step(self, job_id: str, status: JobStatus, tenant: str) -> EndCount | None:
        """The count of `job_id`'s end for the step that may end it to write itself (the same keys and fields as
        `count_end`), saving the round trip after it: on a single Redis. None on a cluster (other hash slots),
        where the caller calls `count_end` once the step ended the job."""
        if self.cluster:
            return None
        return EndCount(job_id, self._end_keys(tenant), _totals(status, tenant))

    def count_end(self, job_id: str, status: JobStatus, tenant: str) -> None:
        """The bookkeeping of a job that just ended (its end is already written): it leaves the active and
        approvals sets (the metrics') and its tenant's active set (docs/tenants.md: the limit of active jobs), and
        counts once under its final status. Separate commands after the job's script (a step given `in_step`'s
        count wrote them itself); best effort: an error here is logged, never raised, since the job did end
        (`fleet_stats` drops an ended job the set still holds)."""
        try:
            *sets, totals = self._end_keys(tenant)
            pipe = self.redis.pipeline(transaction=False)
            for key in sets:
                pipe.zrem(key, job_id)
            for field in _totals(status, tenant):
                pipe.hincrby(totals, field, 1)
            pipe.execute()
        except Exception:
            log.warning("job %s ended %s, but the metrics' job counts could not be updated", job_id, status,
                        exc_info=True)

    def _end_keys(self, tenant: str) -> tuple[str, str, str, str]:
        """The keys a job's end is counted in: the sets it leaves (active, approvals, its tenant's active), then
        the totals."""
        return (self.fleet.active_jobs, self.fleet.approval_jobs, self.fleet.tenant_active(tenant),
                self.fleet.job_totals)


def _totals(status: JobStatus, tenant: str) -> tuple[str, str]:
    """The fields of the job totals an end is counted in: its final status, and by tenant (a name has no ':')."""
    return status.value, f"{status.value}:{tenant}"
