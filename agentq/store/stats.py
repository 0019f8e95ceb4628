"""The metrics' bookkeeping of jobs (docs/metrics.md): the fleet-wide sets of active jobs and of jobs that may hold
calls for a reviewer, and the counts of ended jobs, written by the job's steps (`JobCounts`, a part the
job-step parts are given); `fleet_stats.py`'s `RedisStats` reads them at scrape time.

These keys are fleet-wide, so they are written by separate commands after a job's script, never inside it (a
job's script touches only keys in its job's Redis Cluster slot). Writing them is best effort: the job's own
state is already written, and `RedisStats.fleet_stats` repairs what a process that died in between left behind.
"""

from __future__ import annotations

import logging

from agentq.protocol.status import JobStatus
from agentq.store.boundary import map_store_errors
from agentq.store.part import StorePart

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

    def count_end(self, job_id: str, status: JobStatus, tenant: str) -> None:
        """The bookkeeping of a job that just ended (its end is already written): it leaves the active and
        approvals sets (the metrics') and its tenant's active set (docs/tenants.md: the limit of active jobs), and
        counts once under its final status. Separate commands after the job's script,
        never inside it (fleet-wide keys stay out of a job's hash slot, docs/monitoring.md); best effort: an error here
        is logged, never raised, since the job did end (`fleet_stats` drops an ended job the set still holds)."""
        try:
            pipe = self.redis.pipeline(transaction=False)
            pipe.zrem(self.fleet.active_jobs, job_id)
            pipe.zrem(self.fleet.approval_jobs, job_id)
            pipe.zrem(self.fleet.tenant_active(tenant), job_id)
            pipe.hincrby(self.fleet.job_totals, status.value, 1)
            pipe.hincrby(self.fleet.job_totals, f"{status.value}:{tenant}", 1)  # by tenant (a name has no ':')
            pipe.execute()
        except Exception:
            log.warning("job %s ended %s, but the metrics' job counts could not be updated", job_id, status,
                        exc_info=True)
