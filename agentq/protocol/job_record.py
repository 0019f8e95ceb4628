"""The job record (docs/protocol.md#the-job-record), built from a job's stored fields and its log."""

from __future__ import annotations

from typing import Any

from agentq.protocol.records import ErrorInfo, JobInfo, JobKind, JobRecord
from agentq.protocol.status import JOB_FINAL, JobStatus
from agentq.protocol.usage import usage_record
from agentq.protocol.values import MISSING
from agentq.protocol.views import LogIndex

_FINISHED = (JobStatus.SUCCEEDED, JobStatus.FAILED)  # a canceled job has no result


def state_views(log: list[dict] | LogIndex) -> tuple[Any, dict[str, Any]]:
    """The merged global `state` view and each instance's merged `state` view."""
    index = log if isinstance(log, LogIndex) else LogIndex(log)
    state = _as_object(index.view("state"))
    instances = {i: _as_object(index.view("state", i)) for i in index.instances("state")}
    return state, instances


def build_job_record(info: JobInfo, log: list[dict] | LogIndex, *, status: JobStatus | None = None,
                     error: ErrorInfo | None = None, finished_at: str | None = None) -> JobRecord:
    """The record of a job as its log stands; `status`, `error` and `finished_at` override the stored ones
    (finalization passes the outcome it is about to write). A finished plan job's result is its global
    state; a succeeded agent job's is the final output its model gave."""
    state, instances = state_views(log)
    status = status or info.status
    error, finished_at = _ending(info, error, finished_at)
    if info.kind is JobKind.PLAN:
        result = state if status in _FINISHED else None
    else:  # an agent job's result is the output of its last solution
        result = info.final_output if status is JobStatus.SUCCEEDED else None
    return JobRecord(
        id=info.id, status=status,
        result=result,
        state=state, instances=instances, error=error,
        usage=usage_record(info.usage), created_at=info.created_at, finished_at=finished_at, tenant=info.tenant,
        lineage=info.lineage,
        runs=job_runs(info, status, error, finished_at),
    )


def job_runs(info: JobInfo, status: JobStatus, error: ErrorInfo | None,
             finished_at: str | None) -> tuple[dict[str, Any], ...] | None:
    """A resumed job's runs (docs/resume.md): the ended ones the store keeps, then the current one (its start, and its
    end, status and error once it ended); None for a job that was never resumed."""
    if not info.runs:
        return None
    ended = status in JOB_FINAL
    current = {"run": len(info.runs) + 1, "started_at": info.resumed_at, "finished_at": finished_at if ended else None,
               "status": status.value, "error": error.to_dict() if ended and error is not None else None}
    return (*info.runs, current)


def _ending(info: JobInfo, error: ErrorInfo | None, finished_at: str | None) -> tuple[ErrorInfo | None, str | None]:
    """The record's error and end: the ones given, else the job's stored ones, else those of the record saved when
    it ended (a job whose record is computed anew after it ended: canceled, or ended with calls still open)."""
    saved = info.record
    error = error or info.error or (saved.error if saved is not None else None)
    return error, finished_at or info.finished_at or (saved.finished_at if saved is not None else None)


def _as_object(view: object) -> object:
    """A view that was never written is `{}` in a record (MISSING is not JSON)."""
    return {} if view is MISSING else view
