"""The metrics' scrape-time reads of the jobs' bookkeeping (docs/metrics.md): `RedisStats.fleet_stats`, a part of
its own over the store's connection (`part.py`). The job steps write the sets and counts (`stats.py`: after a
job's script, best effort, except where a single Redis lets the step that ends the job write them itself); this
read repairs what a process that died in between left behind.
"""

from __future__ import annotations

import logging
from typing import Any

from agentq.protocol.status import JobStatus
from agentq.store.boundary import map_store_errors
from agentq.store.part import StorePart
from agentq.store.views import FleetStats

log = logging.getLogger("agentq.store")

_Row = tuple[JobStatus | None, int]  # a job's status (None once it expired) and its calls awaiting approval


def _ended(row: _Row) -> bool:
    status = row[0]
    return status is None or not status.is_active


@map_store_errors
class RedisStats(StorePart):
    """The fleet's figures for the metrics: the `StatsStore` contract."""

    def fleet_stats(self, *, sample: int = 256) -> FleetStats:
        """Jobs active now, calls awaiting approval, and jobs ended by final status (the metrics of docs/metrics.md), in
        a few round trips whatever the number of jobs.

        Jobs active: the size of the active set once expired jobs are trimmed. Its members are taken out by the
        process that ends a job, right after the job's script (by the script itself where `stats.py` says); a
        process that died in between leaves an ended job behind, so each read checks a random `sample` of members
        and drops those that ended (all of them in a set no larger than the sample). Calls awaiting approval:
        summed over the jobs that may hold some (a set added to whenever a step may hold a call for a reviewer);
        jobs that hold none anymore leave it."""
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


def _by_status(totals: dict[str, str]) -> dict[str, int]:
    """The job totals' `<status>` fields: jobs ended by final status."""
    return {status: int(count) for status, count in totals.items() if ":" not in status}


def _by_tenant(totals: dict[str, str]) -> dict[tuple[str, ...], int]:
    """The job totals' `<status>:<tenant>` fields: jobs ended by final status and tenant."""
    return {tuple(field.split(":", 1)): int(count) for field, count in totals.items() if ":" in field}
