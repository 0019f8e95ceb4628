"""Event envelopes: what goes into a job's event stream.

An envelope is `{"event": <name>, "job_id": ..., ...}` and, for events a front end shows, `"part"`: an
ActivityOutputPart (seed 004) with its technical details, which `agentq.protocol.events.strip_technical_details`
removes before anything reaches a front end. Event names:

job.queued, job.started, job.finished (status, error), call.started (call_id, tool, attempt),
call.retrying (call_id, attempt, error, retry_in_s), call.finished (call_id, tool, status, duration_ms),
thought, part (a part an activity emitted through its context).
"""

from __future__ import annotations

from typing import Any


def envelope(event: str, job_id: str, *, part: dict | None = None, **fields: Any) -> dict:
    body = {"event": event, "job_id": job_id, **fields}
    if part is not None:
        body["part"] = part
    return body
