"""Job steps of the memory store: submission (submit.lua), a recorded rejection, finalize.lua, cancel.lua, usage,
the signing secret, and the writes of module relay (a child job's events to its parent's stream)."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Sequence
from typing import Any

from agentq.protocol.envelopes import Envelope
from agentq.protocol.jobs import JobPlan
from agentq.protocol.records import CallRecord, ErrorInfo, JobKind, JobRecord, ParentLink
from agentq.protocol.status import CallStatus, JobStatus
from agentq.store.codecs import USAGE_PREFIX, dumps, entry, now_iso
from agentq.store.event_codec import pack
from agentq.store.submission import submission_payload
from agentq.store.views import RelayCursor
from tests.runtime.memory_store.core import ACTIVE, UNSTARTED, JobState, MemoryCore, marked, not_found


class JobSteps(MemoryCore):
    _recent: dict[str, float]
    _task_key: str | None

    def create_job(self, plan: JobPlan, records: Sequence[CallRecord], *, submitted: Any,
                   events: Sequence[Envelope], parent: dict | None = None) -> bool:
        """submit.lua, on the payload `StateStore.create_job` sends it: all of the job or nothing when its id is
        taken."""
        payload = submission_payload(plan, records, submitted=submitted, events=events, parent=parent)
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

    def record_rejection(self, job_id: str, error: ErrorInfo, *, ttl_s: int) -> bool:
        now = now_iso()
        record = JobRecord(id=job_id, status=JobStatus.FAILED, error=error, created_at=now, finished_at=now)
        with self._changed:
            current = self._get(job_id)
            if current is not None and current.job:
                return False
            state = current or JobState()
            state.expire_at_ms = int((self.clock() + ttl_s) * 1000)
            state.job.update({"id": job_id, "status": JobStatus.FAILED.value, "kind": JobKind.PLAN.value,
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
