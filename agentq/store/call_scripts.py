"""The Lua steps of one call (claim, commit, settle, retry, renew, decide) and the reading of their replies
(`CallScripts`, a base of `store/scripts.py`'s `Scripts`)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from agentq.protocol.digests import dumps, now_iso, sha1
from agentq.protocol.envelopes import Envelope
from agentq.protocol.records import CallRecord, JobInfo, JobKind
from agentq.protocol.status import CallStatus, JobStatus
from agentq.store.codecs import decode_job, entry
from agentq.store.keys import JobKeys
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
    Committed,
    Decided,
    Decision,
    DecisionConflict,
    DecisionMissing,
    EndAhead,
    FinishInputs,
    LastCall,
    RejectedCall,
    Settle,
    Settled,
    SettleOther,
    SettleStaleTool,
    SettleUnstarted,
)
from agentq.store.script_runner import ScriptRunner
from agentq.store.step_args import (
    ClaimArgs,
    CommitArgs,
    DecideArgs,
    EndCount,
    EndingArgs,
    FinalizeArgs,
    SettleArgs,
    StartCheck,
)


def _job_started_arg(job_started: Envelope | None, job_id: str, *, expect_started: bool) -> str:
    """ARGV's job-started envelope: the packed event, '!' when the caller takes the job for started, else ''."""
    if job_started is not None:
        return entry(job_started, job_id)
    return "!" if expect_started else ""


def _ending(ahead: EndAhead | None, job_id: str, count: EndCount | None) -> EndingArgs | None:
    """commit.lua's `ending`: the job's end its caller built (with the metrics' `count` of it), or None."""
    if ahead is None:
        return None
    return EndingArgs(digest=ahead.digest, log_length=ahead.log_length,
                      end=FinalizeArgs.of(ahead.record, entry(ahead.event, job_id), count))


def _renew_layout(keys: JobKeys, leases: Mapping[str, str], lease_ms: int) -> tuple[list[str], list[Any]]:
    """renew.lua's KEYS (the status hash, one lease key per call) and ARGV (lease_ms, the tokens, the call ids)."""
    ids = list(leases)
    return [keys.status, *(keys.lease(i) for i in ids)], [lease_ms, *(leases[i] for i in ids), *ids]


class CallScripts(ScriptRunner):
    """The steps of one call's attempts and approval."""

    # one case per reply of claim.lua
    def claim(self, keys: JobKeys, call_id: str, *, token: str, lease_ms: int, log_offset: int,
              job_started: Envelope | None, expect_started: bool, record: CallRecord | None, record_sha: str,
              tool_sha: str, start_events: Sequence[Envelope], last_call: bool = False, tools_at: str = "",
              unstarted: StartCheck | None = None) -> Claim:
        """claim.lua: claim a call for one attempt (`last_call`: send `Claimed.last` when it applies; `unstarted`:
        the job's `@unstarted` timer, dropped if this claim starts the job)."""
        job_id = keys.job_id
        reply = self._run(
            "claim",
            [keys.job, keys.calls, keys.status, keys.attempts, keys.tools, keys.events, keys.log,
             keys.lease(call_id), keys.lost, *(unstarted.keys if unstarted else ())],
            [ClaimArgs(call_id=call_id, token=token, lease_ms=lease_ms, now=now_iso(),
                       job_started=_job_started_arg(job_started, job_id, expect_started=expect_started),
                       log_offset=log_offset, record_sha=record_sha if record is not None else "", tool_sha=tool_sha,
                       tool=record.tool if record is not None else "", last_call=last_call,
                       tools_at=tools_at, unstarted=unstarted.member if unstarted else None).encode(),
             *(entry(e, job_id) for e in start_events)])
        match reply[0]:
            case "claimed":
                return _claimed(reply, record)
            case "leased":
                return ClaimLeased(lease_left_ms=int(reply[1]))
            case "finished":
                return ClaimFinished(status=CallStatus(reply[1]))
            case "not_ready":
                return ClaimNotReady(status=CallStatus(reply[1]))
            case "canceled":
                return ClaimCanceled()
            case "unstarted":
                return ClaimUnstarted()
            case "missing":
                return ClaimMissing()
        raise ValueError(f"claim.lua replied {reply[0]!r}")

    def commit(self, keys: JobKeys, call_id: str, *, token: str, status: CallStatus, messages: Sequence[dict],
               events: Sequence[Envelope], awaited: bool | None = None, ahead: EndAhead | None = None,
               lease_ms: int = 0, count: EndCount | None = None) -> Commit:
        """commit.lua: write a running call's outcome exactly once (`awaited`: None reads it from the stored
        record; `ahead`: the job's end, written if this commit ends the job as its claim foresaw, with the
        metrics' `count` of it when given)."""
        count = count if ahead is not None else None
        reply = self._run(
            "commit",
            [keys.job, keys.log, keys.calls, keys.status, keys.waiting, keys.events, keys.lease(call_id),
             keys.dependents, keys.approval, keys.done, *(count.keys if count else ())],
            [CommitArgs(call_id=call_id, token=token, status=status.value, awaited=awaited,
                        ending=_ending(ahead, keys.job_id, count), messages=len(messages),
                        lease_ms=lease_ms).encode(),
             *(dumps(m) for m in messages), *(entry(e, keys.job_id) for e in events)])
        match reply[0]:
            case "committed":
                return _committed(reply)
            case "duplicate":
                return CommitDuplicate()
            case "superseded":
                return CommitSuperseded()
        raise ValueError(f"commit.lua replied {reply[0]!r}")

    def settle(self, keys: JobKeys, call_id: str, *, record_sha: str, tool: str, tool_sha: str,
               job_started: Envelope | None, status: CallStatus, messages: Sequence[dict],
               events: Sequence[Envelope], unstarted: StartCheck | None = None) -> Settle:
        """settle.lua: claim and commit a ready call's first attempt whose handler already ran (`unstarted`: as
        for `claim`)."""
        job_id = keys.job_id
        reply = self._run(
            "settle",
            [keys.job, keys.calls, keys.status, keys.attempts, keys.tools, keys.events, keys.log, keys.waiting,
             keys.dependents, keys.approval, *(unstarted.keys if unstarted else ())],
            [SettleArgs(call_id=call_id, record_sha=record_sha, tool=tool, tool_sha=tool_sha, now=now_iso(),
                        job_started=_job_started_arg(job_started, job_id, expect_started=True), status=status.value,
                        messages=len(messages), unstarted=unstarted.member if unstarted else None).encode(),
             *(dumps(m) for m in messages), *(entry(e, job_id) for e in events)])
        match reply[0]:
            case "committed":
                return Settled(commit=_committed(reply))
            case "stale_tool":
                return SettleStaleTool(tool=json.loads(reply[1]), tool_sha=sha1(reply[1]))
            case "unstarted":
                return SettleUnstarted()
            case "other":
                return SettleOther()
        raise ValueError(f"settle.lua replied {reply[0]!r}")

    def retry(self, keys: JobKeys, call_id: str, *, token: str, event: Envelope | None, mark_ms: int) -> bool:
        """retry.lua: running -> ready for the call's next attempt (True also for a replay of the release)."""
        return bool(self._run("retry", [keys.status, keys.lease(call_id), keys.events],
                              [call_id, token, entry(event, keys.job_id) if event else "", mark_ms]))

    def unclaim(self, keys: JobKeys, call_id: str, *, token: str) -> bool:
        """unclaim.lua: give back a call `token` claimed but must not run (ready again, its attempt uncounted)."""
        return bool(self._run("unclaim", [keys.status, keys.lease(call_id), keys.attempts], [call_id, token]))

    def renew(self, keys: JobKeys, leases: Mapping[str, str], lease_ms: int) -> int:
        """renew.lua: extend the leases (call id -> token); how many were renewed."""
        return int(self._run("renew", *_renew_layout(keys, leases, lease_ms)))

    def queue_renew(self, pipe: Any, keys: JobKeys, leases: Mapping[str, str], lease_ms: int) -> None:
        """Add renew.lua to a pipeline by its SHA (`renewed` reads its reply there)."""
        script_keys, args = _renew_layout(keys, leases, lease_ms)
        pipe.evalsha(self._scripts["renew"].sha, len(script_keys), *script_keys, *args)

    def renewed(self, reply: Any, keys: JobKeys, leases: Mapping[str, str], lease_ms: int) -> int:
        """The reply of a queued renew.lua; a Redis that lost its scripts runs it again, loading it."""
        from redis.exceptions import NoScriptError

        if isinstance(reply, NoScriptError):
            return self.renew(keys, leases, lease_ms)
        if isinstance(reply, Exception):
            raise reply
        return int(reply)

    def decide(self, keys: JobKeys, call_id: str, *, decision: str, record: CallRecord | None,
               event: Envelope | None, messages: Sequence[dict] = (), events: Sequence[Envelope] = ()) -> Decision:
        """decide.lua: a reviewer's decision on a call awaiting approval (a rejection commits the call's failure,
        `messages` and `events`, in the same step)."""
        reply = self._run(
            "decide", [keys.job, keys.calls, keys.status, keys.approval, keys.events, keys.log, keys.waiting,
                       keys.dependents, keys.done],
            [DecideArgs(call_id=call_id, decision=decision, record=dumps(record.to_dict()) if record else "",
                        event=entry(event, keys.job_id) if event else "", messages=len(messages)).encode(),
             *(dumps(m) for m in messages), *(entry(e, keys.job_id) for e in events)])
        match reply[0]:
            case "decided":
                return Decided(record=CallRecord.from_dict(json.loads(reply[1])))
            case "committed":
                return RejectedCall(commit=_committed(reply))
            case "conflict":
                return DecisionConflict(status=CallStatus(reply[1]))
            case "missing":
                return DecisionMissing()
        raise ValueError(f"decide.lua replied {reply[0]!r}")


def _claimed(reply: list, carried: CallRecord | None) -> Claimed:
    """claim.lua's `{'claimed', stored record or '', tool schema or '', attempt, log length or '', announced, lost,
    plan job's created_at or '', t, t tail messages, [digest, what finalizing reads]}`: an empty record or tool means
    the caller's copy is the stored one."""
    stored, tool = reply[1], reply[2]
    tail_end = 9 + int(reply[8])
    if stored:
        record = CallRecord.from_dict(json.loads(stored))
    else:
        assert carried is not None, "claim.lua leaves out only a record the caller carried"
        record = carried
    return Claimed(
        record=record, record_replaced=bool(stored) and carried is not None,
        tool=json.loads(tool) if tool else None, tool_sha=sha1(tool) if tool else "",
        attempt=int(reply[3]), log_length=int(reply[4]) if reply[4] else None, announced=reply[5] == "1",
        lost=int(reply[6]), tools_at=reply[7],
        log_tail=[json.loads(m) for m in reply[9:tail_end]],
        last=LastCall(_finish_inputs(reply[tail_end + 1:]), reply[tail_end]) if len(reply) > tail_end else None)


def _committed(reply: list) -> Committed:
    """`committed_reply` of _committed.lua (commit.lua, settle.lua): `{'committed', open, job status, ticking,
    kind, n, n released records, ['finalized' | what finalizing a plan job reads: m, m job fields and values, k,
    k log messages, call statuses' fields and values]}`."""
    released_end = 6 + int(reply[5])
    return Committed(
        open_calls=int(reply[1]), job_status=JobStatus(reply[2]), ticking=reply[3] == "1", kind=JobKind(reply[4]),
        released=[CallRecord.from_dict(json.loads(r)) for r in reply[6:released_end]],
        finish_inputs=_finish_inputs(reply[released_end:]) if len(reply) > released_end + 1 else None,
        finalized=reply[released_end:] == ["finalized"])


def _finish_inputs(rest: list) -> FinishInputs:
    """The tail of a committed reply: `m, m job fields and values, k, k log messages, statuses' fields and
    values`."""
    job_end = 1 + int(rest[0])
    log_end = job_end + 1 + int(rest[job_end])
    return finish_inputs_of(decode_job(pairs(rest[1:job_end])), rest[job_end + 1:log_end], rest[log_end:])


def finish_inputs_of(info: JobInfo, log: list[str], statuses: list[str]) -> FinishInputs:
    """What finalizing a job reads, as a Lua step sends it: the job, its stored log messages and its call
    statuses' fields and values."""
    return FinishInputs(info, [json.loads(m) for m in log], {k: CallStatus(v) for k, v in pairs(statuses).items()})


def pairs(flat: list[str]) -> dict[str, str]:
    """A hash as a Lua step's HGETALL gives it (field, value, field, value...)."""
    return dict(zip(flat[::2], flat[1::2], strict=True))
