"""A job's life in the store: submission (with the fleet-wide listing and its undo), a rejection recorded at
submission, cancel, finalize, its usage and budget, and the reads of a job (its info, status, log, record, and
waiting for its end).

Each write is one Lua step (`scripts.py`) or one MULTI, so it is atomic; the fleet-wide entries a job adds or
leaves (`stats.py`) are written around the step on a Redis Cluster (other hash slots); on a single Redis, the
steps of the hot path write them themselves (submission's listing, the count of the end finalize writes).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agentq.errors import JobExpiredError, JobNotFoundError
from agentq.protocol.admission import AdmissionRequest
from agentq.protocol.budgets import Budget, BudgetAsk, Spend
from agentq.protocol.continuation import Seed
from agentq.protocol.digests import dumps, now_iso
from agentq.protocol.envelopes import Envelope
from agentq.protocol.jobs import JobPlan
from agentq.protocol.records import CallRecord, ErrorInfo, JobInfo, JobKind, JobRecord
from agentq.protocol.status import CallStatus, JobStatus
from agentq.protocol.tenants import DEFAULT_TENANT
from agentq.store import core
from agentq.store.admission import queue_admission, took_admission
from agentq.store.boundary import map_store_errors
from agentq.store.codecs import USAGE_PREFIX, decode_job
from agentq.store.connection import StoreConnection
from agentq.store.core import not_found
from agentq.store.job_timers import UNSTARTED, job_timer_member
from agentq.store.part import StorePart
from agentq.store.replies import AlreadyEnded, BudgetReply, CancelMissing, FinishInputs
from agentq.store.stats import JobCounts
from agentq.store.step_args import Listing
from agentq.store.submission import held_calls, submission_payload
from agentq.store.sync_reads import run

JOB_LISTING_S = 30 * 24 * 3600  # `agentq:jobs` keeps a job id this long (a job's keys expire with its TTL)
TRIM_EVERY_S = 1.0  # a process trims each fleet-wide listing of its expired entries at most this often


@map_store_errors
class RedisJobs(StorePart):
    """Submitting, ending and reading jobs (a part of `StateStore`)."""

    def __init__(self, conn: StoreConnection, counts: JobCounts):
        super().__init__(conn)
        self.counts = counts  # the metrics' bookkeeping of jobs as they end (a part it is given)
        self._trimmed: dict[str, float] = {}  # listing key -> when this process last trimmed it (store clock)

    # ------------------------------------------------------------------------------------------ submission

    def create_job(self, plan: JobPlan, records: Sequence[CallRecord], *, submitted: Any,
                   events: Sequence[Envelope], parent: dict | None = None, traceparent: str | None = None,
                   tenant: str = DEFAULT_TENANT, admission: AdmissionRequest | None = None,
                   seed: Seed | None = None, start_check_ms: int | None = None) -> bool:
        """Write a planned job (its calls as routed `records`) of `tenant` in one atomic step; False if a job with
        that id exists already. `parent` links a module's child job to the call it runs for. On a single Redis,
        `admission` (its ready calls' admission step) goes in the same round trip, run only if the job is written
        (`request.reply`; None: not run, on a cluster too). `seed`: a continued or forked job's copied log and
        exchanges (`protocol/continuation.py`). `start_check_ms`: the job's `@unstarted` timer, due then (unix ms),
        goes in the same round trip, before the job's script on a single Redis (a job written always has it; a
        refused id's job gets it too, unless it has one: it finds that job started, or starts it).

        One round trip (two on a cluster), whose commands a one-call job pays for: on a single Redis, the job's
        script writes the job and then its fleet-wide entries (the listing; the active jobs and those holding calls
        for a reviewer, for the metrics: ZADD NX, `Listing`), or nothing when it refuses the id; on a cluster, where
        a job's script touches only that job's keys (one slot), they follow the script in the pipeline. The
        listings' trims go along at most once a second (`_trim_due`)."""
        keys, held = self.keys(plan.id), bool(held_calls(plan))
        submission = submission_payload(plan, records, submitted=submitted, events=events, parent=parent,
                                        traceparent=traceparent, tenant=tenant, seed=seed)
        if start_check_ms is not None:  # the step that starts the job drops its check (claim.lua, settle.lua)
            submission["job"]["start_check"] = "1"
        payload = dumps(submission)
        now = self.clock()
        expire_at_ms = int((now + plan.ttl_s) * 1000)
        tenant_jobs = None if tenant == DEFAULT_TENANT else self.fleet.tenant_jobs(tenant)
        listing = self._listing(plan.id, now=now, expire_at_ms=expire_at_ms, held=held, tenant_jobs=tenant_jobs)
        pipe = self.redis.pipeline(transaction=False)
        checks = self._queue_start_check(pipe, plan.id, start_check_ms)  # first: its reply is dropped below
        if self.cluster:  # a cluster pipeline runs no scripts: the job's script first, then its bookkeeping
            if not self.scripts.submit(keys, payload, expire_at_ms):
                return False
            for key, score in zip(listing.keys, listing.scores, strict=True):
                pipe.zadd(key, {plan.id: score}, nx=True)
        else:
            self.scripts.queue_submit(pipe, keys, payload, expire_at_ms, listing)
        self._queue_trims(pipe, now, tenant_jobs)
        queued = queue_admission(self, pipe, admission, keys.job)
        replies = took_admission(admission, pipe.execute(raise_on_error=False), queued)[checks:]
        if self.cluster:
            return True
        written = self.scripts.submitted(replies[0], keys, payload, expire_at_ms, listing)
        if isinstance(written, Exception):
            raise written
        return written

    def _queue_start_check(self, pipe: Any, job_id: str, due_ms: int | None) -> int:
        """Queue a new job's `@unstarted` timer, due at `due_ms` (None: none; NX: a refused id's job keeps its own);
        how many replies it adds."""
        if due_ms is None:
            return 0
        pipe.zadd(self.fleet.timers, {job_timer_member(job_id, UNSTARTED): due_ms}, nx=True)
        return 1

    def _listing(self, job_id: str, *, now: float, expire_at_ms: int, held: bool,
                 tenant_jobs: str | None) -> Listing:
        """A new job's fleet-wide entries: the listing, a named tenant's listing, the active jobs, the approvals.
        The default tenant has no listing of its own (its jobs are read from the fleet's, filtered), so a
        deployment without tenants pays nothing for them."""
        listed: list[tuple[str, float]] = [(self.fleet.jobs, now)]
        if tenant_jobs:
            listed.append((tenant_jobs, now))
        listed.append((self.fleet.active_jobs, expire_at_ms / 1000))
        if held:
            listed.append((self.fleet.approval_jobs, now))
        return Listing(job_id, tuple(key for key, _ in listed), tuple(score for _, score in listed))

    def _queue_trims(self, pipe: Any, now: float, tenant_jobs: str | None) -> None:
        """Queue the trimming of the fleet's listings of their expired entries, those due (`_trim_due`)."""
        for key, until in ((self.fleet.jobs, now - JOB_LISTING_S), (tenant_jobs, now - JOB_LISTING_S),
                           (self.fleet.active_jobs, now)):  # active: jobs that expired without ending
            if key and self._trim_due(key, now):
                pipe.zremrangebyscore(key, 0, until)

    def _trim_due(self, key: str, now: float) -> bool:
        """Whether to trim the listing `key` now: once per `TRIM_EVERY_S` per process, so a listing holds expired
        entries a second longer at most while a submission costs no trim commands of its own (two, three with a
        named tenant's listing). Two threads may both trim: harmless."""
        if 0 <= now - self._trimmed.get(key, float("-inf")) < TRIM_EVERY_S:  # (a clock set back: trimmed)
            return False
        self._trimmed[key] = now
        return True

    def record_rejection(self, job_id: str, error: ErrorInfo, *, ttl_s: int, tenant: str = DEFAULT_TENANT) -> bool:
        """Record a job rejected at submission by task name, so its submitter can read why. The job hash,
        its TTL and the end signal are written in one MULTI; nothing when the id is taken."""
        keys, now = self.keys(job_id), now_iso()
        record = JobRecord(id=job_id, status=JobStatus.FAILED, error=error, created_at=now, finished_at=now,
                           tenant=tenant)
        fields = {"id": job_id, "status": JobStatus.FAILED.value, "kind": JobKind.PLAN.value, "tenant": tenant,
                  "created_at": now,
                  "finished_at": now, "error": dumps(error.to_dict()), "record": dumps(record.to_dict()),
                  "expire_at_ms": int((self.clock() + ttl_s) * 1000)}

        def write(pipe: Any) -> None:
            if pipe.exists(keys.job):
                pipe.multi()  # nothing to write: an empty transaction
                return
            pipe.multi()
            pipe.hset(keys.job, mapping=fields)
            pipe.expire(keys.job, ttl_s)
            pipe.delete(keys.done)
            pipe.rpush(keys.done, JobStatus.FAILED.value)
            pipe.expire(keys.done, ttl_s)

        replies = self.redis.transaction(write, keys.job)
        if replies:
            self.counts.count_end(job_id, JobStatus.FAILED, tenant)
        return bool(replies)

    # ------------------------------------------------------------------------------------------- its end

    def finalize(self, job_id: str, *, record: JobRecord, event: Envelope) -> bool:
        """Give an active job its final status and record (finalize.lua); False when it had ended already. The
        metrics' count of its end goes in the same step on a single Redis, after it on a cluster (`stats.py`)."""
        count = self.counts.in_step(job_id, record.status, record.tenant)
        ended = self.scripts.finalize(self.keys(job_id), record=record, event=event, count=count)
        if ended and count is None:
            self.counts.count_end(job_id, record.status, record.tenant)
        return ended

    def cancel(self, job_id: str, *, event: Envelope) -> tuple[JobStatus, list[str]]:
        """Cancel a job: (CANCELED, ids of calls whose tasks may still be queued), or (its final status, [])
        when it had ended already."""
        match self.scripts.cancel(self.keys(job_id), event=event):
            case CancelMissing():
                raise not_found(job_id)
            case AlreadyEnded(status=status):
                return status, []
            case canceled:
                tenant = self.redis.hget(self.keys(job_id).job, "tenant") or DEFAULT_TENANT
                self.counts.count_end(job_id, JobStatus.CANCELED, tenant)
                return JobStatus.CANCELED, canceled.ready

    def save_record(self, job_id: str, record: JobRecord) -> None:
        """Save an ended job's record again (with the outcomes that reached its log after it ended): it stands."""
        key = self.keys(job_id).job
        pipe = self.redis.pipeline(transaction=False)
        pipe.hset(key, "record", dumps(record.to_dict()))
        pipe.hdel(key, "record_stale")
        pipe.execute()

    def reserve_budget(self, job_id: str, key: str, *, budget: Budget, ask: BudgetAsk) -> BudgetReply:
        """Hold what the request `key` may spend against job `job_id`'s budget (budget.lua), or refuse it."""
        return self.scripts.reserve_budget(self.keys(job_id), key, budget=budget, ask=ask)

    def settle_budget(self, job_id: str, key: str, spend: Spend) -> bool:
        """What the request `key` held becomes what it spent (budget.lua); False when it held nothing."""
        return self.scripts.settle_budget(self.keys(job_id), key, spend)

    def add_usage(self, job_id: str, usage: dict[str, int]) -> None:
        """Add one request's (or a child job's) usage counters to the job's (`agentq.protocol.usage`)."""
        pipe = self.redis.pipeline(transaction=False)
        for name, count in usage.items():
            if count:
                pipe.hincrby(self.keys(job_id).job, USAGE_PREFIX + name, count)
        pipe.execute()

    def adopt_traceparent(self, job_id: str, traceparent: str) -> str | None:
        """The job's trace context (its hash's `traceparent`), `traceparent` stored first when it has none: what
        the first process tracing a job whose submitter did not trace creates, once (of two at once, one wins).
        None when the job does not exist; nothing is written then."""
        return self.scripts.trace_context(self.keys(job_id), traceparent)

    # ---------------------------------------------------------------------------------------------- reads

    def job_info(self, job_id: str) -> JobInfo:
        fields = self.redis.hgetall(self.keys(job_id).job)
        if not fields:
            raise not_found(job_id)
        return decode_job(fields)

    def job_status(self, job_id: str) -> JobStatus:
        return run(self.redis, core.job_status(self.keys(job_id)))

    def wait_finished(self, job_id: str, timeout_s: float) -> JobStatus | None:
        """Block until the job ends (at most `timeout_s`); its final status, or None on timeout. One round trip,
        however many events the job publishes meanwhile (see `core.wait_finished`)."""
        return run(self.redis, core.wait_finished(self.keys(job_id), timeout_s))

    def wait_record(self, job_id: str, timeout_s: float) -> JobRecord | None:
        """`wait_finished`, then the job's record: None on timeout. One round trip; on a Redis Cluster, two (see
        `core.wait_record`)."""
        return run(self.redis, core.wait_record(self.keys(job_id), timeout_s, cluster=self.cluster))

    def read_log(self, job_id: str, start: int = 0) -> list[dict]:
        return [json.loads(m) for m in self.redis.lrange(self.keys(job_id).log, start, -1)]

    def record(self, job_id: str) -> JobRecord:
        """The job record (docs/protocol.md#the-job-record): the saved one once the job ended, else computed from the
        job and its log (see `core.record`; the sync and async stores share it)."""
        return run(self.redis, core.record(self.keys(job_id)))

    def finish_inputs(self, job_id: str) -> FinishInputs:
        """(job, log, call statuses) in one round trip: what finalizing a job reads."""
        keys = self.keys(job_id)
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(keys.job)
        pipe.lrange(keys.log, 0, -1)
        pipe.hgetall(keys.status)
        fields, log, statuses = pipe.execute()
        if not fields:
            raise not_found(job_id)
        return FinishInputs(decode_job(fields), [json.loads(m) for m in log],
                            {k: CallStatus(v) for k, v in statuses.items()})

    def missing(self, job_id: str) -> JobNotFoundError:
        """The error for a job whose keys are gone: `JobExpiredError` while the fleet's listing still names it (it
        was submitted and its data expired with its `ttl_s`; the listing keeps ids `JOB_LISTING_S`), else
        `JobNotFoundError`. One read."""
        if self.redis.zscore(self.fleet.jobs, job_id) is None:
            return not_found(job_id)
        return JobExpiredError(f"job {job_id!r} expired: its data was kept for its ttl_s and is gone")

    def recent_jobs(self, limit: int = 50, *, tenant: str | None = None) -> list[str]:
        """Job ids, newest first: every tenant's, or those of `tenant` when it is a named one (the default tenant's
        are among every tenant's: see `_queue_listing`)."""
        listing = self.fleet.jobs if tenant in (None, DEFAULT_TENANT) else self.fleet.tenant_jobs(tenant)
        return list(self.redis.zrevrange(listing, 0, limit - 1))
