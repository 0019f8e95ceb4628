"""Agent tick steps of the memory store: tick_begin.lua, add_calls.lua, tick_end.lua, unlease.lua, and the reads
and writes around a tick (`agent_inputs`, `set_job_tools`, `end_ticking`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from agentq.protocol.digests import dumps, now_iso
from agentq.protocol.envelopes import Envelope
from agentq.protocol.records import TICK, CallRecord
from agentq.protocol.status import CallStatus, JobStatus
from agentq.store.codecs import USAGE_PREFIX, decode_job, entry
from agentq.store.replies import (
    FinishInputs,
    TickBusy,
    TickClaim,
    TickClaimed,
    TickEnded,
    TickFinished,
    TickLeased,
    TickMissing,
    TickStale,
)
from agentq.store.views import AgentInputs
from tests.runtime.memory_store.core import ACTIVE, FINAL, JobState, MemoryCore, not_found


class TickSteps(MemoryCore):
    def begin_tick(self, job_id: str, *, exchanges: int, token: str, lease_ms: int,
                   job_started: Envelope | None = None, read_from: tuple[int, int] | None = None) -> TickClaim:
        """tick_begin.lua; with `read_from`, a claim brings the tick's inputs (read in the same step)."""
        with self._changed:  # one step, as the script's
            claim = self._begin_tick(job_id, exchanges=exchanges, token=token, lease_ms=lease_ms,
                                     job_started=job_started)
            if isinstance(claim, TickClaimed) and read_from is not None:
                return replace(claim, inputs=self._inputs(job_id, *read_from))
            return claim

    def _begin_tick(self, job_id: str, *, exchanges: int, token: str, lease_ms: int,
                    job_started: Envelope | None) -> TickClaim:
        with self._changed:
            state = self._get(job_id)
            status = state.job.get("status") if state is not None else None
            if state is None or status is None:
                return TickMissing()
            refused = self._tick_refused(state, status, exchanges=exchanges, token=token)
            if refused is not None:
                return refused
            self._set_lease(state, TICK, token, lease_ms)
            state.job["ticking"] = "1"
            attempt = state.incr("tick_attempt", 1)
            if status == JobStatus.QUEUED.value:
                state.job.update({"status": JobStatus.RUNNING.value, "started_at": now_iso()})
                if job_started is not None:
                    self._xadd(state, entry(job_started, job_id))
            return TickClaimed(attempt=attempt)

    def _tick_refused(self, state: JobState, status: str, *, exchanges: int, token: str) -> TickClaim | None:
        """tick_begin.lua's answers before it takes the lease (None: it takes it)."""
        if status not in ACTIVE:
            return TickFinished(status=JobStatus(status))
        if len(state.exchanges) != exchanges:
            return TickStale()
        if self._tick_holder(state) == token:  # the same tick's claim again (its reply was lost)
            return TickClaimed(attempt=int(state.job.get("tick_attempt") or 1))
        if (left := self._pttl_ms(state, TICK)) > 0:
            return TickLeased(lease_left_ms=left)
        open_calls = int(state.job.get("open") or 0)
        if open_calls > 0 and int(state.job.get("tick_attempt") or 0) == 0:
            return TickBusy(open_calls=open_calls)  # a fresh request waits for the previous one's calls
        return None

    def add_calls(self, job_id: str, *, token: str, records: Sequence[CallRecord],
                  plans: Sequence[Any]) -> list[CallRecord] | None:
        """add_calls.lua: the records of the written calls that are ready now, or None when the tick's lease is
        not `token`'s or the job ended."""
        with self._changed:
            state = self._get(job_id)
            if state is None or self._tick_holder(state) != token or state.job.get("status") not in ACTIVE:
                return None
            ready = []
            for record, plan in zip(records, plans, strict=True):
                if record.id not in state.calls and _add_call(state, record, plan, job_id,  # HSETNX: each call once
                                                               lambda held: self._xadd(state, held)):
                    ready.append(CallRecord.from_dict(json.loads(state.calls[record.id])))
            return ready

    def _tick_holder(self, state: JobState) -> str | None:
        lease = self._lease(state, TICK)
        return lease[0] if lease is not None else None

    def end_tick(self, job_id: str, *, token: str, exchange: dict, counts: bool, output: Any = None,
                 has_output: bool = False, usage: dict[str, int] | None = None, messages: Sequence[dict] = (),
                 events: Sequence[Envelope] = ()) -> TickEnded | None:
        """tick_end.lua: (open awaited calls, ticks so far), or None when the tick's lease is not `token`'s."""
        with self._changed:
            state = self._get(job_id)
            if state is None or self._tick_holder(state) != token:
                return None
            state.exchanges.append(dumps(exchange))
            state.incr("exchanges", 1)
            ticks = state.incr("ticks", 1 if counts else 0)
            if has_output:
                state.job["final_output"] = dumps(output)
            for name, n in (usage or {}).items():
                if n != 0:
                    state.incr(USAGE_PREFIX + name, n)
            state.log.extend(dumps(m) for m in messages)
            for envelope in events:
                self._xadd(state, entry(envelope, job_id))
            state.job.update({"ticking": "0", "tick_attempt": "0"})
            state.leases.pop(TICK, None)
            open_calls = int(state.job.get("open") or 0)
            if open_calls > 0:
                return TickEnded(open_calls=open_calls, ticks=ticks)
            info = decode_job(dict(state.job))
            finish = FinishInputs(info, [json.loads(m) for m in state.log],
                                  {k: CallStatus(v) for k, v in state.status.items()}) if has_output else None
            return TickEnded(open_calls=open_calls, ticks=ticks, info=info, finish=finish)

    def end_ticking(self, job_id: str) -> None:
        with self._changed:
            self._get_or_new(job_id).job.update({"ticking": "0", "tick_attempt": "0"})

    def release_tick(self, job_id: str, *, token: str) -> None:
        """unlease.lua on the tick's lease."""
        with self._changed:
            state = self._get(job_id)
            if state is not None and self._tick_holder(state) == token:
                del state.leases[TICK]

    def agent_inputs(self, job_id: str, *, log_from: int = 0, exchanges_from: int = 0) -> AgentInputs:
        with self._changed:
            return self._inputs(job_id, log_from, exchanges_from)

    def _inputs(self, job_id: str, log_from: int, exchanges_from: int) -> AgentInputs:
        with self._changed:
            state = self._get(job_id)
            if state is None or not state.job:
                raise not_found(job_id)
            fields, log, exchanges = dict(state.job), state.log[log_from:], state.exchanges[exchanges_from:]
            registered = state.spec.get("registered") or fields.get("registered")  # an old job: its job hash
        return AgentInputs(decode_job(fields), [json.loads(m) for m in log], [json.loads(e) for e in exchanges],
                           json.loads(registered or "{}"))

    def set_job_tools(self, job_id: str, composed: dict[str, dict]) -> None:
        if composed:
            with self._changed:
                self._get_or_new(job_id).tools.update({k: dumps(v) for k, v in composed.items()})


def _add_call(state: JobState, record: CallRecord, plan: Any, job_id: str, publish: Callable[[str], None]) -> bool:
    """add_calls.lua's writes of one new call; whether it is ready now."""
    state.calls[record.id] = dumps(record.to_dict())
    waiting = 0
    for dependency in plan.depends_on:
        status = state.status.get(dependency)
        if status is not None and status not in FINAL:  # a dependency that finished meanwhile is not waited on
            waiting += 1
            state.dependents[dependency] = dumps([*json.loads(state.dependents.get(dependency) or "[]"), record.id])
    if plan.approval:
        state.approval[record.id] = entry(plan.held_event(job_id), job_id)
    if record.awaited:
        state.incr("open", 1)
    state.waiting[record.id] = waiting
    if waiting > 0:
        state.status[record.id] = CallStatus.PENDING.value
    elif plan.approval:
        state.status[record.id] = CallStatus.AWAITING_APPROVAL.value
        publish(state.approval[record.id])
        state.incr("awaiting", 1)
        state.job["status"] = JobStatus.AWAITING_APPROVAL.value
    else:
        state.status[record.id] = CallStatus.READY.value
        return True
    return False
