"""Call steps of the memory store: claim.lua, commit.lua, settle.lua, retry.lua, renew.lua, decide.lua, a module
call's held lease, and events added outside a step."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from agentq.protocol.digests import dumps, now_iso, sha1
from agentq.protocol.envelopes import Envelope
from agentq.protocol.records import CallRecord
from agentq.protocol.status import CallStatus, JobStatus
from agentq.store.codecs import entry
from agentq.store.replies import (
    Claim,
    ClaimCanceled,
    Claimed,
    ClaimFinished,
    ClaimLeased,
    ClaimMissing,
    ClaimNotReady,
    ClaimUnstarted,
    Commit,
    CommitDuplicate,
    CommitSuperseded,
    Decided,
    Decision,
    DecisionConflict,
    DecisionMissing,
    EndAhead,
    Settle,
    Settled,
    SettleOther,
    SettleStaleTool,
    SettleUnstarted,
)
from tests.runtime.memory_store.core import (
    ACTIVE,
    FINAL,
    UNSTARTED,
    JobState,
    MemoryCore,
    committed_reply,
    marked,
    not_found,
    release_dependents,
)

RELEASE_MARK_MS = 60_000  # how long a released call's lease keeps the releasing token (retry.lua)
_RUNNING, _READY = CallStatus.RUNNING.value, CallStatus.READY.value


class CallSteps(MemoryCore):
    def claim(self, job_id: str, call_id: str, *, token: str, lease_ms: int, log_offset: int = -1,
              job_started: Envelope | None = None, record: CallRecord | None = None, record_sha: str = "",
              tool_sha: str = "", start_events: Sequence[Envelope] = (), expect_started: bool = False,
              last_call: bool = False) -> Claim:
        """claim.lua (a memory store never restarts: no restart grace; it never sends `Claimed.last`, so its
        commits never finalize: the job-progress step does)."""
        with self._changed:
            state = self._get(job_id)
            status = state.status.get(call_id, "") if state is not None else ""
            refused = self._refused(state, call_id, status, token, unstarted=expect_started and job_started is None)
            if refused is not None or state is None:
                return refused or ClaimMissing()
            replay = status == _RUNNING and self._holder(state, call_id) == token
            attempt, lost = self._take(state, call_id, status, token, lease_ms, replay=replay)
            self._start(state, job_id, job_started)
            stored, tool = state.calls[call_id], state.tools.get(json.loads(state.calls[call_id])["tool"], "")
            record_current = _is_current(stored, record_sha if record is not None else "")
            tool_current = _is_current(tool, tool_sha)
            announced = attempt == 1 and record_current and tool_current and len(start_events) > 0
            self._announce(state, job_id, start_events if announced and not replay else ())
            return _claimed(state, stored="" if record_current else stored, tool="" if tool_current else tool,
                            carried=record, attempt=attempt, lost=lost, announced=announced, log_offset=log_offset)

    def _announce(self, state: JobState, job_id: str, events: Sequence[Envelope]) -> None:
        for envelope in events:
            self._xadd(state, entry(envelope, job_id))

    def _start(self, state: JobState, job_id: str, job_started: Envelope | None) -> None:
        """A claim's start of its job: queued -> running, and the job's first claim records (and publishes) its
        start, also when the job is awaiting approval since its submission (HSETNX started_at)."""
        if state.job.get("status") == JobStatus.QUEUED.value:
            state.job["status"] = JobStatus.RUNNING.value
        if "started_at" not in state.job:
            state.job["started_at"] = now_iso()
            if job_started is not None:
                self._xadd(state, entry(job_started, job_id))

    def _holder(self, state: JobState, name: str) -> str | None:
        lease = self._lease(state, name)
        return lease[0] if lease is not None else None

    def _refused(self, state: JobState | None, call_id: str, status: str, token: str, *,
                 unstarted: bool) -> Claim | None:
        """claim.lua's refusals, in its order: no such call, a canceled job, a finished call, an unstarted job the
        caller took for started, a lease another attempt holds, a call not ready."""
        if state is None or not status:
            return ClaimMissing()
        if state.job.get("status") == JobStatus.CANCELED.value:
            if status == _RUNNING and (left := self._pttl_ms(state, call_id)) > 0:
                return ClaimLeased(lease_left_ms=left)
            if status == _RUNNING or status in UNSTARTED:
                state.status[call_id] = CallStatus.CANCELED.value
            return ClaimCanceled()
        if status in FINAL:
            return ClaimFinished(status=CallStatus(status))
        if unstarted and "started_at" not in state.job:
            return ClaimUnstarted()
        if status == _RUNNING:
            if self._holder(state, call_id) != token and (left := self._pttl_ms(state, call_id)) > 0:
                return ClaimLeased(lease_left_ms=left)
            return None
        return None if status == _READY else ClaimNotReady(status=CallStatus(status))

    def _take(self, state: JobState, call_id: str, status: str, token: str, lease_ms: int, *,
              replay: bool) -> tuple[int, int]:
        """The attempt's count and lease: (attempt, lost attempts). A takeover of a running call counts a lost one."""
        if replay:
            self._set_lease(state, call_id, token, lease_ms)
            return state.attempts[call_id], state.lost.get(call_id, 0)
        attempt = state.attempts[call_id] = state.attempts.get(call_id, 0) + 1
        if status == _RUNNING:
            state.lost[call_id] = state.lost.get(call_id, 0) + 1
        state.status[call_id] = _RUNNING
        self._set_lease(state, call_id, token, lease_ms)
        return attempt, state.lost.get(call_id, 0)

    def add_events(self, job_id: str, envelopes: Sequence[Envelope]) -> None:
        if not envelopes:
            return
        with self._changed:
            state = self._get_or_new(job_id)  # XADD creates the stream
            for envelope in envelopes:
                self._xadd(state, entry(envelope, job_id))

    def commit(self, job_id: str, call_id: str, *, token: str, status: CallStatus, messages: Sequence[dict] = (),
               events: Sequence[Envelope] = (), awaited: bool | None = None, ahead: EndAhead | None = None) -> Commit:
        """commit.lua (a caller's `awaited` must be the stored record's: checked here)."""
        with self._changed:
            state = self._get(job_id)
            if state is None or state.status.get(call_id) != _RUNNING:
                return CommitDuplicate()
            holder = self._holder(state, call_id)
            if holder is not None and holder != token:
                return CommitSuperseded()
            job_status = state.job.get("status", "")
            late = job_status == JobStatus.CANCELED.value  # marked as arriving after the cancel
            state.log.extend(marked(dumps(m), "_afterCancel", True) if late else dumps(m) for m in messages)
            state.status[call_id] = status.value
            state.leases.pop(call_id, None)
            for envelope in events:
                packed = entry(envelope, job_id)
                self._xadd(state, marked(packed, "after_cancel", True) if late else packed)
            released, job_status = release_dependents(state, call_id, job_status,
                                                      lambda held: self._xadd(state, held))
            record = json.loads(state.calls[call_id])
            assert awaited is None or awaited == record["awaited"], "the caller's record is not the stored one"
            return committed_reply(state, record, job_status, released)

    def settle(self, job_id: str, call_id: str, *, record_sha: str, tool: str, tool_sha: str,
               job_started: Envelope | None, status: CallStatus, messages: Sequence[dict] = (),
               events: Sequence[Envelope] = ()) -> Settle:
        """settle.lua."""
        with self._changed:
            state = self._get(job_id)
            refused = self._unsettled(state, call_id, record_sha=record_sha, tool=tool, tool_sha=tool_sha,
                                      expect_started=job_started is None)
            if refused is not None or state is None:
                return refused or SettleOther()
            job_status = state.job["status"]
            state.attempts[call_id] = 1
            if job_status == JobStatus.QUEUED.value:
                job_status = state.job["status"] = JobStatus.RUNNING.value
            if "started_at" not in state.job:
                state.job["started_at"] = now_iso()
                if job_started is not None:
                    self._xadd(state, entry(job_started, job_id))
            state.log.extend(dumps(m) for m in messages)
            state.status[call_id] = status.value
            for envelope in events:
                self._xadd(state, entry(envelope, job_id))
            released, job_status = release_dependents(state, call_id, job_status,
                                                      lambda held: self._xadd(state, held))
            return Settled(commit=committed_reply(state, json.loads(state.calls[call_id]), job_status, released))

    @staticmethod
    def _unsettled(state: JobState | None, call_id: str, *, record_sha: str, tool: str, tool_sha: str,
                   expect_started: bool) -> Settle | None:
        """settle.lua's refusals, which write nothing (None: it may settle)."""
        if state is None or state.status.get(call_id) != _READY or state.job.get("status") not in ACTIVE:
            return SettleOther()
        if call_id in state.attempts or sha1(state.calls[call_id]) != record_sha:
            return SettleOther()  # an attempt ran before, or not the stored record
        stored_tool = state.tools.get(tool)
        if stored_tool is None:
            return SettleOther()
        if sha1(stored_tool) != tool_sha:
            return SettleStaleTool(tool=json.loads(stored_tool), tool_sha=sha1(stored_tool))
        if expect_started and "started_at" not in state.job:
            return SettleUnstarted()
        return None

    def unclaim(self, job_id: str, call_id: str, *, token: str) -> bool:
        """unclaim.lua."""
        with self._changed:
            state = self._get(job_id)
            if state is None or self._holder(state, call_id) != token or state.status.get(call_id) != _RUNNING:
                return False
            state.status[call_id] = _READY
            state.leases.pop(call_id, None)
            state.attempts[call_id] = state.attempts.get(call_id, 0) - 1
            return True

    def release_for_retry(self, job_id: str, call_id: str, *, token: str, event: Envelope | None = None) -> bool:
        """retry.lua."""
        with self._changed:
            state = self._get(job_id)
            if state is None:
                return False
            holder, status = self._holder(state, call_id), state.status.get(call_id)
            if status == _READY and holder == token:
                return True  # a replay of this release
            if status != _RUNNING or (holder is not None and holder != token):
                return False
            state.status[call_id] = _READY
            self._set_lease(state, call_id, token, RELEASE_MARK_MS)  # the releasing token stays a while
            if event is not None:
                self._xadd(state, entry(event, job_id))
            return True

    def renew_leases(self, job_id: str, leases: dict[str, str], lease_ms: int) -> int:
        """renew.lua."""
        with self._changed:
            state = self._get(job_id)
            if state is None:
                return 0
            renewed = 0
            for name, token in leases.items():
                holder = self._holder(state, name)
                if holder == token or (holder is None and state.status.get(name) == _RUNNING):
                    self._set_lease(state, name, token, lease_ms)
                    renewed += 1
            return renewed

    def renew_all(self, held: Mapping[str, Mapping[str, str]], lease_ms: int) -> int:
        """renew.lua for each job (the Redis store sends them in one pipeline)."""
        return sum(self.renew_leases(job_id, dict(leases), lease_ms) for job_id, leases in held.items())

    def hold_lease(self, job_id: str, call_id: str, *, token: str) -> None:
        """A running call's lease until its job expires (a module call waiting on its child job)."""
        with self._changed:
            state = self._get(job_id)
            expire_at_ms = state.job.get("expire_at_ms") if state is not None else None
            if state is None or expire_at_ms is None:
                raise not_found(job_id)
            state.leases[call_id] = (token, int(expire_at_ms) / 1000)

    def decide(self, job_id: str, call_id: str, *, decision: str, record: CallRecord | None = None,
               token: str = "", lease_ms: int = 0, event: Envelope | None = None) -> Decision:
        """decide.lua."""
        with self._changed:
            state = self._get(job_id)
            status = state.status.get(call_id) if state is not None else None
            if state is None or status is None:
                return DecisionMissing()
            job_status = state.job.get("status")
            if status != CallStatus.AWAITING_APPROVAL.value or job_status not in ACTIVE:
                return DecisionConflict(status=CallStatus(status))
            if decision == "edit":
                state.calls[call_id] = dumps(record.to_dict()) if record is not None else ""
            if decision == "reject":
                state.status[call_id] = _RUNNING
                self._set_lease(state, call_id, token, lease_ms)
            else:
                state.status[call_id] = _READY
            state.approval.pop(call_id, None)
            if state.incr("awaiting", -1) <= 0 and job_status == JobStatus.AWAITING_APPROVAL.value:
                state.job["status"] = JobStatus.RUNNING.value
            if event is not None:
                self._xadd(state, entry(event, job_id))
            return Decided(record=CallRecord.from_dict(json.loads(state.calls[call_id])))


def _is_current(stored: str, sha: str) -> bool:
    """Whether the caller's copy (its SHA-1 `sha`, '' for none) is the stored value."""
    return sha != "" and stored != "" and sha1(stored) == sha


def _claimed(state: JobState, *, stored: str, tool: str, carried: CallRecord | None, attempt: int, lost: int,
             announced: bool, log_offset: int) -> Claimed:
    """claim.lua's reply: an empty `stored` record or `tool` means the caller's copy is the stored one."""
    if stored:
        record = CallRecord.from_dict(json.loads(stored))
    else:
        assert carried is not None, "claim.lua leaves out only a record the caller carried"
        record = carried
    return Claimed(
        record=record,
        record_replaced=bool(stored) and carried is not None,
        tool=json.loads(tool) if tool else None, tool_sha=sha1(tool) if tool else "",
        attempt=attempt, log_length=len(state.log) if log_offset >= 0 else None, announced=announced, lost=lost,
        log_tail=[json.loads(m) for m in state.log[log_offset:]] if log_offset >= 0 else [])
