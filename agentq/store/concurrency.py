"""The store's side of job concurrency keys (docs/tenants.md): `RedisConcurrency`.

A tenant's keys share the hash tag of its name (`agentq:conc:{<tenant>}:…`): who holds a key (a zset, job id -> its
expiry), who waits for it (a zset, job id -> its place in line) and each job's keys (a hash), so admitting a job
and releasing one (which lets the first in line in) are one Lua step on one node of a cluster (concurrency.lua).

A job with keys is written `waiting` and admitted just after (`admit_concurrency`); a job that holds its keys is
started by whoever let it in (`start_waiting`: `waiting` -> its status, in the job's own slot). A job leaves its
keys when it ends (`release_concurrency`, after the step that ended it). A holder that expired without ending drops
out at the next step; before a job waits, the holders and waiters of its keys are looked at: one that ended (its
release lost with a process that died) is released then, and one let in but never started (its starter died) is
handed back to be started, so no ended job and no lost start blocks a key.
"""

from __future__ import annotations

import json
from typing import Any

from agentq.protocol.concurrency import ConcurrencyKeys
from agentq.protocol.envelopes import Envelope
from agentq.protocol.status import JobStatus
from agentq.store.boundary import map_store_errors
from agentq.store.codecs import entry
from agentq.store.part import StorePart
from agentq.store.step_args import ConcurrencyArgs


@map_store_errors
class RedisConcurrency(StorePart):
    """Admitting, releasing and starting jobs with concurrency keys (see the module docstring)."""

    def admit_concurrency(self, tenant: str, job_id: str, keys: ConcurrencyKeys, *, expire_at_ms: int) -> list[str]:
        """Admit a written `waiting` job under its keys: the ids of the jobs that hold their keys now and are to be
        started (`job_id` among them when it fits now; else it waits in line)."""
        args = [ConcurrencyArgs(prefix=self.fleet.concurrency_prefix(tenant), op="admit", job_id=job_id,
                                keys=[list(k) for k in keys], expire_at_s=expire_at_ms / 1000).encode()]
        reply = self.scripts.run("concurrency", [self.fleet.concurrency(tenant)], args)
        started = [str(j) for j in reply[1:]]
        if int(reply[0]) == 1:
            return [job_id, *started]
        self.redis.sadd(self.fleet.concurrency_tenants, tenant)  # a job waits: `sweep_concurrency` looks at it
        return _unique(started + self._unblock(tenant, job_id, [key for key, _ in keys]))

    def sweep_concurrency(self) -> dict[str, list[str]]:
        """Look at every tenant with jobs waiting for keys: release the holders and waiters that ended, let the
        first in line in where they fit; the jobs to start, by tenant. (What a lost release or start left, when no
        job that would wait comes to look.)"""
        found: dict[str, list[str]] = {}
        for tenant in sorted(self.redis.smembers(self.fleet.concurrency_tenants)):
            specs = self.redis.hvals(self.fleet.concurrency(tenant))
            if not specs:
                self.redis.srem(self.fleet.concurrency_tenants, tenant)
                continue
            keys = sorted({key for spec in specs for key, _ in json.loads(spec)["k"]})
            args = [ConcurrencyArgs(prefix=self.fleet.concurrency_prefix(tenant), op="promote", keys=keys).encode()]
            started = [str(j) for j in self.scripts.run("concurrency", [self.fleet.concurrency(tenant)], args)[1:]]
            if started := _unique(started + self._unblock(tenant, "", keys)):
                found[tenant] = started
        return found

    def release_concurrency(self, tenant: str, job_id: str) -> list[str]:
        """The job ended or waits no more: it leaves its keys; the ids of the waiting jobs that hold theirs now."""
        args = [ConcurrencyArgs(prefix=self.fleet.concurrency_prefix(tenant), op="release", job_id=job_id).encode()]
        return [str(j) for j in self.scripts.run("concurrency", [self.fleet.concurrency(tenant)], args)[1:]]

    def _unblock(self, tenant: str, job_id: str, keys: list[str]) -> list[str]:
        """Before `job_id` waits: release the holders and waiters of its keys that ended (or expired), and hand
        back the holders still `waiting` (let in, never started)."""
        holders, members = self._members(tenant, job_id, keys)
        if not members:
            return []
        pipe = self.redis.pipeline(transaction=False)
        for member in members:
            pipe.hget(self.keys(member).job, "status")
        started: list[str] = []
        for member, status in zip(members, pipe.execute(), strict=True):
            if status is None or JobStatus(status).is_final:
                started += self.release_concurrency(tenant, member)
            elif status == JobStatus.WAITING and member in holders:
                started.append(member)
        return _unique(started)

    def _members(self, tenant: str, job_id: str, keys: list[str]) -> tuple[set[str], list[str]]:
        """The holders of `keys`, and every holder and waiter of them but `job_id`."""
        prefix = self.fleet.concurrency_prefix(tenant)
        pipe = self.redis.pipeline(transaction=False)
        for key in keys:
            pipe.zrange(f"{prefix}h:{key}", 0, -1)
            pipe.zrange(f"{prefix}w:{key}", 0, -1)
        replies = pipe.execute()
        holders = {j for reply in replies[0::2] for j in reply}
        return holders, sorted((holders | {j for reply in replies[1::2] for j in reply}) - {job_id})

    def start_waiting(self, job_id: str, *, event: Envelope) -> bool:
        """A job let in under its keys: `waiting` -> the status it was written for (queued or awaiting approval),
        with `event`; False when it is not waiting (started by another process, canceled, ended)."""
        keys = self.keys(job_id)

        def flip(pipe: Any) -> None:
            status, start_status = pipe.hmget(keys.job, "status", "start_status")
            pipe.multi()
            if status == JobStatus.WAITING:
                pipe.hset(keys.job, "status", start_status or JobStatus.QUEUED.value)
                pipe.xadd(keys.events, {"e": entry(event, job_id)})

        replies = self.redis.transaction(flip, keys.job)
        return bool(replies)


def _unique(ids: list[str]) -> list[str]:
    return list(dict.fromkeys(ids))
