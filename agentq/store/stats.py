"""The metrics' bookkeeping of jobs (docs/metrics.md): the fleet-wide sets of active jobs and of jobs that may hold
calls for a reviewer, the counts of ended jobs, and `fleet_stats`, which reads them at scrape time.

These keys are fleet-wide, so they are written by separate commands after a job's script, never inside it (a
job's script touches only keys in its job's Redis Cluster slot). Writing them is best effort: the job's own
state is already written, and `fleet_stats` repairs what a process that died in between left behind.
"""

from __future__ import annotations

import logging
from typing import Any

from agentq.protocol.status import JobStatus
from agentq.store.boundary import map_store_errors
from agentq.store.connection import StoreConnection
from agentq.store.views import FleetStats

log = logging.getLogger("agentq.store")

_Row = tuple[JobStatus | None, int]  # a job's status (None once it expired) and its calls awaiting approval


def _ended(row: _Row) -> bool:
    status = row[0]
    return status is None or not status.is_active


@map_store_errors
class StatsSteps(StoreConnection):
    """Counting jobs for the metrics (a mixin of `StateStore`)."""

    def fleet_stats(self, *, sample: int = 256) -> FleetStats:
        """Jobs active now, calls awaiting approval, and jobs ended by final status (the metrics of docs/metrics.md), in
        a few round trips whatever the number of jobs.

        Jobs active: the size of the active set once expired jobs are trimmed. Its members are taken out by the
        process that ends a job, right after the job's script; a process that died in between leaves an ended
        job behind, so each read checks a random `sample` of members and drops those that ended (all of them
        in a set no larger than the sample). Calls awaiting approval: summed over the jobs that may hold some
        (a set added to whenever a step may hold a call for a reviewer); jobs that hold none anymore leave it."""
        active_key, candidates_key, now = self.fleet.active_jobs, self.fleet.approval_jobs, self.clock()
        pipe = self.redis.pipeline(transaction=False)
        pipe.zremrangebyscore(active_key, 0, now)
        pipe.zcard(active_key)
        pipe.zrandmember(active_key, sample)
        pipe.zrange(candidates_key, 0, -1, withscores=True)
        pipe.hgetall(self.fleet.job_totals)
        _, active, sampled, candidates, totals = pipe.execute()
        ids = list(dict.fromkeys([*(sampled or []), *(job_id for job_id, _ in candidates)]))
        rows = self._job_rows(ids)
        gone = [job_id for job_id in sampled or [] if _ended(rows[job_id])]
        if gone:
            self.redis.zrem(active_key, *gone)
        pending = self._approvals_pending(candidates_key, candidates, rows)
        return FleetStats(jobs_active=int(active) - len(gone), approvals_pending=pending,
                          jobs_total=_by_status(totals), jobs_by_tenant=_by_tenant(totals))

    def _approvals_pending(self, key: str, candidates: list[tuple[str, float]],
                           rows: dict[str, _Row]) -> int:
        """The calls awaiting approval, summed over the candidate jobs that still hold some; the others leave the
        approvals set."""
        holding = {job_id for job_id, _ in candidates if not _ended(rows[job_id]) and rows[job_id][1] > 0}
        settled = {job_id: score for job_id, score in candidates if job_id not in holding}
        if settled:
            self._drop_settled(key, settled)
        return sum(rows[job_id][1] for job_id in holding)

    def _job_rows(self, ids: list[str]) -> dict[str, _Row]:
        """Job id -> (its status, None once it expired; its calls awaiting approval), in one round trip."""
        if not ids:
            return {}
        pipe = self.redis.pipeline(transaction=False)
        for job_id in ids:
            pipe.hmget(self.keys(job_id).job, ["status", "awaiting"])
        return {job_id: (JobStatus(status) if status else None, int(awaiting or 0))
                for job_id, (status, awaiting) in zip(ids, pipe.execute(), strict=True)}

    def _drop_settled(self, key: str, settled: dict[str, float]) -> None:
        """Take jobs that hold no call for a reviewer out of the approvals set, unless a step added one of them
        again since it was read (its score changed): compare-and-delete in one watched MULTI."""
        names = list(settled)

        def drop(pipe: Any) -> None:
            scores = pipe.zmscore(key, names)
            pipe.multi()
            unchanged = [n for n, score in zip(names, scores, strict=True) if score == settled[n]]
            if unchanged:
                pipe.zrem(key, *unchanged)

        self.redis.transaction(drop, key)

    def _may_hold_approvals(self, job_id: str) -> None:
        """A step may have held a call of `job_id` for a reviewer: (re)add it to the approvals set, with a new
        score (see `_drop_settled`). Best effort, after the job's script (never inside it)."""
        try:
            self.redis.zadd(self.fleet.approval_jobs, {job_id: self.clock()})
        except Exception:
            log.warning("job %s may hold calls for a reviewer, but the metrics' approvals set could not be updated",
                        job_id, exc_info=True)

    def _count_end(self, job_id: str, status: JobStatus, tenant: str) -> None:
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


def _by_status(totals: dict[str, str]) -> dict[str, int]:
    """The job totals' `<status>` fields: jobs ended by final status."""
    return {status: int(count) for status, count in totals.items() if ":" not in status}


def _by_tenant(totals: dict[str, str]) -> dict[tuple[str, ...], int]:
    """The job totals' `<status>:<tenant>` fields: jobs ended by final status and tenant."""
    return {tuple(field.split(":", 1)): int(count) for field, count in totals.items() if ":" in field}
