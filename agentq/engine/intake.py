"""Call intake: taking a call's task in, by claiming the call or by settling a run made before the claim.

A claim gives this attempt the call (a lease) and brings this process's copy of the job's log up to date when
the call reads it. A task that carries the call's record and needs nothing of the log has its first attempt's
start events rendered here and published by the claim itself: one round trip instead of two. The settle step
claims and commits the first attempt of an idempotent activity's call that already ran (see settle.lua).

Per process, intake remembers the jobs it found started (so `job.started` is rendered about once per process
and job), the jobs' logs and the jobs' composed tools (see `caches.py`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from agentq.engine.caches import JobTools, LogCache, StaleCache, ToolValidators
from agentq.engine.render import job_started, start_events
from agentq.engine.signing import TaskSigner
from agentq.protocol.activities import ActivityRegistry
from agentq.protocol.cache import LRU
from agentq.protocol.envelopes import Envelope, JobStarted
from agentq.protocol.records import CallMode, CallRecord
from agentq.protocol.status import CallStatus
from agentq.protocol.views import LogIndex
from agentq.store.base import Claim
from agentq.store.contracts import CallStore, JobReader
from agentq.store.replies import Claimed, ClaimUnstarted, Settled, SettleStaleTool, SettleUnstarted


class IntakeStore(CallStore, JobReader, Protocol):
    """What call intake claims, settles and reads."""

log = logging.getLogger("agentq.executor")


@dataclass(frozen=True)
class Intake:
    """What a claim gave: the claim's reply, the job's log (when the call reads it) and whether the claim
    published the attempt's start events."""

    claim: Claim
    index: LogIndex | None = None
    announced: bool = False


class CallIntake:
    """Claims and settles calls for one process (any number of threads)."""

    def __init__(self, store: IntakeStore, activities: ActivityRegistry, *, lease_ms: int, signer: TaskSigner | None,
                 source: str = "agentq"):
        self.store = store
        self.activities = activities
        self.lease_ms = lease_ms
        self.signer = signer  # checks the signature of tasks whose record may run before its claim
        self.source = source
        self.logs = LogCache()
        self.tools = JobTools()
        self.validators = ToolValidators()  # for the calls validated once their references are resolved
        self._started_jobs: LRU[str, bool] = LRU(4096)  # jobs a claim of this process found started

    # the claim and each case it meets: a cached tool or not, the log to catch up, a job id used again
    def claim(self, job_id: str, call_id: str, token: str, record: CallRecord | None, record_sha: str) -> Intake:
        """Claim the call; when it needs the log, bring this process's copy of the log up to date.

        The claim publishes the start events rendered here only when the task's record and the tool are the
        stored ones, so they are not validated again: every stored record was validated against its job's tool
        when it was written (submission, an agent's solution, a reviewer's edit), and a record that reads
        nothing has no reference left to resolve. Any other record is validated after the claim."""
        cached = self.tool_copy(job_id, record.tool) if record is not None else None
        # a copy a claim found current for this plan job (its `created_at`): not read again (claim.lua)
        tools_at = self.tools.stamp(job_id, record.tool, cached[1]) if record is not None and cached else ""
        needs_log = record is None or record.needs_log
        ahead = (start_events(job_id, call_id, record, cached[0], record.call, 1, source=self.source)
                 if record and cached and not needs_log else [])
        offset = self.logs.offset(job_id) if needs_log else -1
        # an activity's awaited call that may be its plan job's last: its commit may end the job (`end_ahead`)
        last_call = record is not None and record.awaited and record.mode is CallMode.EXPLICIT

        def claim_once() -> Claim:
            started = self.job_started(job_id, record)
            return self.store.claim(job_id, call_id, token=token, lease_ms=self.lease_ms, log_offset=offset,
                                    job_started=started, expect_started=started is None, record=record,
                                    record_sha=record_sha, tool_sha=cached[1] if cached else "",
                                    start_events=ahead, last_call=last_call, tools_at=tools_at)

        claim = claim_once()
        if isinstance(claim, ClaimUnstarted):  # a job id used again: this process's memory was stale
            self._started_jobs.pop(job_id)
            claim = claim_once()
        if not isinstance(claim, Claimed):
            return Intake(claim)
        self._started_jobs.put(job_id, True)
        if claim.record_replaced:
            log.warning("call %s of job %s: the task's record differs from the stored one; running the stored "
                        "call", call_id, job_id)
        return self._with_log(job_id, self._with_tool(job_id, claim, cached), offset, needs_log)

    def _with_tool(self, job_id: str, claim: Claimed, cached: tuple[dict, str] | None) -> Claimed:
        """The claim with this process's copy of its tool, kept with the stamp the claim found current (none when
        the task's record was replaced): the tool the store sent (this process had no current copy), else the
        cached one."""
        stamp = "" if claim.record_replaced else claim.tools_at
        if claim.tool is not None:
            return replace(claim, tool=self.tools.keep(job_id, claim.record.tool, claim.tool, claim.tool_sha, stamp))
        if cached is not None:
            return replace(claim, tool=self.tools.keep(job_id, claim.record.tool, cached[0], cached[1], stamp),
                           tool_sha=cached[1])
        return claim

    def _with_log(self, job_id: str, claim: Claimed, offset: int, needs_log: bool) -> Intake:
        if not claim.record.needs_log:
            return Intake(claim, None, claim.announced)  # a later attempt publishes its own start events
        if not needs_log:  # the stored record reads the log although the task's did not: read all of it
            return Intake(claim, LogIndex(self.store.read_log(job_id)))
        try:
            return Intake(claim, self.logs.extend(job_id, offset, claim.log_tail))
        except StaleCache:  # another thread evicted or rebuilt the job's index meanwhile
            self.logs.forget(job_id)
            return Intake(claim, self.logs.extend(job_id, 0, self.store.read_log(job_id)))

    def tool_copy(self, job_id: str, name: str) -> tuple[dict, str] | None:
        """(schema, SHA-1) of this process's copy of a job's tool: the job's own, else the last one received of
        that name (the store confirms it is the job's before anything rendered from it is written)."""
        return self.tools.get(job_id, name) or self.tools.latest(name)

    def job_started(self, job_id: str, record: CallRecord | None) -> JobStarted | None:
        """The `job.started` event a claim publishes if it is the job's first; None once a claim of this process
        found the job started (it stays started)."""
        if self._started_jobs.get(job_id):
            return None
        return job_started(job_id, locale=record.locale if record is not None else "en", source=self.source)

    # ------------------------------------------------------------------- running before the claim

    def may_run_ahead(self, job_id: str, record: CallRecord, record_sha: str, signature: str | None) -> bool:
        """Whether a task's record may run before its claim: an explicit call of an activity registered
        idempotent, reading nothing from the log, not a module's child's call, signed by agentq."""
        if signature is None or self.signer is None:
            return False
        if record.mode is not CallMode.EXPLICIT or record.needs_log or record.relay:
            return False
        spec = self.activities.get(record.activity) if record.activity in self.activities else None
        if spec is None or not spec.idempotent:
            return False
        if not self.signer.verify(job_id, record.id, record_sha, signature):
            log.warning("call %s of job %s: its task's signature does not hold; claiming it first", record.id,
                        job_id)
            return False
        return True

    def settle(self, job_id: str, call_id: str, record: CallRecord, record_sha: str, copy: tuple[dict, str], *,
               messages: list[dict], events: Callable[[dict], list[Envelope]]) -> Settled | None:
        """Claim and commit the first attempt of a call that ran before its claim, in one store step; None when
        that step could not record it (the usual path claims the call). `events(tool)` renders the attempt's
        events against a tool schema: the store may answer that this process's copy is stale."""
        tool, tool_sha = copy
        settle = None
        for _ in range(3):
            rendered = events(tool)
            settle = self.store.settle(job_id, call_id, record_sha=record_sha, tool=record.tool, tool_sha=tool_sha,
                                       job_started=self.job_started(job_id, record), status=CallStatus.DONE,
                                       messages=messages, events=rendered)
            match settle:
                case SettleStaleTool(tool=stored, tool_sha=stored_sha):
                    tool, tool_sha = self.tools.keep(job_id, record.tool, stored, stored_sha), stored_sha
                case SettleUnstarted():
                    self._started_jobs.pop(job_id)
                case _:
                    break
        if not isinstance(settle, Settled):
            return None
        self._started_jobs.put(job_id, True)
        self.tools.keep(job_id, record.tool, tool, tool_sha)
        return settle
