"""The store's Lua steps: loading them, and one typed method per step.

Each step in `lua/` opens with its key layout (KEYS) and its arguments (ARGV). `Scripts` is the one place that
lays out a step's KEYS and encodes its ARGV, and the one place that reads a step's flat reply array: every
method returns a frozen record of `store/replies.py`, so no offset arithmetic happens anywhere else.

Loading: each script gets the status preamble (`agentq.protocol.status.lua_preamble`) in front, and each line
`--#include <fragment>` is replaced by `lua/<fragment>.lua` (functions several scripts share).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any

from agentq.protocol.budgets import Budget, BudgetAsk, Spend
from agentq.protocol.envelopes import Envelope
from agentq.protocol.plans import PlannedCall
from agentq.protocol.records import CallRecord, JobKind, JobRecord
from agentq.protocol.status import CallStatus, JobStatus, lua_preamble
from agentq.store.codecs import decode_job, dumps, entry, now_iso, sha1
from agentq.store.keys import JobKeys
from agentq.store.replies import (
    AlreadyEnded,
    BudgetGranted,
    BudgetRefused,
    BudgetReply,
    CallsAdded,
    Canceled,
    CancelMissing,
    CancelReply,
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
    FinishInputs,
    JobEnded,
    Settle,
    Settled,
    SettleOther,
    SettleStaleTool,
    SettleUnstarted,
    TickBusy,
    TickClaim,
    TickClaimed,
    TickEnded,
    TickFinished,
    TickLeased,
    TickMissing,
    TickStale,
    TickSuperseded,
)

SCRIPT_NAMES = ("submit", "claim", "commit", "retry", "finalize", "cancel", "renew", "tick_begin", "add_calls",
                "tick_end", "decide", "unlease", "relay", "settle", "node_swap", "budget", "llm_take", "llm_settle",
                "tenant_admit")
_INCLUDE = "--#include "


def lua_source(name: str) -> str:
    """The runnable source of the step `lua/<name>.lua`: the status preamble, then the script with its
    `--#include` lines expanded."""
    lines = [_lua_file(line.removeprefix(_INCLUDE).strip()) if line.startswith(_INCLUDE) else line
             for line in _lua_file(name).splitlines(keepends=True)]
    return lua_preamble() + "".join(lines)


def _lua_file(name: str) -> str:
    return resources.files("agentq.store").joinpath("lua", f"{name}.lua").read_text(encoding="utf-8")


def _job_started_arg(job_started: Envelope | None, job_id: str, *, expect_started: bool) -> str:
    """ARGV's job-started envelope: the packed event, '!' when the caller takes the job for started, else ''."""
    if job_started is not None:
        return entry(job_started, job_id)
    return "!" if expect_started else ""


def _renew_layout(keys: JobKeys, leases: Mapping[str, str], lease_ms: int) -> tuple[list[str], list[Any]]:
    """renew.lua's KEYS (the status hash, one lease key per call) and ARGV (lease_ms, the tokens, the call ids)."""
    ids = list(leases)
    return [keys.status, *(keys.lease(i) for i in ids)], [lease_ms, *(leases[i] for i in ids), *ids]


class Scripts:
    """The Lua steps registered on one Redis client (a script is loaded on first use, again after a flush)."""

    def __init__(self, redis: Any):
        self._redis = redis
        self._scripts = {name: redis.register_script(lua_source(name)) for name in SCRIPT_NAMES}

    @property
    def registered(self) -> dict[str, Any]:
        """Step name -> its registered redis-py `Script` (`sha`, `script`): what tells EVALSHA commands apart."""
        return dict(self._scripts)

    def _run(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """EVALSHA the step, as redis-py's `Script` does but without its layers: a Redis that lost its scripts (a
        restart, SCRIPT FLUSH) is sent the script, then the step again."""
        from redis.exceptions import NoScriptError

        script = self._scripts[name]
        try:
            return self._redis.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
        except NoScriptError:
            script.sha = self._redis.script_load(script.script)
            return self._redis.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)

    def run(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Run the step `name` for a companion that lays out its own steps (`limit_scripts.py`)."""
        return self._run(name, keys, args)

    # ----------------------------------------------------------------------------------- submission

    def submit(self, keys: JobKeys, payload: str, expire_at_ms: int) -> bool:
        """submit.lua: write a whole job (`payload`, its JSON) or nothing when the id is taken."""
        return bool(self._run("submit", keys.all, [payload, expire_at_ms]))

    def queue_submit(self, pipe: Any, keys: JobKeys, payload: str, expire_at_ms: int) -> None:
        """Add submit.lua to a pipeline by its SHA (`submitted` reads its reply there)."""
        job_keys = list(keys.all)
        pipe.evalsha(self._scripts["submit"].sha, len(job_keys), *job_keys, payload, expire_at_ms)

    def submitted(self, reply: Any, keys: JobKeys, payload: str, expire_at_ms: int) -> bool | Exception:
        """The reply of a queued submit.lua: whether it wrote the job, or the error it failed with. A Redis that
        lost its scripts (a restart, SCRIPT FLUSH) runs it again, loading it."""
        from redis.exceptions import NoScriptError

        if isinstance(reply, NoScriptError):
            return self.submit(keys, payload, expire_at_ms)
        return reply if isinstance(reply, Exception) else bool(reply)

    # ------------------------------------------------------------------------------------ call steps

    # one case per reply of claim.lua
    def claim(self, keys: JobKeys, call_id: str, *, token: str, lease_ms: int, log_offset: int,
              job_started: Envelope | None, expect_started: bool, record: CallRecord | None, record_sha: str,
              tool_sha: str, start_events: Sequence[Envelope]) -> Claim:
        """claim.lua: claim a call for one attempt."""
        job_id = keys.job_id
        reply = self._run(
            "claim",
            [keys.job, keys.calls, keys.status, keys.attempts, keys.tools, keys.events, keys.log,
             keys.lease(call_id), keys.lost],
            [call_id, token, lease_ms, now_iso(), _job_started_arg(job_started, job_id, expect_started=expect_started),
             log_offset, record_sha if record is not None else "", tool_sha,
             record.tool if record is not None else "", *(entry(e, job_id) for e in start_events)])
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
               events: Sequence[Envelope], awaited: bool | None = None) -> Commit:
        """commit.lua: write a running call's outcome exactly once (`awaited`: None reads it from the stored
        record)."""
        reply = self._run(
            "commit",
            [keys.job, keys.log, keys.calls, keys.status, keys.waiting, keys.events, keys.lease(call_id),
             keys.dependents, keys.approval],
            [call_id, token, status.value, "" if awaited is None else "1" if awaited else "0", len(messages),
             *(dumps(m) for m in messages),
             *(entry(e, keys.job_id) for e in events)])
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
               events: Sequence[Envelope]) -> Settle:
        """settle.lua: claim and commit a ready call's first attempt whose handler already ran."""
        job_id = keys.job_id
        reply = self._run(
            "settle",
            [keys.job, keys.calls, keys.status, keys.attempts, keys.tools, keys.events, keys.log, keys.waiting,
             keys.dependents, keys.approval],
            [call_id, record_sha, tool, tool_sha, now_iso(), _job_started_arg(job_started, job_id, expect_started=True),
             status.value, len(messages), *(dumps(m) for m in messages), *(entry(e, job_id) for e in events)])
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

    def decide(self, keys: JobKeys, call_id: str, *, decision: str, record: CallRecord | None, token: str,
               lease_ms: int, event: Envelope | None) -> Decision:
        """decide.lua: a reviewer's decision on a call awaiting approval."""
        reply = self._run(
            "decide", [keys.job, keys.calls, keys.status, keys.approval, keys.lease(call_id), keys.events],
            [call_id, decision, dumps(record.to_dict()) if record else "", token, lease_ms,
             entry(event, keys.job_id) if event else ""])
        match reply[0]:
            case "decided":
                return Decided(record=CallRecord.from_dict(json.loads(reply[1])))
            case "conflict":
                return DecisionConflict(status=CallStatus(reply[1]))
            case "missing":
                return DecisionMissing()
        raise ValueError(f"decide.lua replied {reply[0]!r}")

    # -------------------------------------------------------------------------------------- job steps

    def finalize(self, keys: JobKeys, *, record: JobRecord, event: Envelope) -> bool:
        """finalize.lua: give an active job its final status and record; False when it had ended already."""
        return bool(self._run("finalize", [keys.job, keys.events, keys.done],
                              [record.status.value, dumps(record.to_dict()), record.finished_at or now_iso(),
                               entry(event, keys.job_id)]))

    def cancel(self, keys: JobKeys, *, event: Envelope) -> CancelReply:
        """cancel.lua: cancel a job."""
        reply = self._run("cancel", [keys.job, keys.status, keys.events, keys.done],
                          [now_iso(), entry(event, keys.job_id)])
        match reply[0]:
            case "canceled":
                return Canceled(ready=list(reply[1:]))
            case "final":
                return AlreadyEnded(status=JobStatus(reply[1]))
            case "missing":
                return CancelMissing()
        raise ValueError(f"cancel.lua replied {reply[0]!r}")

    def relay(self, keys: JobKeys, *, cursor: str, to: str) -> bool:
        """relay.lua: move a child job's relay cursor from `cursor` to `to`, unless another relay moved it."""
        return bool(self._run("relay", [keys.job], [cursor, to]))

    # ------------------------------------------------------------------------------------- agent ticks

    def begin_tick(self, keys: JobKeys, *, exchanges: int, token: str, lease_ms: int,
                   job_started: Envelope | None) -> TickClaim:
        """tick_begin.lua: take the job's next model request."""
        reply = self._run("tick_begin", [keys.job, keys.tick_lease, keys.exchanges, keys.events],
                          [exchanges, token, lease_ms, now_iso(),
                           entry(job_started, keys.job_id) if job_started else ""])
        match reply[0]:
            case "claimed":
                return TickClaimed(attempt=int(reply[1]))
            case "leased":
                return TickLeased(lease_left_ms=int(reply[1]))
            case "finished":
                return TickFinished(status=JobStatus(reply[1]))
            case "busy":
                return TickBusy(open_calls=int(reply[1]))
            case "stale":
                return TickStale()
            case "missing":
                return TickMissing()
        raise ValueError(f"tick_begin.lua replied {reply[0]!r}")

    def add_calls(self, keys: JobKeys, *, token: str, records: Sequence[CallRecord],
                  plans: Sequence[PlannedCall]) -> CallsAdded | TickSuperseded | JobEnded:
        """add_calls.lua: write calls of a tick's solution, each once."""
        args: list[Any] = [token]
        for record, plan in zip(records, plans, strict=True):
            flags = ("a" if plan.approval else "") + ("w" if record.awaited else "")
            args += [record.id, dumps(record.to_dict()), dumps(plan.depends_on), flags or "-"]
        reply = self._run("add_calls", [keys.job, keys.calls, keys.status, keys.waiting, keys.dependents,
                                        keys.approval, keys.tick_lease], args)
        match reply[0]:
            case "ok":
                return CallsAdded(ready=[CallRecord.from_dict(json.loads(r)) for r in reply[1:]])
            case "superseded":
                return TickSuperseded()
            case "finished":
                return JobEnded()
        raise ValueError(f"add_calls.lua replied {reply[0]!r}")

    def end_tick(self, keys: JobKeys, *, token: str, exchange: dict, counts: bool, output: Any, has_output: bool,
                 usage: dict[str, int], messages: Sequence[dict],
                 events: Sequence[Envelope]) -> TickEnded | TickSuperseded:
        """tick_end.lua: keep the tick's exchange, usage and messages, and give up its lease."""
        reply = self._run(
            "tick_end", [keys.job, keys.tick_lease, keys.exchanges, keys.log, keys.events],
            [token, dumps(exchange), 1 if counts else 0, dumps(output) if has_output else "", dumps(usage),
             len(messages), *(dumps(m) for m in messages), *(entry(e, keys.job_id) for e in events)])
        if reply[0] == "ended":
            return TickEnded(open_calls=int(reply[1]), ticks=int(reply[2]))
        if reply[0] == "superseded":
            return TickSuperseded()
        raise ValueError(f"tick_end.lua replied {reply[0]!r}")

    def unlease(self, lease_key: str, *, token: str) -> bool:
        """unlease.lua: delete a lease that `token` holds, and nothing else's."""
        return bool(self._run("unlease", [lease_key], [token]))

    # ----------------------------------------------------------------------------------------- budgets

    def reserve_budget(self, keys: JobKeys, key: str, *, budget: Budget, ask: BudgetAsk) -> BudgetReply:
        """budget.lua's reserve: hold what a request may spend against the (root) job's budget, or refuse it."""
        limits = (budget.max_requests, budget.max_input_tokens, budget.max_output_tokens, budget.max_cost_nanousd)
        reply = self._run("budget", [keys.job, keys.budget], [
            "reserve", key, *("" if limit is None else limit for limit in limits), ask.input_tokens,
            ask.input_nanousd, ask.output_tokens, ask.min_output_tokens, repr(float(ask.output_nanousd_per_token))])
        if reply[0] == "granted":
            return BudgetGranted(output_tokens=int(reply[1]))
        return BudgetRefused(message=str(reply[1]))

    def settle_budget(self, keys: JobKeys, key: str, spend: Spend) -> bool:
        """budget.lua's settle: what the request `key` held becomes what it spent (once)."""
        return bool(self._run("budget", [keys.job, keys.budget], [
            "settle", key, spend.requests, spend.input_tokens, spend.output_tokens, spend.cost_nanousd]))

    # -------------------------------------------------------------------------------------- node names

    def node_swap(self, node_key: str, *, expected: str, holder: str, ttl_ms: int, or_absent: bool) -> bool:
        """node_swap.lua: set the claim to `holder` if it still holds `expected` (or nothing, with `or_absent`)."""
        return bool(self._run("node_swap", [node_key], [expected, holder, ttl_ms, int(or_absent)]))


def _claimed(reply: list, carried: CallRecord | None) -> Claimed:
    """claim.lua's `{'claimed', stored record or '', tool schema or '', attempt, log length, announced, lost,
    tail messages...}`: an empty record or tool means the caller's copy is the stored one."""
    stored, tool = reply[1], reply[2]
    if stored:
        record = CallRecord.from_dict(json.loads(stored))
    else:
        assert carried is not None, "claim.lua leaves out only a record the caller carried"
        record = carried
    return Claimed(
        record=record, record_replaced=bool(stored) and carried is not None,
        tool=json.loads(tool) if tool else None, tool_sha=sha1(tool) if tool else "",
        attempt=int(reply[3]), log_length=int(reply[4]), announced=reply[5] == "1", lost=int(reply[6]),
        log_tail=[json.loads(m) for m in reply[7:]])


def _committed(reply: list) -> Committed:
    """`committed_reply` of _committed.lua (commit.lua, settle.lua): `{'committed', open, job status, ticking,
    kind, n, n released records, [what finalizing a plan job reads: m, m job fields and values, k, k log
    messages, call statuses' fields and values]}`."""
    released_end = 6 + int(reply[5])
    return Committed(
        open_calls=int(reply[1]), job_status=JobStatus(reply[2]), ticking=reply[3] == "1", kind=JobKind(reply[4]),
        released=[CallRecord.from_dict(json.loads(r)) for r in reply[6:released_end]],
        finish_inputs=_finish_inputs(reply[released_end:]) if len(reply) > released_end else None)


def _finish_inputs(rest: list) -> FinishInputs:
    """The tail of a committed reply: `m, m job fields and values, k, k log messages, statuses' fields and
    values`."""
    job_end = 1 + int(rest[0])
    log_end = job_end + 1 + int(rest[job_end])
    fields, statuses = rest[1:job_end], rest[log_end:]
    return FinishInputs(decode_job(dict(zip(fields[::2], fields[1::2], strict=True))),
                        [json.loads(m) for m in rest[job_end + 1:log_end]],
                        {k: CallStatus(v) for k, v in zip(statuses[::2], statuses[1::2], strict=True)})
