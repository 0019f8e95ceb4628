"""A call's steps in the store: claim, commit, settle (claim and commit in one), release for a retry, lease
renewal and holding, a reviewer's decision; and the reads of a job's calls (records, statuses, dependents,
the calls view's table).

Each step is one Lua script (`scripts.py` lays out its keys and arguments and parses its reply into a record
of `replies.py`), so it is atomic, costs one round trip, and is idempotent under redelivery.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from agentq.protocol.envelopes import Envelope
from agentq.protocol.records import CallRecord
from agentq.protocol.status import CallStatus, JobStatus
from agentq.store.boundary import map_store_errors
from agentq.store.connection import StoreConnection
from agentq.store.core import not_found
from agentq.store.job_timers import unstarted_check
from agentq.store.part import StorePart
from agentq.store.replies import Claim, Commit, Committed, Decision, EndAhead, RejectedCall, Settle, Settled
from agentq.store.stats import JobCounts
from agentq.store.step_args import StartCheck
from agentq.store.views import CallTable

RELEASE_MARK_MS = 60_000  # how long a released call's lease key keeps the releasing token (see retry.lua)


@map_store_errors
class RedisCalls(StorePart):
    """Running a job's calls (a part of `StateStore`)."""

    def __init__(self, conn: StoreConnection, counts: JobCounts):
        super().__init__(conn)
        self.counts = counts  # the metrics' bookkeeping of jobs as they end (a part it is given)

    def claim(self, job_id: str, call_id: str, *, token: str, lease_ms: int, log_offset: int = -1,
              job_started: Envelope | None = None, record: CallRecord | None = None, record_sha: str = "",
              tool_sha: str = "", start_events: Sequence[Envelope] = (), expect_started: bool = False,
              last_call: bool = False, tools_at: str = "") -> Claim:
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

        A caller that would build the job's end ahead of the call's commit passes `last_call`: when the call is
        its plan job's one open awaited call, the claim sends what finalizing the job reads (`Claimed.last`).

        `tools_at`: the `Claimed.tools_at` of an earlier claim of the same plan job that found the caller's copy
        of the tool current (or sent it): a plan job's tools never change, so the claim takes that copy for
        current without reading the stored schema while the job is that one (not a job id used again).
        """
        return self.scripts.claim(self.keys(job_id), call_id, token=token, lease_ms=lease_ms, log_offset=log_offset,
                                  job_started=job_started, expect_started=expect_started, record=record,
                                  record_sha=record_sha, tool_sha=tool_sha, start_events=start_events,
                                  last_call=last_call, tools_at=tools_at,
                                  unstarted=None if expect_started else self._unstarted(job_id))

    def commit(self, job_id: str, call_id: str, *, token: str, status: CallStatus, messages: Sequence[dict] = (),
               events: Sequence[Envelope] = (), awaited: bool | None = None, ahead: EndAhead | None = None,
               lease_ms: int = 0) -> Commit:
        """Write a running call's outcome exactly once (see commit.lua). A caller holding the call's stored record
        (the claim gave it) passes its `awaited`, so the step does not read and decode the record again. `ahead`
        is the job's end built from `Claimed.last`: the commit writes it, as `finalize` would, when it ends the
        job and nothing changed since the claim (`Committed.finalized`; else the reply brings what finalizing
        reads, as without it); on a single Redis it counts the end for the metrics in the same step, on a cluster
        the count follows it (`stats.py`). `lease_ms`: the caller's lease length, given back to another attempt
        that took the call over (0: `LEASE_KEPT_MS`)."""
        count = None if ahead is None else self.counts.in_step(job_id, ahead.record.status, ahead.record.tenant)
        commit = self.scripts.commit(self.keys(job_id), call_id, token=token, status=status, messages=messages,
                                     events=events, awaited=awaited, ahead=ahead, lease_ms=lease_ms, count=count)
        if isinstance(commit, Committed):
            self._after_committed(job_id, commit)
            if commit.finalized and ahead is not None and count is None:
                self.counts.count_end(job_id, ahead.record.status, ahead.record.tenant)
        return commit

    def _unstarted(self, job_id: str) -> StartCheck | None:
        """What a step that may start the job needs to drop its `@unstarted` timer (on one Redis; None on a
        cluster): a step that takes the job for started passes nothing."""
        return unstarted_check(job_id, timers=self.fleet.timers, cluster=self.cluster)

    def _after_committed(self, job_id: str, commit: Committed) -> None:
        if commit.job_status is JobStatus.AWAITING_APPROVAL:  # the commit may have held a released call for a reviewer
            self.counts.may_hold_approvals(job_id)

    def settle(self, job_id: str, call_id: str, *, record_sha: str, tool: str, tool_sha: str,
               job_started: Envelope | None, status: CallStatus, messages: Sequence[dict] = (),
               events: Sequence[Envelope] = ()) -> Settle:
        """Claim and commit a call's first attempt in one step, after its handler ran (see settle.lua): only
        if the call is ready and was never attempted, its job is active, `record_sha` is its stored record's
        SHA-1 and `tool_sha` that of the job's `tool`. `job_started` is published if this starts the job; None
        means the caller takes the job for started (`SettleUnstarted` if it is not). Writes nothing unless
        `Settled`."""
        settle = self.scripts.settle(self.keys(job_id), call_id, record_sha=record_sha, tool=tool, tool_sha=tool_sha,
                                     job_started=job_started, status=status, messages=messages, events=events,
                                     unstarted=None if job_started is None else self._unstarted(job_id))
        if isinstance(settle, Settled):
            self._after_committed(job_id, settle.commit)
        return settle

    def release_for_retry(self, job_id: str, call_id: str, *, token: str, event: Envelope | None = None) -> bool:
        """Running -> ready for the call's next attempt, if `token` holds it (True also for a replay of the same
        release whose reply was lost)."""
        return self.scripts.retry(self.keys(job_id), call_id, token=token, event=event, mark_ms=RELEASE_MARK_MS)

    def unclaim(self, job_id: str, call_id: str, *, token: str) -> bool:
        """Give back a call `token` claimed but must not run (its claiming task is not the call's own): ready
        again, its attempt uncounted, nothing published; False when `token` no longer holds it."""
        return self.scripts.unclaim(self.keys(job_id), call_id, token=token)

    def renew_leases(self, job_id: str, leases: dict[str, str], lease_ms: int) -> int:
        """Extend the leases (call id -> token) this process holds for one job; a lease that lapsed is made again
        while its call runs and no other attempt took it over (see renew.lua)."""
        return self.scripts.renew(self.keys(job_id), leases, lease_ms)

    def renew_all(self, held: Mapping[str, Mapping[str, str]], lease_ms: int) -> int:
        """`renew_leases` for every job of `held` (job id -> call id -> token) in one pipeline: one round trip
        however many jobs this process runs (on a Redis Cluster, whose pipelines carry no scripts, one per job).
        How many leases were renewed; a job's error is raised once the others were renewed."""
        jobs = list(held)
        if self.cluster:
            replies: list[Any] = []
            for job_id in jobs:
                try:
                    replies.append(self.scripts.renew(self.keys(job_id), held[job_id], lease_ms))
                except Exception as error:
                    replies.append(error)
        else:
            pipe = self.redis.pipeline(transaction=False)
            for job_id in jobs:
                self.scripts.queue_renew(pipe, self.keys(job_id), held[job_id], lease_ms)
            replies = pipe.execute(raise_on_error=False)
        renewed, failed = 0, None
        for job_id, reply in zip(jobs, replies, strict=True):
            try:
                renewed += self.scripts.renewed(reply, self.keys(job_id), held[job_id], lease_ms)
            except Exception as error:
                failed = failed or error
        if failed is not None:
            raise failed
        return renewed

    def hold_lease(self, job_id: str, call_id: str, *, token: str) -> None:
        """Keep a running call's lease, without renewals, until its job expires (a module call waiting on its
        child job)."""
        keys = self.keys(job_id)
        expire_at_ms = self.redis.hget(keys.job, "expire_at_ms")
        if expire_at_ms is None:
            raise not_found(job_id)
        self.redis.set(keys.lease(call_id), token, pxat=int(expire_at_ms))

    def decide(self, job_id: str, call_id: str, *, decision: str, record: CallRecord | None = None,
               event: Envelope | None = None, messages: Sequence[dict] = (),
               events: Sequence[Envelope] = ()) -> Decision:
        """A reviewer's decision on a call awaiting approval: `Decided` (approve, edit: its record after the
        decision), `RejectedCall` (reject: its failure, `messages` and `events`, committed in the same step),
        `DecisionConflict` (the call's status) or `DecisionMissing`."""
        decided = self.scripts.decide(self.keys(job_id), call_id, decision=decision, record=record, event=event,
                                      messages=messages, events=events)
        if isinstance(decided, RejectedCall):
            self._after_committed(job_id, decided.commit)
        return decided

    # ---------------------------------------------------------------------------------------------- reads

    def call_records(self, job_id: str, call_ids: Sequence[str] | None = None) -> dict[str, CallRecord]:
        """Call id -> record: of every call, or of `call_ids` only (those that exist)."""
        calls = self.keys(job_id).calls
        if call_ids is None:
            return {k: CallRecord.from_dict(json.loads(v)) for k, v in self.redis.hgetall(calls).items()}
        if not call_ids:
            return {}
        values = self.redis.hmget(calls, list(call_ids))
        return {k: CallRecord.from_dict(json.loads(v)) for k, v in zip(call_ids, values, strict=True) if v is not None}

    def call_statuses(self, job_id: str, call_ids: Sequence[str] | None = None) -> dict[str, CallStatus]:
        key = self.keys(job_id).status
        if call_ids is None:
            return {k: CallStatus(v) for k, v in self.redis.hgetall(key).items()}
        if not call_ids:
            return {}
        values = self.redis.hmget(key, list(call_ids))
        return {k: CallStatus(v) for k, v in zip(call_ids, values, strict=True) if v is not None}

    def dependents(self, job_id: str, call_id: str) -> list[str]:
        """The calls that wait on `call_id`."""
        value = self.redis.hget(self.keys(job_id).dependents, call_id)
        return json.loads(value) if value else []

    def call_table(self, job_id: str) -> CallTable:
        """Every call's record, status, attempts and dependents, read in one round trip (`engine/call_views.py`
        builds the HTTP API's `/calls` items from it and the job's events). Raises `JobNotFoundError`."""
        keys = self.keys(job_id)
        pipe = self.redis.pipeline(transaction=False)
        pipe.exists(keys.job)
        pipe.hgetall(keys.calls)
        pipe.hgetall(keys.status)
        pipe.hgetall(keys.attempts)
        pipe.hgetall(keys.dependents)
        exists, calls, statuses, attempts, dependents = pipe.execute()
        if not exists:
            raise not_found(job_id)
        return CallTable(records={k: CallRecord.from_dict(json.loads(v)) for k, v in calls.items()},
                         statuses={k: CallStatus(v) for k, v in statuses.items()},
                         attempts={k: int(v) for k, v in attempts.items()},
                         dependents={k: json.loads(v) for k, v in dependents.items()})
