"""Reads of the memory store: a job's fields, status, log, calls, events and end, as `StateStore` reads them."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

from agentq.protocol.job_record import build_job_record
from agentq.protocol.records import CallRecord, JobInfo, JobRecord
from agentq.protocol.status import CallStatus, JobStatus
from agentq.store.base import CallTable
from agentq.store.codecs import decode_job, standing_record
from agentq.store.event_codec import unpack
from agentq.store.replies import FinishInputs
from tests.runtime.memory_store.core import JobState, MemoryCore, finish_inputs, not_found


def _stream_id(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


class Reads(MemoryCore):
    _recent: dict[str, float]

    def _copy(self, job_id: str) -> JobState:
        """A snapshot of the job's keys (empty ones when it has none), taken under the lock."""
        with self._changed:
            state = self._get(job_id)
            if state is None:
                return JobState()
            return JobState(job=dict(state.job), log=list(state.log), calls=dict(state.calls),
                            status=dict(state.status), attempts=dict(state.attempts), tools=dict(state.tools),
                            dependents=dict(state.dependents), done=list(state.done))

    def job_info(self, job_id: str) -> JobInfo:
        fields = self._copy(job_id).job
        if not fields:
            raise not_found(job_id)
        return decode_job(fields)

    def job_status(self, job_id: str) -> JobStatus:
        status = self._copy(job_id).job.get("status")
        if status is None:
            raise not_found(job_id)
        return JobStatus(status)

    def wait_finished(self, job_id: str, timeout_s: float) -> JobStatus | None:
        deadline = time.monotonic() + max(0.01, timeout_s)
        with self._changed:
            while True:
                state = self._get(job_id)
                if state is not None and state.done:
                    return JobStatus(state.done[-1])
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._changed.wait(left)

    def wait_record(self, job_id: str, timeout_s: float) -> JobRecord | None:
        return self.record(job_id) if self.wait_finished(job_id, timeout_s) is not None else None

    def read_log(self, job_id: str, start: int = 0) -> list[dict]:
        return [json.loads(m) for m in self._copy(job_id).log[start:]]

    def call_records(self, job_id: str, call_ids: Sequence[str] | None = None) -> dict[str, CallRecord]:
        calls = self._copy(job_id).calls
        wanted = list(calls) if call_ids is None else [c for c in call_ids if c in calls]
        return {c: CallRecord.from_dict(json.loads(calls[c])) for c in wanted}

    def finish_inputs(self, job_id: str) -> FinishInputs:
        state = self._copy(job_id)
        if not state.job:
            raise not_found(job_id)
        return finish_inputs(state)

    def dependents(self, job_id: str, call_id: str) -> list[str]:
        value = self._copy(job_id).dependents.get(call_id)
        return json.loads(value) if value else []

    def job_tools(self, job_id: str) -> dict[str, dict]:
        return {k: json.loads(v) for k, v in self._copy(job_id).tools.items()}

    def call_statuses(self, job_id: str, call_ids: Sequence[str] | None = None) -> dict[str, CallStatus]:
        status = self._copy(job_id).status
        wanted = status.keys() if call_ids is None else [c for c in call_ids if c in status]
        return {k: CallStatus(status[k]) for k in wanted}

    def record(self, job_id: str) -> JobRecord:
        info = self.job_info(job_id)
        stood = standing_record(info)
        if stood is not None:
            return stood
        # a canceled job's calls that were running may still end: its state is what its log says now
        return build_job_record(info, self.read_log(job_id))

    def read_events(self, job_id: str, after: str = "0-0", *, block_ms: int | None = None,
                    count: int | None = None) -> list[tuple[str, dict]]:
        start = _stream_id(after)
        deadline = None if block_ms in (None, 0) else time.monotonic() + block_ms / 1000
        with self._changed:
            while True:
                state = self._get(job_id)
                entries = [(i, e) for i, e in (state.events if state is not None else []) if _stream_id(i) > start]
                left = None if deadline is None else deadline - time.monotonic()
                if entries or block_ms is None or (left is not None and left <= 0):
                    break
                self._changed.wait(left)
        return [(entry_id, unpack(packed, job_id)) for entry_id, packed in entries[:count]]

    def call_table(self, job_id: str) -> CallTable:
        state = self._copy(job_id)
        if not state.job:
            raise not_found(job_id)
        return CallTable(records={k: CallRecord.from_dict(json.loads(v)) for k, v in state.calls.items()},
                         statuses={k: CallStatus(v) for k, v in state.status.items()},
                         attempts=dict(state.attempts),
                         dependents={k: json.loads(v) for k, v in state.dependents.items()})

    def recent_jobs(self, limit: int = 50, *, tenant: str | None = None) -> list[str]:
        with self._changed:
            jobs = [j for j in self._recent if tenant in (None, "default") or self._jobs[j].job.get("tenant") == tenant]
            return sorted(jobs, key=lambda j: self._recent[j], reverse=True)[:limit]
