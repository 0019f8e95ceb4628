"""Job steps of the memory store: submission (submit.lua), a recorded rejection, finalize.lua, cancel.lua, usage,
budgets (budget.lua), the signing secret, and the writes of module relay (a child job's events to its parent's
stream)."""

from __future__ import annotations

import json
import math
import secrets
import time
from collections.abc import Sequence
from typing import Any

from agentq.protocol.admission import AdmissionRequest
from agentq.protocol.budgets import Budget, BudgetAsk, Spend
from agentq.protocol.digests import dumps, now_iso
from agentq.protocol.envelopes import Envelope
from agentq.protocol.jobs import JobPlan
from agentq.protocol.records import CallRecord, ErrorInfo, JobKind, JobRecord, ParentLink
from agentq.protocol.status import CallStatus, JobStatus
from agentq.protocol.tenants import DEFAULT_TENANT
from agentq.store.codecs import USAGE_PREFIX, entry
from agentq.store.event_codec import pack
from agentq.store.replies import BudgetGranted, BudgetRefused, BudgetReply
from agentq.store.submission import submission_payload
from agentq.store.views import RelayCursor
from tests.runtime.memory_store.core import ACTIVE, UNSTARTED, JobState, MemoryCore, marked, not_found


class JobSteps(MemoryCore):
    _recent: dict[str, float]
    _task_key: str | None

    def create_job(self, plan: JobPlan, records: Sequence[CallRecord], *, submitted: Any,
                   events: Sequence[Envelope], parent: dict | None = None, traceparent: str | None = None,
                   tenant: str = DEFAULT_TENANT, admission: AdmissionRequest | None = None) -> bool:
        """submit.lua, on the payload `StateStore.create_job` sends it: all of the job or nothing when its id is
        taken. `admission` is left to its own step, as on a cluster (its reply stays None)."""
        payload = submission_payload(plan, records, submitted=submitted, events=events, parent=parent,
                                     traceparent=traceparent, tenant=tenant)
        with self._changed:
            current = self._get(plan.id)
            if current is not None and current.job:  # EXISTS job
                return False
            state = current if current is not None else JobState()  # keys without a job hash are written into
            state.expire_at_ms = int((self.clock() + plan.ttl_s) * 1000)
            _write_payload(state, payload, state.expire_at_ms)
            self._jobs[plan.id] = state
            for packed in payload["events"]:
                self._xadd(state, packed)
            self._recent.setdefault(plan.id, time.time())  # ZADD NX
            return True

    def adopt_traceparent(self, job_id: str, traceparent: str) -> str | None:
        """trace_context.lua: HSETNX on an existing job hash, then its value."""
        with self._changed:
            current = self._get(job_id)
            if current is None or not current.job:
                return None
            return current.job.setdefault("traceparent", traceparent)

    def record_rejection(self, job_id: str, error: ErrorInfo, *, ttl_s: int, tenant: str = DEFAULT_TENANT) -> bool:
        now = now_iso()
        record = JobRecord(id=job_id, status=JobStatus.FAILED, error=error, created_at=now, finished_at=now,
                           tenant=tenant)
        with self._changed:
            current = self._get(job_id)
            if current is not None and current.job:
                return False
            state = current or JobState()
            state.expire_at_ms = int((self.clock() + ttl_s) * 1000)
            state.job.update({"id": job_id, "status": JobStatus.FAILED.value, "kind": JobKind.PLAN.value,
                              "tenant": tenant,
                              "created_at": now, "finished_at": now, "error": dumps(error.to_dict()),
                              "record": dumps(record.to_dict()), "expire_at_ms": str(state.expire_at_ms)})
            self._jobs[job_id] = state
            self._end(state, JobStatus.FAILED.value)
            return True

    def save_record(self, job_id: str, record: JobRecord) -> None:
        with self._changed:
            self._get_or_new(job_id).job["record"] = dumps(record.to_dict())

    def finalize(self, job_id: str, *, record: JobRecord, event: Envelope) -> bool:
        """finalize.lua."""
        with self._changed:
            state = self._get(job_id)
            if state is None or state.job.get("status") not in ACTIVE:
                return False
            state.job.update({"status": record.status.value, "record": dumps(record.to_dict()),
                              "finished_at": record.finished_at or now_iso()})
            self._xadd(state, entry(event, job_id))
            self._end(state, record.status.value)
            return True

    def cancel(self, job_id: str, *, event: Envelope) -> tuple[JobStatus, list[str]]:
        """cancel.lua."""
        with self._changed:
            state = self._get(job_id)
            status = state.job.get("status") if state is not None else None
            if state is None or status is None:
                raise not_found(job_id)
            if status not in ACTIVE:
                return JobStatus(status), []
            state.job.update({"status": JobStatus.CANCELED.value, "finished_at": now_iso()})
            ready, running = [], []
            for call_id, call_status in state.status.items():
                if call_status in UNSTARTED:
                    state.status[call_id] = CallStatus.CANCELED.value
                    if call_status == CallStatus.READY.value:
                        ready.append(call_id)
                elif call_status == CallStatus.RUNNING.value:
                    running.append(call_id)
            packed = entry(event, job_id)
            self._xadd(state, marked(packed, "running", sorted(running)) if running else packed)
            self._end(state, JobStatus.CANCELED.value)
            return JobStatus.CANCELED, ready

    def add_usage(self, job_id: str, usage: dict[str, int]) -> None:
        with self._changed:
            state = self._get_or_new(job_id)
            for name, count in usage.items():
                if count:
                    state.incr(USAGE_PREFIX + name, count)

    def reserve_budget(self, job_id: str, key: str, *, budget: Budget, ask: BudgetAsk) -> BudgetReply:
        """budget.lua's reserve."""
        with self._changed:
            state = self._get(job_id)
            if state is None or not state.job.get("expire_at_ms"):
                return BudgetRefused("the job is gone (expired), and its budget with it")
            held = state.budget
            if f"r:{key}" in held:
                return BudgetGranted(int(held[f"r:{key}"].split()[2]))
            if "exceeded" in held:
                return BudgetRefused(held["exceeded"])
            reply = _reserve(held, budget, ask)
            if isinstance(reply, BudgetRefused):
                held["exceeded"] = reply.message
                return reply
            cost = ask.input_nanousd + math.ceil(reply.output_tokens * ask.output_nanousd_per_token)
            for name, amount in zip(_SPENDS, (1, ask.input_tokens, reply.output_tokens, cost), strict=True):
                held[f"held.{name}"] = str(int(held.get(f"held.{name}") or 0) + amount)
            held[f"r:{key}"] = f"1 {ask.input_tokens} {reply.output_tokens} {cost}"
            return reply

    def settle_budget(self, job_id: str, key: str, spend: Spend) -> bool:
        """budget.lua's settle."""
        with self._changed:
            state = self._get(job_id)
            held = state.budget if state is not None else {}
            amounts = held.pop(f"r:{key}", None)
            if amounts is None:
                return False
            spent = (spend.requests, spend.input_tokens, spend.output_tokens, spend.cost_nanousd)
            for name, was, now in zip(_SPENDS, amounts.split(), spent, strict=True):
                held[f"held.{name}"] = str(int(held.get(f"held.{name}") or 0) - int(was))
                held[f"spent.{name}"] = str(int(held.get(f"spent.{name}") or 0) + now)
            return True

    def task_signing_key(self) -> bytes:
        with self._changed:
            if self._task_key is None:
                self._task_key = secrets.token_hex(32)
            return self._task_key.encode()

    def relay_cursor(self, job_id: str) -> RelayCursor | None:
        with self._changed:
            state = self._get(job_id)
            if state is None or not state.job.get("parent"):
                return None
            link = ParentLink.from_dict(json.loads(state.job["parent"]))
            return RelayCursor(state.job.get("relayed") or "0-0", link)

    def write_relayed(self, job_id: str, *, parent_id: str, cursor: str, to: str,
                      envelopes: Sequence[dict[str, Any]]) -> bool:
        """`StateStore.write_relayed`: relay.lua's compare-and-set of the child's cursor, then the parent's
        stream gets the envelopes."""
        with self._changed:
            state = self._get_or_new(job_id)
            if (state.job.get("relayed") or "0-0") != cursor:
                return False
            state.job["relayed"] = to
            target = self._get_or_new(parent_id)
            for envelope in envelopes:
                self._xadd(target, pack(envelope, parent_id))
            return True


_SPENDS = ("requests", "input", "output", "cost")


def _reserve(held: dict[str, str], budget: Budget, ask: BudgetAsk) -> BudgetReply:
    """budget.lua's checks of a new reservation: refused, or granted with the output tokens it may write."""

    def used(name: str) -> int:
        return int(held.get(f"spent.{name}") or 0) + int(held.get(f"held.{name}") or 0)

    if budget.max_requests is not None and used("requests") + 1 > budget.max_requests:
        return BudgetRefused(f"max_requests: {used('requests')} of {budget.max_requests} model requests made or in "
                             "flight")
    if budget.max_input_tokens is not None and used("input") + ask.input_tokens > budget.max_input_tokens:
        return BudgetRefused(f"max_input_tokens: {used('input')} of {budget.max_input_tokens} input tokens used or "
                             f"held; the next request needs about {ask.input_tokens}")
    output, limited_by = ask.output_tokens, None
    if budget.max_output_tokens is not None and budget.max_output_tokens - used("output") < output:
        output, limited_by = max(0, budget.max_output_tokens - used("output")), "output"
    max_cost = budget.max_cost_nanousd
    if max_cost is not None:
        room = max_cost - used("cost") - ask.input_nanousd
        rate = ask.output_nanousd_per_token
        if rate > 0 and math.floor(room / rate) < output:
            output, limited_by = max(0, math.floor(room / rate)), "cost"
        if room < 0:
            output, limited_by = 0, "cost"
    if output < ask.min_output_tokens and limited_by == "cost":
        assert max_cost is not None
        needs = ask.input_nanousd + ask.min_output_tokens * ask.output_nanousd_per_token
        return BudgetRefused(f"max_cost_usd: {_dollars(used('cost'))} of {_dollars(max_cost)} spent or held; the "
                             f"next request needs about {_dollars(needs)}")
    if output < ask.min_output_tokens:
        return BudgetRefused(f"max_output_tokens: {used('output')} of {budget.max_output_tokens or 0} output tokens "
                             f"used or held; the next request needs at least {ask.min_output_tokens}")
    return BudgetGranted(output)


def _dollars(nanos: float) -> str:
    return f"${nanos / 1e9:.6f}"


def _write_payload(state: JobState, payload: dict, expire_at_ms: int) -> None:
    """submit.lua's writes of its payload (its events aside)."""
    state.job.update({k: str(v) for k, v in payload["job"].items()})
    state.job["expire_at_ms"] = str(expire_at_ms)
    state.spec.update(payload["spec"])
    state.log.extend(payload["log"])
    state.calls.update(payload["calls"])
    state.status.update(payload["status"])
    state.waiting.update({k: int(v) for k, v in payload["waiting"].items()})
    state.tools.update(payload["tools"])
    state.dependents.update(payload["dependents"])
    state.approval.update({k: str(v) for k, v in payload["approval"].items()})
