"""Ending a job: its final status, error and record, exactly once."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Protocol

from agentq.protocol.digests import dumps, now_iso
from agentq.protocol.envelopes import JobFinished
from agentq.protocol.events import error_part, job_part
from agentq.protocol.job_record import build_job_record
from agentq.protocol.records import CallRecord, ErrorInfo, JobInfo, JobKind, JobRecord
from agentq.protocol.status import CallStatus, JobStatus
from agentq.protocol.writes import absorbs_failure
from agentq.store.base import FinishInputs
from agentq.store.contracts import CallStore, JobReader, JobStore
from agentq.store.replies import EndAhead, LastCall


class FinalizeStore(CallStore, JobStore, JobReader, Protocol):
    """What a job's end reads and writes."""


@dataclass(frozen=True)
class Finalized:
    """What finalizing did: `ended` is True for the one caller that gave the job its final status."""

    ended: bool
    info: JobInfo
    record: JobRecord


def finalize_job(store: FinalizeStore, job_id: str, *, source: str = "agentq", error: ErrorInfo | None = None,
                 inputs: FinishInputs | None = None) -> Finalized:
    """Give a job whose awaited calls all finished its final status and record (idempotent).

    Used after the commit of a job's last awaited call, when an agent job's model gave its final output (or
    ran out of ticks), and at submission for a plan job that awaits no call at all (no calls, or only
    fire-and-forget ones), which no commit would ever finalize. A plan job fails when an awaited call failed
    and no `||` branch took the failure; an agent job's failed calls were its model's to handle. `inputs` is
    what finalizing reads when the caller has it already (the reply of the commit of the job's last call)."""
    info, log_messages, statuses = inputs if inputs is not None else store.finish_inputs(job_id)
    if error is None and info.kind is JobKind.PLAN:
        error = _calls_failed(store, job_id, statuses, log_messages)
    record, event = job_end(job_id, info, log_messages, error, source=source)
    return Finalized(store.finalize(job_id, record=record, event=event), info, record)


def job_end(job_id: str, info: JobInfo, log_messages: list[dict], error: ErrorInfo | None, *,
            source: str) -> tuple[JobRecord, JobFinished]:
    """A job's final record and its `job.finished` event: failed with `error`, else succeeded."""
    status = JobStatus.FAILED if error is not None else JobStatus.SUCCEEDED
    record = build_job_record(info, log_messages, status=status, error=error, finished_at=now_iso())
    part = (error_part(error.message, source=source, locale=info.locale) if error is not None
            else job_part(f"Job {status}", kind=info.kind.value, source=source, locale=info.locale))
    event = JobFinished(job_id=job_id, status=status.value, error=error.to_dict() if error is not None else None,
                        part=part)
    return record, event


@dataclass(frozen=True)
class PlannedEnd:
    """A plan job's end built before the commit of its last awaited call (`end_ahead`): `end` for the commit to
    write, `info` the job as its claim read it (what the job-progress step reads once the commit wrote it)."""

    info: JobInfo
    end: EndAhead


def end_ahead(job_id: str, last: LastCall, call_id: str, messages: list[dict], *,
              source: str) -> PlannedEnd | None:
    """The end of a plan job whose last awaited call `call_id` succeeds writing `messages`, built from what its
    claim sent (`Claimed.last`) for its commit to write: `finalize_job`'s, when no other call of the job failed
    (None otherwise: the job-progress step finalizes the job after the commit, reading which failures count)."""
    info, log_messages, statuses = last.inputs
    if any(status is CallStatus.FAILED for other, status in statuses.items() if other != call_id):
        return None
    stored = [json.loads(dumps(m)) for m in messages]  # as the log will give them back
    record, event = job_end(job_id, info, [*log_messages, *stored], None, source=source)
    return PlannedEnd(info, EndAhead(last.digest, len(log_messages), record, event))


def _calls_failed(store: FinalizeStore, job_id: str, statuses: dict[str, CallStatus],
                  log_messages: list[dict]) -> ErrorInfo | None:
    """A plan job's error when awaited calls of it failed and no `||` branch took their failure (None if none)."""
    failed_ids = [call_id for call_id, status in statuses.items() if status is CallStatus.FAILED]
    failed = _unabsorbed_failures(store.call_records(job_id, failed_ids), log_messages)
    return ErrorInfo("CallsFailed", f"{len(failed)} call(s) failed: " + "; ".join(failed)) if failed else None


def _unabsorbed_failures(failed: dict[str, CallRecord], log_messages: list[dict]) -> list[str]:
    """The failed calls that decide the job's outcome, described: awaited ones whose failure no `||` branch
    took (fire-and-forget calls never decide it)."""
    errors = {m["data"]["call"].get("id"): m["data"]["error"] for m in log_messages
              if m.get("type") == "error" and isinstance(m.get("data"), dict)}
    described = []
    for call_id, record in failed.items():
        if record.awaited and record.decides_outcome and not absorbs_failure(record.call):
            error = errors.get(call_id) or {}
            described.append(f"{record.tool} ({call_id}): {error.get('type', 'Error')}: {error.get('message', '')}")
    return sorted(described)
