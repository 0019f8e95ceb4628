"""What the restart check reads of the fleet's active jobs: `RedisActiveJobs`, a part of `StateStore`.

After a restart of the store's server (which is the broker too), the engine's own tasks may be lost: an agent's tick,
a latent, module or wait call's task. Nothing admits them, so the admission's own check (`admitted_before`) does not
see them. `active_job_heads` reads, for the jobs in the fleet's active set (`FleetKeys.active_jobs`: every job
submitted and not ended), what tells whether such a task is due: the job's status, kind, open awaited calls, tick in
flight and its lease, the number of its model requests, and its calls that are `ready`. One pipeline per `PAGE` jobs:
an `HMGET` of the job hash, an `LLEN`, a `PTTL` and an `HGETALL` of the call statuses per job.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentq.protocol.records import JobKind
from agentq.protocol.status import CallStatus, JobStatus
from agentq.store.boundary import map_store_errors
from agentq.store.part import StorePart
from agentq.store.views import JobHead

PAGE = 200  # jobs read per pipeline
_ACTIVE = {s.value for s in JobStatus if s.is_active}


@map_store_errors
class RedisActiveJobs(StorePart):
    """The restart check's reads of the active jobs (see the module docstring)."""

    def active_job_heads(self, limit: int) -> list[JobHead]:
        """The heads of at most `limit` jobs of the fleet's active set (oldest expiry first), those still there
        and not ended."""
        job_ids = [str(j) for j in self.redis.zrange(self.fleet.active_jobs, 0, max(limit, 1) - 1)]
        heads: list[JobHead] = []
        for i in range(0, len(job_ids), PAGE):
            heads += self._heads(job_ids[i:i + PAGE])
        return heads

    def _heads(self, job_ids: Sequence[str]) -> list[JobHead]:
        pipe = self.redis.pipeline(transaction=False)
        for job_id in job_ids:
            keys = self.keys(job_id)
            pipe.hmget(keys.job, ["status", "kind", "open", "ticking"])
            pipe.llen(keys.exchanges)
            pipe.pttl(keys.tick_lease)
            pipe.hgetall(keys.status)
        replies = pipe.execute()
        heads: list[JobHead] = []
        for n, job_id in enumerate(job_ids):
            (status, kind, open_calls, ticking), exchanges, lease_ms, statuses = replies[4 * n:4 * n + 4]
            if status not in _ACTIVE:
                continue
            ready = tuple(sorted(c for c, s in statuses.items() if s == CallStatus.READY.value))
            heads.append(JobHead(job_id, JobStatus(status), JobKind(kind or JobKind.PLAN.value),
                                 int(open_calls or 0), ticking == "1", int(exchanges), int(lease_ms) > 0, ready))
        return heads
