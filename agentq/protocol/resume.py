"""Resuming an ended job where it stopped (docs/resume.md), as pure decisions: which jobs may be resumed, the option
overrides a resume takes (checked as a submission's options are, every problem with its pointer), and the note an
agent job's conversation gets so its model knows what happened."""

from __future__ import annotations

from typing import Any

from agentq.errors import JobValidationError, Problem
from agentq.protocol.digests import now_iso
from agentq.protocol.jobs import JobLimits, option_checks
from agentq.protocol.records import ErrorInfo
from agentq.protocol.status import JobStatus

#: the statuses a job may be resumed from (a deadline-exceeded job is `failed` with `DeadlineExceeded`)
RESUMABLE = (JobStatus.FAILED, JobStatus.CANCELED)
#: options a resume cannot change, and why
FIXED_OPTIONS = {
    "start_at": "a resumed job starts at once",
    "delay_s": "a resumed job starts at once",
    "concurrency": "a resumed job holds the concurrency keys it was submitted with",
}


def resume_options(raw: Any, limits: JobLimits) -> dict[str, Any]:
    """The option overrides of a resume (`{}` when none were given): each checked as a submission's option is. Raises
    one `JobValidationError` naming every problem by its pointer (`/options/...`)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise JobValidationError("resume rejected", [Problem("/options", "options must be an object")])
    problems = [Problem(f"/options/{key}", f"{why}: it cannot be changed by a resume")
                for key, why in FIXED_OPTIONS.items() if key in raw]
    checked = {key: value for key, value in raw.items() if key not in FIXED_OPTIONS}
    problems += option_checks(checked, limits)
    if problems:
        raise JobValidationError("resume rejected", problems)
    return checked


def deadline_kind(run: int, base: str = "deadline") -> str:
    """The kind of the deadline timer of a job's run `run`: the first run's is `deadline`, a resumed run's
    `deadline:<run>`, so a timer of an earlier run never ends a later one."""
    return base if run <= 1 else f"{base}:{run}"


def conflict_message(job_id: str, status: JobStatus) -> str:
    """Why a job in `status` cannot be resumed."""
    if status is JobStatus.SUCCEEDED:
        return f"job {job_id} succeeded: there is nothing to resume (submit it again to run it again)"
    if status.is_active:
        return f"job {job_id} is {status}: only a failed or canceled job can be resumed"
    return f"job {job_id} is {status}: it cannot be resumed"


def resume_note(previous: JobStatus, error: ErrorInfo | None, run: int) -> dict[str, Any]:
    """The user message an agent job's conversation gets when it is resumed: what ended its last run, and that its
    calls that succeeded keep their outputs."""
    if previous is JobStatus.CANCELED:
        why = "it was canceled"
    elif error is not None:
        why = f"its error ({error.type}: {error.message})"
    else:
        why = "it failed"
    text = (f"The job was resumed after {why}. This is run {run} of the job: the calls that succeeded keep their "
            "outputs; go on from where the job stopped.")
    return {"type": "text", "role": "user", "text": text, "_date": now_iso()}
