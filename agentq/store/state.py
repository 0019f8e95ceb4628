"""`StateStore`: every read and atomic write agentq makes to Redis.

Each state transition is one Lua script (see `lua/`), so it is atomic and costs one round trip; each
is idempotent so a redelivered task cannot write twice. Values are JSON. `store/scripts.py` lays out each
script's keys and arguments and reads its reply into a record of `store/replies.py`; this class adds what
goes around a step (the fleet-wide bookkeeping, pipelines of plain reads).
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentq.errors import JobNotFoundError
from agentq.protocol.envelopes import Envelope
from agentq.protocol.jobs import JobPlan
from agentq.protocol.records import CallRecord, JobInfo, JobKind, JobRecord
from agentq.protocol.status import CallStatus, JobStatus
from agentq.store.boundary import map_store_errors
from agentq.store.codecs import USAGE_PREFIX as USAGE_PREFIX
from agentq.store.codecs import decode_job as decode_job
from agentq.store.codecs import dumps as dumps
from agentq.store.codecs import entry as entry
from agentq.store.codecs import iso_utc as iso_utc
from agentq.store.codecs import now_iso as now_iso
from agentq.store.codecs import record_digest as record_digest
from agentq.store.codecs import saved_record
from agentq.store.connect import connect_redis
from agentq.store.event_codec import pack, unpack
from agentq.store.keys import FleetKeys, JobKeys
from agentq.store.records import build_job_record
from agentq.store.replies import (
    AlreadyEnded,
    CallsAdded,
    CancelMissing,
    Claim,
    Commit,
    Committed,
    Decision,
    FinishInputs,
    Settle,
    Settled,
    TickClaim,
    TickEnded,
)
from agentq.store.replies import ClaimOutcome as ClaimOutcome
from agentq.store.replies import CommitOutcome as CommitOutcome
from agentq.store.replies import SettleOutcome as SettleOutcome
from agentq.store.scripts import Scripts
from agentq.store.submission import held_calls, submission_payload

log = logging.getLogger("agentq.store")

_NOT_RELAYED = frozenset({"job.queued", "job.started", "job.finished"})  # the parent's call events tell those
JOB_LISTING_S = 30 * 24 * 3600  # `agentq:jobs` keeps a job id this long (a job's keys expire with its TTL)
_RELEASE_MARK_MS = 60_000  # how long a released call's lease key keeps the releasing token (see retry.lua)


@dataclass(frozen=True)
class AgentInputs:
    """What an agent tick reads, in one round trip."""

    info: JobInfo
    log: list[dict]
    exchanges: list[dict]
    registered: dict[str, dict]


@dataclass(frozen=True)
class CallTable:
    """What the calls view (SPEC §14 `/calls`) reads of a job besides its events, in one round trip."""

    records: dict[str, CallRecord]  # call id -> record
    statuses: dict[str, CallStatus]  # call id -> status
    attempts: dict[str, int]  # call id -> attempts started (absent: none yet)
    dependents: dict[str, list[str]]  # call id -> the calls that wait on it (absent: none)


@dataclass(frozen=True)
class WorkerBeat:
    """A worker's entry in the fleet's set: its id, when its announcement expires (unix s), and the
    announcement itself (None once its key expired)."""

    worker_id: str
    expires_at: float
    announcement: dict | None


@dataclass(frozen=True)
class FleetStats:
    """What the metrics read of the jobs (`StateStore.fleet_stats`)."""

    jobs_active: int
    approvals_pending: int
    jobs_total: dict[str, int]  # final status -> jobs that ended with it


@map_store_errors
class StateStore:
    """The Redis state store. Thread-safe; share one per process.

    Every public method maps Redis connection and timeout errors to `StoreUnavailableError` (see
    `store/boundary.py`), so nothing above the store handles redis-py's exceptions.
    """

    def __init__(self, redis_url: str, *, cluster: bool = False, client: Any = None, namespace: str = "agentq"):
        """The store at `redis_url`: one server, a Sentinel group (`redis+sentinel://`), or with `cluster` a
        Redis Cluster through any of its nodes (`store/connect.py` makes the connection)."""
        self.redis = client if client is not None else connect_redis(redis_url, cluster=cluster)
        self.cluster = cluster
        self.url = redis_url
        self.namespace = namespace
        self.fleet = FleetKeys(namespace)
        self.scripts = Scripts(self.redis)

    def keys(self, job_id: str) -> JobKeys:
        return JobKeys(self.namespace, job_id)

    def ping(self) -> None:
        self.redis.ping()

    def close(self) -> None:
        self.redis.close()

    # ----------------------------------------------------------------------------------- submission

    def create_job(self, plan: JobPlan, records: Sequence[CallRecord], *, submitted: Any,
                   events: Sequence[Envelope], parent: dict | None = None) -> bool:
        """Write a planned job (its calls as routed `records`) in one atomic step; False if a job with that id
        exists already. `parent` links a module's child job to the call it runs for.

        One round trip (two on a cluster): the job's script and the fleet-wide bookkeeping (the listing; the
        active jobs and those holding calls for a reviewer, for the metrics) in one pipeline, not in the script:
        a job's script touches only that job's keys, which share one Redis Cluster slot. ZADD NX leaves an
        existing job's entries as they were when the script refuses the id; what this pipeline added for a
        refused or failed submission is taken back."""
        keys, held = self.keys(plan.id), bool(held_calls(plan))
        payload = dumps(submission_payload(plan, records, submitted=submitted, events=events, parent=parent))
        now = time.time()
        expire_at_ms = int((now + plan.ttl_s) * 1000)
        pipe = self.redis.pipeline(transaction=False)
        if self.cluster:  # a cluster pipeline runs no scripts: the job's script first, then its bookkeeping
            if not self.scripts.submit(keys, payload, expire_at_ms):
                return False
        else:
            self.scripts.queue_submit(pipe, keys, payload, expire_at_ms)
        fleet_keys = self._queue_listing(pipe, plan.id, now=now, expire_at_ms=expire_at_ms, held=held)
        replies = pipe.execute(raise_on_error=False)
        if self.cluster:
            written: bool | Exception = True
        else:
            written, replies = self.scripts.submitted(replies[0], keys, payload, expire_at_ms), replies[1:]
        if isinstance(written, Exception) or not written:
            self._unlist(plan.id, [key for key, reply in zip(fleet_keys, replies, strict=False) if reply == 1])
            if isinstance(written, Exception):
                raise written
        return bool(written)

    def _queue_listing(self, pipe: Any, job_id: str, *, now: float, expire_at_ms: int, held: bool) -> list[str]:
        """Queue a new job's fleet-wide entries (listing, active, approvals) and the trimming of expired ones;
        returns the keys added to, in the order of their replies."""
        fleet_keys = [self.fleet.jobs, self.fleet.active_jobs] + ([self.fleet.approval_jobs] if held else [])
        pipe.zadd(self.fleet.jobs, {job_id: now}, nx=True)
        pipe.zadd(self.fleet.active_jobs, {job_id: expire_at_ms / 1000}, nx=True)
        if held:
            pipe.zadd(self.fleet.approval_jobs, {job_id: now}, nx=True)
        pipe.zremrangebyscore(self.fleet.jobs, 0, now - JOB_LISTING_S)
        pipe.zremrangebyscore(self.fleet.active_jobs, 0, now)  # jobs that expired without ending
        return fleet_keys

    def _unlist(self, job_id: str, undo: list[str]) -> None:
        """Take back the fleet-wide entries a refused or failed submission added."""
        if undo:
            with self.redis.pipeline(transaction=False) as back:
                for key in undo:
                    back.zrem(key, job_id)
                back.execute()

    # ------------------------------------------------------------------------------------ execution

    def claim(self, job_id: str, call_id: str, *, token: str, lease_ms: int, log_offset: int = -1,
              job_started: Envelope | None = None, record: CallRecord | None = None, record_sha: str = "",
              tool_sha: str = "", start_events: Sequence[Envelope] = (), expect_started: bool = False) -> Claim:
        """Claim a call for one attempt (and publish `job_started` if this claim starts the job).

        A caller whose task carried the call's `record` passes it with `record_sha` (SHA-1 of its stored JSON
        form, `record_digest`): if the stored record is the same, the reply leaves it out; otherwise the
        claim returns the stored record and that is what runs (`Claim.record_replaced`), so a forged or stale
        task cannot change what runs or where it writes. One that has a copy of the call's tool passes its
        `tool_sha` (`Claim.tool_sha` of the claim it came from): if the stored schema is the same, the reply
        leaves it out (`Claim.tool` is None). On the call's first attempt, with both current, the claim
        publishes the caller's `start_events` (`Claim.announced`).

        A caller that takes the job for started already passes `expect_started` (and no `job_started`): if the
        job has not started (a job id used again), nothing is written and the outcome is `UNSTARTED`.

        Replaying a claim with the `token` that holds the call (its reply was lost to a store outage) returns
        that claim again. Taking over a call whose lease expired counts a lost attempt (`Claim.lost`).
        """
        return self.scripts.claim(self.keys(job_id), call_id, token=token, lease_ms=lease_ms, log_offset=log_offset,
                                  job_started=job_started, expect_started=expect_started, record=record,
                                  record_sha=record_sha, tool_sha=tool_sha, start_events=start_events)

    def add_events(self, job_id: str, envelopes: Sequence[Envelope]) -> None:
        if not envelopes:
            return
        stream = self.keys(job_id).events
        if len(envelopes) == 1:
            self.redis.xadd(stream, {"e": entry(envelopes[0], job_id)})
            return
        pipe = self.redis.pipeline(transaction=False)
        for envelope in envelopes:
            pipe.xadd(stream, {"e": entry(envelope, job_id)})
        pipe.execute()

    def commit(self, job_id: str, call_id: str, *, token: str, status: CallStatus, messages: Sequence[dict] = (),
               events: Sequence[Envelope] = ()) -> Commit:
        commit = self.scripts.commit(self.keys(job_id), call_id, token=token, status=status, messages=messages,
                                     events=events)
        if isinstance(commit, Committed):
            self._after_committed(job_id, commit)
        return commit

    def _after_committed(self, job_id: str, commit: Committed) -> None:
        if commit.job_status is JobStatus.AWAITING_APPROVAL:  # the commit may have held a released call for a reviewer
            self._may_hold_approvals(job_id)

    def settle(self, job_id: str, call_id: str, *, record_sha: str, tool: str, tool_sha: str,
               job_started: Envelope | None, status: CallStatus, messages: Sequence[dict] = (),
               events: Sequence[Envelope] = ()) -> Settle:
        """Claim and commit a call's first attempt in one step, after its handler ran (see settle.lua): only
        if the call is ready and was never attempted, its job is active, `record_sha` is its stored record's
        SHA-1 and `tool_sha` that of the job's `tool`. `job_started` is published if this starts the job; None
        means the caller takes the job for started (`SettleUnstarted` if it is not). Writes nothing unless
        `Settled`."""
        settle = self.scripts.settle(self.keys(job_id), call_id, record_sha=record_sha, tool=tool, tool_sha=tool_sha,
                                     job_started=job_started, status=status, messages=messages, events=events)
        if isinstance(settle, Settled):
            self._after_committed(job_id, settle.commit)
        return settle

    def task_signing_key(self) -> bytes:
        """The fleet's secret for signing call tasks (created by the first process that asks): a worker runs
        a signed task's record before its claim (an `idempotent` activity), so a task that did not come from
        agentq must not be able to name what runs. Anyone who can read the store can sign; anyone who can only
        write to the broker cannot."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.set(self.fleet.task_key, secrets.token_hex(32), nx=True)
        pipe.get(self.fleet.task_key)
        return str(pipe.execute()[1]).encode()

    # ------------------------------------------------------------------------------------ agent jobs

    def begin_tick(self, job_id: str, *, exchanges: int, token: str, lease_ms: int,
                   job_started: Envelope | None = None) -> TickClaim:
        """Take the job's next model request (at most one in flight): it must still be the request number
        `exchanges`, no awaited call may be open, and no other task may hold the tick's lease."""
        return self.scripts.begin_tick(self.keys(job_id), exchanges=exchanges, token=token, lease_ms=lease_ms,
                                       job_started=job_started)

    def relay_events(self, job_id: str) -> int:
        """Copy a module's child job's new events to its parent's stream (the job's `parent` link names it),
        their parts' `source` set to the module's name and `relayed_from` naming the child; a grandchild's
        events keep theirs. A cursor moved by compare-and-set makes each batch go once, whichever process
        relays it. Returns how many were copied (0 for a job that is no module's child)."""
        keys = self.keys(job_id)
        cursor, link = self.redis.hmget(keys.job, ["relayed", "parent"])
        if not link:
            return 0
        parent = json.loads(link)
        parent_id = str(parent["job"])
        to_events, source = self.keys(parent_id).events, str(parent.get("module") or "module")
        copied = 0
        while True:
            cursor = cursor or "0-0"
            entries = self.read_events(job_id, cursor, count=500)
            if not entries or not self.scripts.relay(keys, cursor=cursor, to=entries[-1][0]):
                return copied
            pipe = self.redis.pipeline(transaction=False)
            for _, envelope in entries:
                if envelope.get("event") in _NOT_RELAYED:
                    continue
                if not envelope.get("relayed_from"):
                    if isinstance(envelope.get("part"), dict):
                        envelope["part"] = {**envelope["part"], "source": source}
                    envelope = {**envelope, "relayed_from": job_id}
                pipe.xadd(to_events, {"e": pack(envelope, parent_id)})
                copied += 1
            pipe.execute()
            if len(entries) < 500:
                return copied
            cursor = entries[-1][0]

    def end_ticking(self, job_id: str) -> None:
        """Clear the in-flight mark of a tick that asked nothing (its job is about to end)."""
        self.redis.hset(self.keys(job_id).job, mapping={"ticking": "0", "tick_attempt": "0"})

    def release_tick(self, job_id: str, *, token: str) -> None:
        """Give up the tick's lease (its request waits for another attempt); `ticking` stays set meanwhile."""
        self.scripts.unlease(self.keys(job_id).tick_lease, token=token)

    def agent_inputs(self, job_id: str) -> AgentInputs:
        keys = self.keys(job_id)
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(keys.job)
        pipe.lrange(keys.log, 0, -1)
        pipe.lrange(keys.exchanges, 0, -1)
        fields, log, exchanges = pipe.execute()
        if not fields:
            raise _not_found(job_id)
        return AgentInputs(decode_job(fields), [json.loads(m) for m in log], [json.loads(e) for e in exchanges],
                           json.loads(fields.get("registered") or "{}"))

    def job_tools(self, job_id: str) -> dict[str, dict]:
        """The job's composed tool schemas, by name."""
        return {k: json.loads(v) for k, v in self.redis.hgetall(self.keys(job_id).tools).items()}

    def set_job_tools(self, job_id: str, composed: dict[str, dict]) -> None:
        """The job's composed tool schemas as of this tick (what its calls' claims read)."""
        if composed:
            self.redis.hset(self.keys(job_id).tools, mapping={k: dumps(v) for k, v in composed.items()})

    def add_calls(self, job_id: str, *, token: str, records: Sequence[CallRecord],
                  plans: Sequence[Any]) -> list[CallRecord] | None:
        """Write calls of a tick's solution (each once, whatever the retries); the records of those ready
        now, or None when the tick's lease is no longer `token`'s or the job ended."""
        added = self.scripts.add_calls(self.keys(job_id), token=token, records=records, plans=plans)
        if not isinstance(added, CallsAdded):
            return None
        if any(plan.approval for plan in plans):
            self._may_hold_approvals(job_id)
        return added.ready

    def end_tick(self, job_id: str, *, token: str, exchange: dict, counts: bool, output: Any = None,
                 has_output: bool = False, usage: dict[str, int] | None = None, messages: Sequence[dict] = (),
                 events: Sequence[Envelope] = ()) -> TickEnded | None:
        """End the tick: (open awaited calls, ticks so far), or None when its lease is not `token`'s."""
        ended = self.scripts.end_tick(self.keys(job_id), token=token, exchange=exchange, counts=counts, output=output,
                                      has_output=has_output, usage=usage or {}, messages=messages, events=events)
        return ended if isinstance(ended, TickEnded) else None

    def add_usage(self, job_id: str, usage: dict[str, int]) -> None:
        """Add one request's (or a child job's) token usage to the job's counters."""
        pipe = self.redis.pipeline(transaction=False)
        for name, count in usage.items():
            if count:
                pipe.hincrby(self.keys(job_id).job, USAGE_PREFIX + name, count)
        pipe.execute()

    def hold_lease(self, job_id: str, call_id: str, *, token: str) -> None:
        """Keep a running call's lease, without renewals, until its job expires (a module call waiting on its
        child job)."""
        keys = self.keys(job_id)
        expire_at_ms = self.redis.hget(keys.job, "expire_at_ms")
        if expire_at_ms is None:
            raise _not_found(job_id)
        self.redis.set(keys.lease(call_id), token, pxat=int(expire_at_ms))

    def decide(self, job_id: str, call_id: str, *, decision: str, record: CallRecord | None = None,
               token: str = "", lease_ms: int = 0, event: Envelope | None = None) -> Decision:
        """A reviewer's decision on a call awaiting approval: `Decided` (its record after the decision),
        `DecisionConflict` (the call's status) or `DecisionMissing`."""
        return self.scripts.decide(self.keys(job_id), call_id, decision=decision, record=record, token=token,
                                   lease_ms=lease_ms, event=event)

    def release_for_retry(self, job_id: str, call_id: str, *, token: str, event: Envelope | None = None) -> bool:
        """Running -> ready for the call's next attempt, if `token` holds it (True also for a replay of the same
        release whose reply was lost)."""
        return self.scripts.retry(self.keys(job_id), call_id, token=token, event=event, mark_ms=_RELEASE_MARK_MS)

    def renew_leases(self, job_id: str, leases: dict[str, str], lease_ms: int) -> int:
        """Extend the leases (call id -> token) this process holds for one job; a lease that lapsed is made again
        while its call runs and no other attempt took it over (see renew.lua)."""
        return self.scripts.renew(self.keys(job_id), leases, lease_ms)

    def finalize(self, job_id: str, *, record: JobRecord, event: Envelope) -> bool:
        ended = self.scripts.finalize(self.keys(job_id), record=record, event=event)
        if ended:
            self._count_end(job_id, record.status)
        return ended

    def cancel(self, job_id: str, *, event: Envelope) -> tuple[JobStatus, list[str]]:
        """Cancel a job: (CANCELED, ids of calls whose tasks may still be queued), or (its final status, [])
        when it had ended already."""
        match self.scripts.cancel(self.keys(job_id), event=event):
            case CancelMissing():
                raise _not_found(job_id)
            case AlreadyEnded(status=status):
                return status, []
            case canceled:
                self._count_end(job_id, JobStatus.CANCELED)
                return JobStatus.CANCELED, canceled.ready

    def record_rejection(self, job_id: str, error: dict, *, ttl_s: int) -> bool:
        """Record a job rejected at submission by task name, so its submitter can read why. The job hash,
        its TTL and the end signal are written in one MULTI; nothing when the id is taken."""
        keys, now = self.keys(job_id), now_iso()
        record = JobRecord(id=job_id, status=JobStatus.FAILED, error=error, created_at=now, finished_at=now)
        fields = {"id": job_id, "status": JobStatus.FAILED.value, "kind": JobKind.PLAN.value, "created_at": now,
                  "finished_at": now, "error": dumps(error), "record": dumps(record.to_dict()),
                  "expire_at_ms": int((time.time() + ttl_s) * 1000)}

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
            self._count_end(job_id, JobStatus.FAILED)
        return bool(replies)

    def _count_end(self, job_id: str, status: JobStatus) -> None:
        """The metrics' bookkeeping of a job that just ended (its end is already written): it leaves the active
        and approvals sets and counts once under its final status. Separate commands after the job's script,
        never inside it (fleet-wide keys stay out of a job's hash slot, SPEC §15); best effort: an error here is
        logged, never raised, since the job did end (`fleet_stats` drops an ended job the set still holds)."""
        try:
            pipe = self.redis.pipeline(transaction=False)
            pipe.zrem(self.fleet.active_jobs, job_id)
            pipe.zrem(self.fleet.approval_jobs, job_id)
            pipe.hincrby(self.fleet.job_totals, status.value, 1)
            pipe.execute()
        except Exception:
            log.warning("job %s ended %s, but the metrics' job counts could not be updated", job_id, status,
                        exc_info=True)

    def save_record(self, job_id: str, record: JobRecord) -> None:
        self.redis.hset(self.keys(job_id).job, "record", dumps(record.to_dict()))

    # ---------------------------------------------------------------------------------------- reads

    def job_info(self, job_id: str) -> JobInfo:
        fields = self.redis.hgetall(self.keys(job_id).job)
        if not fields:
            raise _not_found(job_id)
        return decode_job(fields)

    def job_status(self, job_id: str) -> JobStatus:
        status = self.redis.hget(self.keys(job_id).job, "status")
        if status is None:
            raise _not_found(job_id)
        return JobStatus(status)

    def wait_finished(self, job_id: str, timeout_s: float) -> JobStatus | None:
        """Block until the job ends (at most `timeout_s`); its final status, or None on timeout.

        Every step that ends a job (finalize, cancel, a recorded rejection) pushes the final status onto the
        job's `done` list; waiters move that one entry onto the same list, so any number of them wake up
        and it stays there for later ones. One round trip, however many events the job publishes meanwhile.
        """
        done = self.keys(job_id).done
        status = self.redis.blmove(done, done, max(0.01, timeout_s), "RIGHT", "LEFT")
        return None if status is None else JobStatus(status)

    def wait_record(self, job_id: str, timeout_s: float) -> JobRecord | None:
        """`wait_finished`, then the job's record: None on timeout. The wait and the read of the saved record go
        in one pipeline (Redis runs the read as soon as the wait returns), so a waiter learns how its job ended
        in one round trip; on a Redis Cluster, in two."""
        if self.cluster:
            return self.record(job_id) if self.wait_finished(job_id, timeout_s) is not None else None
        keys = self.keys(job_id)
        pipe = self.redis.pipeline(transaction=False)
        pipe.blmove(keys.done, keys.done, max(0.01, timeout_s), "RIGHT", "LEFT")
        pipe.hmget(keys.job, ["status", "record"])
        ended, (status, saved) = pipe.execute()
        if ended is None:
            return None
        return saved_record(status, saved) or self.record(job_id)

    def read_log(self, job_id: str, start: int = 0) -> list[dict]:
        return [json.loads(m) for m in self.redis.lrange(self.keys(job_id).log, start, -1)]

    def call_records(self, job_id: str, call_ids: Sequence[str] | None = None) -> dict[str, CallRecord]:
        """Call id -> record: of every call, or of `call_ids` only (those that exist)."""
        calls = self.keys(job_id).calls
        if call_ids is None:
            return {k: CallRecord.from_dict(json.loads(v)) for k, v in self.redis.hgetall(calls).items()}
        if not call_ids:
            return {}
        values = self.redis.hmget(calls, list(call_ids))
        return {k: CallRecord.from_dict(json.loads(v)) for k, v in zip(call_ids, values, strict=True) if v is not None}

    def finish_inputs(self, job_id: str) -> FinishInputs:
        """(job, log, call statuses) in one round trip: what finalizing a job reads."""
        keys = self.keys(job_id)
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(keys.job)
        pipe.lrange(keys.log, 0, -1)
        pipe.hgetall(keys.status)
        fields, log, statuses = pipe.execute()
        if not fields:
            raise _not_found(job_id)
        return FinishInputs(decode_job(fields), [json.loads(m) for m in log],
                            {k: CallStatus(v) for k, v in statuses.items()})

    def dependents(self, job_id: str, call_id: str) -> list[str]:
        """The calls that wait on `call_id`."""
        value = self.redis.hget(self.keys(job_id).dependents, call_id)
        return json.loads(value) if value else []

    def call_statuses(self, job_id: str) -> dict[str, CallStatus]:
        return {k: CallStatus(v) for k, v in self.redis.hgetall(self.keys(job_id).status).items()}

    def record(self, job_id: str) -> JobRecord:
        """The job record of SPEC §12: the saved one once the job ended (read alone: the job hash also holds the
        submitted job and its solution schema), else computed from the job and its log. A canceled job's is always
        computed: a call that was running at the cancel may still write its outcome."""
        status, saved = self.redis.hmget(self.keys(job_id).job, ["status", "record"])
        if status is None:
            raise _not_found(job_id)
        record = saved_record(status, saved)
        if record is not None:
            return record
        info = self.job_info(job_id)
        if info.record is not None and info.status.is_final and info.status is not JobStatus.CANCELED:
            return info.record
        # a canceled job's calls that were running may still end: its state is what its log says now
        return build_job_record(info, self.read_log(job_id))

    def read_events(self, job_id: str, after: str = "0-0", *, block_ms: int | None = None,
                    count: int | None = None) -> list[tuple[str, dict]]:
        """Events after the stream id `after` as (id, envelope JSON form: stored entries are unpacked); with
        `block_ms`, wait up to that long for the first one. `parse_envelope` gives the typed envelope of an entry."""
        reply = self.redis.xread({self.keys(job_id).events: after}, count=count, block=block_ms)
        if not reply:
            return []
        return [(entry_id, unpack(fields["e"], job_id)) for entry_id, fields in reply[0][1]]

    def recent_jobs(self, limit: int = 50) -> list[str]:
        return list(self.redis.zrevrange(self.fleet.jobs, 0, limit - 1))

    # ----------------------------------------------------------------------- calls view

    def call_table(self, job_id: str) -> CallTable:
        """Every call's record, status, attempts and dependents, read in one round trip (`runtime/calls.py`
        builds SPEC §14's `/calls` items from it and the job's events). Raises `JobNotFoundError`."""
        keys = self.keys(job_id)
        pipe = self.redis.pipeline(transaction=False)
        pipe.exists(keys.job)
        pipe.hgetall(keys.calls)
        pipe.hgetall(keys.status)
        pipe.hgetall(keys.attempts)
        pipe.hgetall(keys.dependents)
        exists, calls, statuses, attempts, dependents = pipe.execute()
        if not exists:
            raise _not_found(job_id)
        return CallTable(records={k: CallRecord.from_dict(json.loads(v)) for k, v in calls.items()},
                         statuses={k: CallStatus(v) for k, v in statuses.items()},
                         attempts={k: int(v) for k, v in attempts.items()},
                         dependents={k: json.loads(v) for k, v in dependents.items()})

    # ---------------------------------------------------------------------------------------- fleet

    def announce_worker(self, worker_id: str, announcement: dict, ttl_s: float) -> None:
        """Announce a live worker (expires after `ttl_s`); each activity it serves is also remembered as
        *known* (SPEC §3) with the time it was last announced."""
        now = time.time()
        pipe = self.redis.pipeline(transaction=False)
        pipe.set(self.fleet.worker(worker_id), dumps(announcement), px=int(ttl_s * 1000))
        pipe.zadd(self.fleet.workers, {worker_id: now + ttl_s})
        if seen := seen_activities(announcement, now):
            pipe.hset(self.fleet.activities, mapping=seen)
        pipe.execute()

    def retire_worker(self, worker_id: str) -> None:
        pipe = self.redis.pipeline(transaction=False)
        pipe.delete(self.fleet.worker(worker_id))
        pipe.zrem(self.fleet.workers, worker_id)
        pipe.execute()

    def live_workers(self) -> list[dict]:
        now = time.time()
        self.redis.zremrangebyscore(self.fleet.workers, 0, now)
        ids = self.redis.zrangebyscore(self.fleet.workers, now, "+inf")
        if not ids:
            return []
        pipe = self.redis.pipeline(transaction=False)  # not MGET: on a cluster the keys live in many slots
        for worker_id in ids:
            pipe.get(self.fleet.worker(worker_id))
        return [json.loads(v) for v in pipe.execute() if v]

    def worker_beats(self) -> list[WorkerBeat]:
        """Every worker announcement the fleet's set still holds, live or expired but not yet trimmed (the
        healthcheck tells a stale worker from a missing one)."""
        entries = self.redis.zrange(self.fleet.workers, 0, -1, withscores=True)
        if not entries:
            return []
        pipe = self.redis.pipeline(transaction=False)  # not MGET: on a cluster the keys live in many slots
        for worker_id, _ in entries:
            pipe.get(self.fleet.worker(worker_id))
        values = pipe.execute()
        return [WorkerBeat(worker_id, float(expires), json.loads(value) if value else None)
                for (worker_id, expires), value in zip(entries, values, strict=True)]

    def fleet_stats(self, *, sample: int = 256) -> FleetStats:
        """Jobs active now, calls awaiting approval, and jobs ended by final status (the metrics of SPEC §15), in
        a few round trips whatever the number of jobs.

        Jobs active: the size of the active set once expired jobs are trimmed. Its members are taken out by the
        process that ends a job, right after the job's script; a process that died in between leaves an ended
        job behind, so each read checks a random `sample` of members and drops those that ended (all of them
        in a set no larger than the sample). Calls awaiting approval: summed over the jobs that may hold some
        (a set added to whenever a step may hold a call for a reviewer); jobs that hold none anymore leave it."""
        active_key, candidates_key, now = self.fleet.active_jobs, self.fleet.approval_jobs, time.time()
        pipe = self.redis.pipeline(transaction=False)
        pipe.zremrangebyscore(active_key, 0, now)
        pipe.zcard(active_key)
        pipe.zrandmember(active_key, sample)
        pipe.zrange(candidates_key, 0, -1, withscores=True)
        pipe.hgetall(self.fleet.job_totals)
        _, active, sampled, candidates, totals = pipe.execute()
        ids = list(dict.fromkeys([*(sampled or []), *(job_id for job_id, _ in candidates)]))
        rows: dict[str, tuple[JobStatus | None, int]] = {}
        if ids:
            pipe = self.redis.pipeline(transaction=False)
            for job_id in ids:
                pipe.hmget(self.keys(job_id).job, ["status", "awaiting"])
            for job_id, (status, awaiting) in zip(ids, pipe.execute(), strict=True):
                rows[job_id] = (JobStatus(status) if status else None, int(awaiting or 0))

        def ended(job_id: str) -> bool:
            status = rows[job_id][0]
            return status is None or not status.is_active

        gone = [job_id for job_id in sampled or [] if ended(job_id)]
        if gone:
            self.redis.zrem(active_key, *gone)
        pending = sum(rows[job_id][1] for job_id, _ in candidates if not ended(job_id) and rows[job_id][1] > 0)
        settled = {job_id: score for job_id, score in candidates if ended(job_id) or rows[job_id][1] <= 0}
        if settled:
            self._drop_settled(candidates_key, settled)
        return FleetStats(jobs_active=int(active) - len(gone), approvals_pending=pending,
                          jobs_total={status: int(count) for status, count in totals.items()})

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
            self.redis.zadd(self.fleet.approval_jobs, {job_id: time.time()})
        except Exception:
            log.warning("job %s may hold calls for a reviewer, but the metrics' approvals set could not be updated",
                        job_id, exc_info=True)

    def live_activities(self) -> dict[str, dict]:
        """Activity name -> its announcement (queue, options, and the workers serving it)."""
        activities: dict[str, dict] = {}
        for worker in self.live_workers():
            for activity in worker.get("activities", []):
                entry = activities.setdefault(activity["name"], {**activity, "workers": []})
                entry["workers"].append(worker.get("id"))
        return activities

    def known_activities(self, memory_s: float) -> dict[str, dict]:
        """Every activity announced within the last `memory_s` seconds (SPEC §3 "live and known"), see
        `known_view`; older ones are dropped from the store."""
        now = time.time()
        stored = {name: json.loads(value) for name, value in self.redis.hgetall(self.fleet.activities).items()}
        stale = [name for name, entry in stored.items() if float(entry.get("last_seen", 0)) < now - memory_s]
        if stale:
            self._drop_stale_activities(stale, now - memory_s)
        return known_view(stored, self.live_activities(), memory_s=memory_s, now=now)

    def _drop_stale_activities(self, names: list[str], cutoff: float) -> None:
        """HDEL the activities still last announced before `cutoff`, in one MULTI watched against a heartbeat
        that announces one of them again meanwhile."""
        key = self.fleet.activities

        def drop(pipe: Any) -> None:
            current = pipe.hmget(key, names)
            gone = [name for name, value in zip(names, current, strict=True)
                    if value is not None and float(json.loads(value).get("last_seen", 0)) < cutoff]
            pipe.multi()
            if gone:
                pipe.hdel(key, *gone)

        self.redis.transaction(drop, key)

    def forget_activity(self, name: str) -> bool:
        """Retire a known activity at once (its tools turn latent unless a live worker announces it again);
        True when it was known."""
        return bool(self.redis.hdel(self.fleet.activities, name))

    def publish_tools(self, schemas: dict[str, dict], *, publisher: str) -> list[str]:
        """Publish tool schemas for submitters; returns names another process published differently."""
        if not schemas:
            return []
        existing = self.redis.hmget(self.fleet.tools, list(schemas))
        conflicts = []
        pipe = self.redis.pipeline(transaction=False)
        for (name, schema), current in zip(schemas.items(), existing, strict=True):
            encoded = dumps(schema)
            if current is not None and json.loads(current) != schema:
                conflicts.append(name)
                pipe.hset(self.fleet.tool_conflicts, name,
                          dumps({"publisher": publisher, "at": now_iso(), "schema": schema}))
            pipe.hset(self.fleet.tools, name, encoded)
        pipe.execute()
        return conflicts

    def published_tools(self) -> dict[str, dict]:
        return {k: json.loads(v) for k, v in self.redis.hgetall(self.fleet.tools).items()}

    def tool_conflicts(self) -> dict[str, dict]:
        return {k: json.loads(v) for k, v in self.redis.hgetall(self.fleet.tool_conflicts).items()}


def seen_activities(announcement: dict, now: float) -> dict[str, str]:
    """The remembered form of a worker's activities: name -> its announcement JSON plus `last_seen` (unix s)."""
    return {activity["name"]: dumps({**activity, "last_seen": now})
            for activity in announcement.get("activities", []) if activity.get("name")}


def known_view(stored: dict[str, dict], live: dict[str, dict], *, memory_s: float, now: float) -> dict[str, dict]:
    """The known activities by name (sorted): each one's announcement (name, task, queue, options), `live`,
    the ids of the live `workers` serving it ([] when none) and `last_seen` (ISO-8601 UTC).

    `stored` are the remembered announcements (`last_seen` in unix seconds), `live` those of `live_activities`:
    an activity a live worker serves is always known, with what its live workers announced (their queue is
    the one consumed)."""
    known: dict[str, dict] = {}
    for name in sorted({*stored, *live}):
        entry, current = stored.get(name), live.get(name)
        last_seen = float(entry.get("last_seen", 0)) if entry is not None else now
        if current is None and last_seen < now - memory_s:
            continue
        known[name] = {**(entry or {}), **(current or {}), "live": current is not None,
                       "workers": list(current["workers"]) if current is not None else [],
                       "last_seen": iso_utc(last_seen)}
    return known


def _not_found(job_id: str) -> JobNotFoundError:
    return JobNotFoundError(f"no job {job_id!r} (never submitted, or expired)")
