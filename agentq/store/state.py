"""`StateStore`: every read and atomic write agentq makes to Redis.

Each state transition is one Lua script (see `lua/`), so it is atomic and costs one round trip; each
is idempotent so a redelivered task cannot write twice. Values are JSON.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from importlib import resources
from typing import Any, NamedTuple

from agentq.errors import JobNotFoundError
from agentq.protocol.envelopes import Envelope
from agentq.protocol.jobs import JobPlan
from agentq.protocol.records import CallRecord, JobInfo, JobKind, JobRecord, empty_usage
from agentq.protocol.status import CallStatus, JobStatus, lua_preamble
from agentq.store.boundary import map_store_errors
from agentq.store.connect import connect_redis
from agentq.store.event_codec import pack, unpack
from agentq.store.keys import FleetKeys, JobKeys
from agentq.store.records import build_job_record

log = logging.getLogger("agentq.store")

_SCRIPTS = ("submit", "claim", "commit", "retry", "finalize", "cancel", "renew", "tick_begin", "add_calls", "tick_end",
            "decide", "unlease", "relay", "settle")
_NOT_RELAYED = frozenset({"job.queued", "job.started", "job.finished"})  # the parent's call events tell those
USAGE_PREFIX = "usage."  # job hash fields `usage.<counter>`, summed with HINCRBY
JOB_LISTING_S = 30 * 24 * 3600  # `agentq:jobs` keeps a job id this long (a job's keys expire with its TTL)
_RELEASE_MARK_MS = 60_000  # how long a released call's lease key keeps the releasing token (see retry.lua)


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def entry(envelope: Envelope, job_id: str) -> str:
    """The stored (packed) form of an envelope in the event stream of job `job_id` (see `store/event_codec.py`)."""
    return pack(envelope.to_dict(), job_id)


def record_digest(record: CallRecord | dict) -> str:
    """SHA-1 of a call record's stored JSON form (what `claim` compares a task's record with); `record` may be
    the record's `to_dict()` already."""
    body = record if isinstance(record, dict) else record.to_dict()
    return hashlib.sha1(dumps(body).encode()).hexdigest()


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


class ClaimOutcome(StrEnum):
    CLAIMED = "claimed"  # this attempt owns the call
    FINISHED = "finished"  # the call already ended (`status`)
    LEASED = "leased"  # another attempt is running it (`lease_left_ms`)
    CANCELED = "canceled"  # its job was canceled
    NOT_READY = "not_ready"  # it still waits on other calls or on approval (`status`)
    MISSING = "missing"  # no such call
    UNSTARTED = "unstarted"  # the caller passed no job-started event but the job has not started: claim again


@dataclass
class Claim:
    """Outcome of `StateStore.claim`."""

    outcome: ClaimOutcome
    record: CallRecord | None = None
    tool: dict | None = None
    attempt: int = 0
    log_length: int = 0
    log_tail: list[dict] = field(default_factory=list)
    status: CallStatus | None = None  # FINISHED, NOT_READY: the call's status
    lease_left_ms: int = 0  # LEASED: how long the other attempt's lease still runs
    tool_sha: str = ""  # SHA-1 of the stored schema `tool` was decoded from (when the reply carried it)
    announced: bool = False  # the claim published the caller's start events
    record_replaced: bool = False  # the record the task carried was not the stored one: the stored one runs
    lost: int = 0  # attempts of this call lost so far: their process died before they ended (see claim.lua)


class FinishInputs(NamedTuple):
    """What finalizing a job reads (`StateStore.finish_inputs`), in one round trip or in a commit's reply."""

    info: JobInfo
    log: list[dict]
    statuses: dict[str, CallStatus]


class CommitOutcome(StrEnum):
    COMMITTED = "committed"
    DUPLICATE = "duplicate"  # the call was committed already (a redelivered task)
    SUPERSEDED = "superseded"  # another attempt took the call over after this one's lease expired


@dataclass
class Commit:
    """Outcome of `StateStore.commit`; `released` are the records of calls that became ready."""

    outcome: CommitOutcome
    open_calls: int = 0
    job_status: JobStatus | None = None
    released: list[CallRecord] = field(default_factory=list)
    ticking: bool = False  # an agent tick is in flight: it takes the job's next step when it ends
    kind: JobKind | None = None  # the job's kind (COMMITTED)
    finish_inputs: FinishInputs | None = None  # the last awaited call of a plan job: what finalizing it reads


class SettleOutcome(StrEnum):
    COMMITTED = "committed"  # claimed and committed: `Settle.commit` tells what the commit released
    OTHER = "other"  # not a ready call's first attempt, or not the stored record: claim and commit as usual
    STALE_TOOL = "stale_tool"  # the caller's tool is not the job's (`Settle.tool`, `Settle.tool_sha`)
    UNSTARTED = "unstarted"  # the caller took the job for started, it is not: settle again with job.started


@dataclass
class Settle:
    """Outcome of `StateStore.settle`."""

    outcome: SettleOutcome
    commit: Commit | None = None
    tool: dict | None = None
    tool_sha: str = ""


class TickOutcome(StrEnum):
    CLAIMED = "claimed"  # this task makes the job's next model request
    FINISHED = "finished"  # the job ended
    STALE = "stale"  # the request this task was sent for was made already
    LEASED = "leased"  # another task is making it (`lease_left_ms`)
    BUSY = "busy"  # calls are still open: the last one's commit takes the next step
    MISSING = "missing"


@dataclass
class TickClaim:
    outcome: TickOutcome
    attempt: int = 0
    lease_left_ms: int = 0


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
        self._scripts = {name: self.redis.register_script(_lua(name)) for name in _SCRIPTS}

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
        exists already. `parent` links a module's child job to the call it runs for."""
        keys = self.keys(plan.id)
        created = now_iso()
        waiting = {c.id: c.waiting for c in plan.calls}
        held = {c.id for c in plan.calls if c.approval and c.waiting == 0}
        job = {
            "id": plan.id, "kind": plan.kind.value, "created_at": created,
            "status": (JobStatus.AWAITING_APPROVAL if held else JobStatus.QUEUED).value,
            "open": sum(1 for c in plan.calls if c.awaited), "ticks": 0, "awaiting": len(held),
            "options": dumps(plan.options), "output": dumps(plan.output),
            "solution": dumps(plan.solution), "submitted": dumps(submitted),
        }
        if plan.kind is JobKind.AGENT:
            job["registered"] = dumps(plan.registered)
        if parent is not None:
            job["parent"] = dumps(parent)
        payload = {
            "job": job,
            "log": [dumps(m) for m in plan.context],
            "calls": {r.id: dumps(r.to_dict()) for r in records},
            "status": {c: (CallStatus.PENDING if n else CallStatus.AWAITING_APPROVAL if c in held
                           else CallStatus.READY).value for c, n in waiting.items()},
            "approval": {c.id: 1 for c in plan.calls if c.approval},
            "waiting": {c: n for c, n in waiting.items() if n},  # only calls that wait: a commit decrements those
            "tools": {name: dumps(schema) for name, schema in plan.tools.items()},
            "events": [entry(e, plan.id) for e in events],
            "dependents": {c.id: dumps(c.dependents) for c in plan.calls if c.dependents},
        }
        from redis.exceptions import NoScriptError

        now = time.time()
        expire_at_ms = int((now + plan.ttl_s) * 1000)
        script, job_keys = self._scripts["submit"], list(keys.all)
        args = [dumps(payload), expire_at_ms]
        # One round trip (two on a cluster): the job's script and the fleet-wide bookkeeping (the listing; the
        # active jobs and those holding calls for a reviewer, for the metrics) in one pipeline, not in the script:
        # a job's script touches only that job's keys, which share one Redis Cluster slot. ZADD NX leaves an
        # existing job's entries as they were when the script refuses the id; what this pipeline added for a
        # refused or failed submission is taken back.
        pipe = self.redis.pipeline(transaction=False)
        if self.cluster:  # a cluster pipeline runs no scripts: the job's script first, then its bookkeeping
            if not script(keys=job_keys, args=args):
                return False
        else:
            pipe.evalsha(script.sha, len(job_keys), *job_keys, *args)
        pipe.zadd(self.fleet.jobs, {plan.id: now}, nx=True)
        pipe.zadd(self.fleet.active_jobs, {plan.id: expire_at_ms / 1000}, nx=True)
        if held:
            pipe.zadd(self.fleet.approval_jobs, {plan.id: now}, nx=True)
        pipe.zremrangebyscore(self.fleet.jobs, 0, now - JOB_LISTING_S)
        pipe.zremrangebyscore(self.fleet.active_jobs, 0, now)  # jobs that expired without ending
        replies = pipe.execute(raise_on_error=False)
        written: Any = True if self.cluster else replies[0]
        added = replies if self.cluster else replies[1:]
        if isinstance(written, NoScriptError):  # a Redis that lost its scripts (restart, SCRIPT FLUSH)
            written = script(keys=job_keys, args=args)
        if isinstance(written, Exception) or not written:
            fleet_keys = [self.fleet.jobs, self.fleet.active_jobs] + ([self.fleet.approval_jobs] if held else [])
            undo = [key for key, reply in zip(fleet_keys, added, strict=False) if reply == 1]
            if undo:
                with self.redis.pipeline(transaction=False) as back:
                    for key in undo:
                        back.zrem(key, plan.id)
                    back.execute()
            if isinstance(written, Exception):
                raise written
        return bool(written)

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
        keys = self.keys(job_id)
        reply = self._scripts["claim"](
            keys=[keys.job, keys.calls, keys.status, keys.attempts, keys.tools, keys.events, keys.log,
                  keys.lease(call_id), keys.lost],
            args=[call_id, token, lease_ms, now_iso(),
                  entry(job_started, job_id) if job_started else "!" if expect_started else "",
                  log_offset, record_sha if record is not None else "", tool_sha,
                  record.tool if record is not None else "", *(entry(e, job_id) for e in start_events)],
        )
        outcome = ClaimOutcome(reply[0])
        if outcome is ClaimOutcome.LEASED:
            return Claim(outcome, lease_left_ms=int(reply[1]))
        if outcome in (ClaimOutcome.FINISHED, ClaimOutcome.NOT_READY):
            return Claim(outcome, status=CallStatus(reply[1]))
        if outcome is not ClaimOutcome.CLAIMED:
            return Claim(outcome)
        return Claim(
            outcome,
            record=CallRecord.from_dict(json.loads(reply[1])) if reply[1] else record,
            record_replaced=bool(reply[1]) and record is not None,
            tool=json.loads(reply[2]) if reply[2] else None,
            attempt=int(reply[3]),
            log_length=int(reply[4]),
            log_tail=[json.loads(m) for m in reply[7:]],
            tool_sha=hashlib.sha1(reply[2].encode()).hexdigest() if reply[2] else "",
            announced=reply[5] == "1",
            lost=int(reply[6]),
        )

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
        keys = self.keys(job_id)
        reply = self._scripts["commit"](
            keys=[keys.job, keys.log, keys.calls, keys.status, keys.waiting, keys.events, keys.lease(call_id),
                  keys.dependents, keys.approval],
            args=[call_id, token, status.value, len(messages),
                  *(dumps(m) for m in messages), *(entry(e, job_id) for e in events)],
        )
        outcome = CommitOutcome(reply[0])
        if outcome is not CommitOutcome.COMMITTED:
            return Commit(outcome)
        return self._committed(job_id, reply)

    def _committed(self, job_id: str, reply: list) -> Commit:
        """The `Commit` of a commit.lua / settle.lua reply: `{'committed', open, job status, ticking, kind, n,
        n released records, [what finalizing a plan job reads: m, m job fields and values, k, k log messages,
        call statuses' fields and values]}`."""
        if reply[2] == JobStatus.AWAITING_APPROVAL:  # the commit may have held a released call for a reviewer
            self._may_hold_approvals(job_id)
        released_end = 6 + int(reply[5])
        inputs = None
        if len(reply) > released_end:
            job_end = released_end + 1 + int(reply[released_end])
            log_end = job_end + 1 + int(reply[job_end])
            fields, statuses = reply[released_end + 1:job_end], reply[log_end:]
            inputs = FinishInputs(decode_job(dict(zip(fields[::2], fields[1::2], strict=True))),
                                  [json.loads(m) for m in reply[job_end + 1:log_end]],
                                  {k: CallStatus(v) for k, v in zip(statuses[::2], statuses[1::2], strict=True)})
        return Commit(CommitOutcome.COMMITTED, open_calls=int(reply[1]), job_status=JobStatus(reply[2]),
                      ticking=reply[3] == "1", kind=JobKind(reply[4]),
                      released=[CallRecord.from_dict(json.loads(r)) for r in reply[6:released_end]],
                      finish_inputs=inputs)

    def settle(self, job_id: str, call_id: str, *, record_sha: str, tool: str, tool_sha: str,
               job_started: Envelope | None, status: CallStatus, messages: Sequence[dict] = (),
               events: Sequence[Envelope] = ()) -> Settle:
        """Claim and commit a call's first attempt in one step, after its handler ran (see settle.lua): only
        if the call is ready and was never attempted, its job is active, `record_sha` is its stored record's
        SHA-1 and `tool_sha` that of the job's `tool`. `job_started` is published if this starts the job; None
        means the caller takes the job for started (`UNSTARTED` if it is not). Writes nothing unless
        `COMMITTED`."""
        keys = self.keys(job_id)
        reply = self._scripts["settle"](
            keys=[keys.job, keys.calls, keys.status, keys.attempts, keys.tools, keys.events, keys.log,
                  keys.waiting, keys.dependents, keys.approval],
            args=[call_id, record_sha, tool, tool_sha, now_iso(),
                  entry(job_started, job_id) if job_started is not None else "!", status.value, len(messages),
                  *(dumps(m) for m in messages), *(entry(e, job_id) for e in events)],
        )
        outcome = SettleOutcome(reply[0])
        if outcome is SettleOutcome.COMMITTED:
            return Settle(outcome, commit=self._committed(job_id, reply))
        if outcome is SettleOutcome.STALE_TOOL:
            return Settle(outcome, tool=json.loads(reply[1]), tool_sha=hashlib.sha1(reply[1].encode()).hexdigest())
        return Settle(outcome)

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
        keys = self.keys(job_id)
        reply = self._scripts["tick_begin"](
            keys=[keys.job, keys.tick_lease, keys.exchanges, keys.events],
            args=[exchanges, token, lease_ms, now_iso(), entry(job_started, job_id) if job_started else ""])
        outcome = TickOutcome(reply[0])
        if outcome is TickOutcome.CLAIMED:
            return TickClaim(outcome, attempt=int(reply[1]))
        if outcome is TickOutcome.LEASED:
            return TickClaim(outcome, lease_left_ms=int(reply[1]))
        return TickClaim(outcome)

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
            if not entries or not self._scripts["relay"](keys=[keys.job], args=[cursor, entries[-1][0]]):
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
        self._scripts["unlease"](keys=[self.keys(job_id).tick_lease], args=[token])

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
        keys = self.keys(job_id)
        args: list[Any] = [token]
        for record, plan in zip(records, plans, strict=True):
            flags = ("a" if plan.approval else "") + ("w" if record.awaited else "")
            args += [record.id, dumps(record.to_dict()), dumps(plan.depends_on), flags or "-"]
        reply = self._scripts["add_calls"](
            keys=[keys.job, keys.calls, keys.status, keys.waiting, keys.dependents, keys.approval, keys.tick_lease],
            args=args)
        if reply[0] != "ok":
            return None
        if any(plan.approval for plan in plans):
            self._may_hold_approvals(job_id)
        return [CallRecord.from_dict(json.loads(r)) for r in reply[1:]]

    def end_tick(self, job_id: str, *, token: str, exchange: dict, counts: bool, output: Any = None,
                 has_output: bool = False, usage: dict[str, int] | None = None, messages: Sequence[dict] = (),
                 events: Sequence[Envelope] = ()) -> tuple[int, int] | None:
        """End the tick: (open awaited calls, ticks so far), or None when its lease is not `token`'s."""
        keys = self.keys(job_id)
        reply = self._scripts["tick_end"](
            keys=[keys.job, keys.tick_lease, keys.exchanges, keys.log, keys.events],
            args=[token, dumps(exchange), 1 if counts else 0, dumps(output) if has_output else "",
                  dumps(usage or {}), len(messages), *(dumps(m) for m in messages),
                  *(entry(e, job_id) for e in events)])
        if reply[0] != "ended":
            return None
        return int(reply[1]), int(reply[2])

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
               token: str = "", lease_ms: int = 0, event: Envelope | None = None) -> tuple[str, Any]:
        """A reviewer's decision on a call awaiting approval: ('decided', its record), ('conflict', status)
        or ('missing', None)."""
        keys = self.keys(job_id)
        reply = self._scripts["decide"](
            keys=[keys.job, keys.calls, keys.status, keys.approval, keys.lease(call_id), keys.events],
            args=[call_id, decision, dumps(record.to_dict()) if record else "", token, lease_ms,
                  entry(event, job_id) if event else ""])
        if reply[0] == "decided":
            return "decided", CallRecord.from_dict(json.loads(reply[1]))
        if reply[0] == "conflict":
            return "conflict", CallStatus(reply[1])
        return "missing", None

    def release_for_retry(self, job_id: str, call_id: str, *, token: str, event: Envelope | None = None) -> bool:
        """Running -> ready for the call's next attempt, if `token` holds it (True also for a replay of the same
        release whose reply was lost)."""
        keys = self.keys(job_id)
        return bool(self._scripts["retry"](keys=[keys.status, keys.lease(call_id), keys.events],
                                           args=[call_id, token, entry(event, job_id) if event else "",
                                                 _RELEASE_MARK_MS]))

    def renew_leases(self, job_id: str, leases: dict[str, str], lease_ms: int) -> int:
        """Extend the leases (call id -> token) this process holds for one job; a lease that lapsed is made again
        while its call runs and no other attempt took it over (see renew.lua)."""
        keys = self.keys(job_id)
        ids = list(leases)
        return int(self._scripts["renew"](keys=[keys.status, *(keys.lease(i) for i in ids)],
                                          args=[lease_ms, *(leases[i] for i in ids), *ids]))

    def finalize(self, job_id: str, *, record: JobRecord, event: Envelope) -> bool:
        keys = self.keys(job_id)
        ended = bool(self._scripts["finalize"](keys=[keys.job, keys.events, keys.done],
                                               args=[record.status.value, dumps(record.to_dict()),
                                                     record.finished_at or now_iso(), entry(event, job_id)]))
        if ended:
            self._count_end(job_id, record.status)
        return ended

    def cancel(self, job_id: str, *, event: Envelope) -> tuple[JobStatus, list[str]]:
        """Cancel a job: (CANCELED, ids of calls whose tasks may still be queued), or (its final status, [])
        when it had ended already."""
        keys = self.keys(job_id)
        reply = self._scripts["cancel"](keys=[keys.job, keys.status, keys.events, keys.done],
                                        args=[now_iso(), entry(event, job_id)])
        if reply[0] == "missing":
            raise _not_found(job_id)
        if reply[0] == "final":
            return JobStatus(reply[1]), []
        self._count_end(job_id, JobStatus.CANCELED)
        return JobStatus.CANCELED, list(reply[1:])

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
        return _saved_record(status, saved) or self.record(job_id)

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
        record = _saved_record(status, saved)
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


def iso_utc(unix_s: float) -> str:
    """ISO-8601 UTC of unix seconds, in `now_iso`'s form."""
    return datetime.fromtimestamp(unix_s, UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def decode_job(fields: dict[str, str]) -> JobInfo:
    """The typed job of its stored hash fields."""

    def loads(name: str, default: Any = None) -> Any:
        value = fields.get(name)
        return json.loads(value) if value else default

    record = loads("record")
    return JobInfo(
        id=fields["id"], kind=JobKind(fields.get("kind") or JobKind.PLAN), status=JobStatus(fields["status"]),
        created_at=fields.get("created_at"), started_at=fields.get("started_at") or None,
        finished_at=fields.get("finished_at") or None, open_calls=int(fields.get("open") or 0),
        options=loads("options", {}), output=loads("output"), error=loads("error"),
        usage={name: int(fields.get(USAGE_PREFIX + name) or 0) for name in empty_usage()},
        record=JobRecord.from_dict(record) if record else None,
        ticks=int(fields.get("ticks") or 0), final_output=loads("final_output"),
        has_final_output="final_output" in fields, parent=loads("parent"), ticking=fields.get("ticking") == "1",
        exchanges=int(fields.get("exchanges") or 0),
    )


def _lua(name: str) -> str:
    """A store script with the status preamble (`agentq.protocol.status.lua_preamble`) in front, and each line
    `--#include <fragment>` replaced by `lua/<fragment>.lua` (functions several scripts share)."""
    body = _lua_file(name)
    lines = [_lua_file(line.removeprefix(_INCLUDE).strip()) if line.startswith(_INCLUDE) else line
             for line in body.splitlines(keepends=True)]
    return lua_preamble() + "".join(lines)


_INCLUDE = "--#include "


def _lua_file(name: str) -> str:
    return resources.files("agentq.store").joinpath("lua", f"{name}.lua").read_text(encoding="utf-8")


def _saved_record(status: str | None, saved: str | None) -> JobRecord | None:
    """The record saved when the job ended, if it stands: a canceled job's is computed anew (a call that was
    running at the cancel may still write its outcome)."""
    if saved and status is not None and JobStatus(status).is_final and status != JobStatus.CANCELED:
        return JobRecord.from_dict(json.loads(saved))
    return None


def _not_found(job_id: str) -> JobNotFoundError:
    return JobNotFoundError(f"no job {job_id!r} (never submitted, or expired)")
