"""The store's side of continuing and forking a job (docs/continue-and-fork.md): `RedisCopies`.

What a copy reads of its source job (the job hash, the log and exchanges as stored JSON, the spec) is one pipeline
on the source's slot; the copy itself is written by `create_job` with a `Seed` (submit.lua: one atomic step). A
thread's jobs and a job's forks are fleet-wide sorted sets written after the copy was written (a copy is never
listed before it exists), each kept as long as the longest-lived job it lists.
"""

from __future__ import annotations

import json
from typing import Any

from agentq.protocol.continuation import CopySource
from agentq.store import core
from agentq.store.boundary import map_store_errors
from agentq.store.codecs import decode_job
from agentq.store.connection import StoreConnection
from agentq.store.contracts import JobReader
from agentq.store.part import StorePart
from agentq.store.sync_reads import run


@map_store_errors
class RedisCopies(StorePart):
    """Reading a job to copy, and the listings of threads and forks (a part of `StateStore`)."""

    def __init__(self, conn: StoreConnection, jobs: JobReader):
        super().__init__(conn)
        self.jobs = jobs  # tells an expired job from one never submitted (`missing`)

    def copy_source(self, job_id: str) -> CopySource:
        """The job as a copy reads it, in one round trip; `JobExpiredError` / `JobNotFoundError` when it is gone."""
        keys = self.keys(job_id)
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(keys.job)
        pipe.lrange(keys.log, 0, -1)
        pipe.lrange(keys.exchanges, 0, -1)
        pipe.hmget(keys.spec, ["submitted", "registered"])
        fields, log, exchanges, (submitted, registered) = pipe.execute()
        if not fields:
            raise self.jobs.missing(job_id)
        return CopySource(decode_job(fields), tuple(log), tuple(exchanges),
                          json.loads(submitted or fields.get("submitted") or "null"),
                          json.loads(registered or fields.get("registered") or "{}"))

    def list_copy(self, job_id: str, *, thread: str | None = None, forked_from: str | None = None,
                  expire_at_ms: int) -> None:
        """List a written copy: in its thread (its first job first, then each continuation in turn), or among the
        forks of `forked_from`. Each listing lives until its longest-lived job expires."""
        now = self.clock()
        pipe = self.redis.pipeline(transaction=False)
        if thread is not None:
            key = self.fleet.thread(thread)
            pipe.zadd(key, {thread: 0}, nx=True)
            pipe.zadd(key, {job_id: now}, nx=True)
        else:
            assert forked_from is not None
            key = self.fleet.forks(forked_from)
            pipe.zadd(key, {job_id: now}, nx=True)
        pipe.pexpireat(key, expire_at_ms, nx=True)
        pipe.pexpireat(key, expire_at_ms, gt=True)
        pipe.execute()

    def submitted_job(self, job_id: str) -> Any:
        """The job as it was submitted (a copy's: its new messages and options), None when it is gone."""
        return run(self.redis, core.submitted(self.keys(job_id)))

    def thread_jobs(self, thread: str) -> list[str]:
        """A thread's jobs in order (its first job first); [] for an unknown thread."""
        return list(self.redis.zrange(self.fleet.thread(thread), 0, -1))

    def forks_of(self, job_id: str) -> list[str]:
        """A job's forks, oldest first."""
        return list(self.redis.zrange(self.fleet.forks(job_id), 0, -1))
