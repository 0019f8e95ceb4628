"""Ending a plan job: its final status, error and record, exactly once."""

from __future__ import annotations

import json

from agentq.protocol.events import activity_part, error_part
from agentq.protocol.writes import absorbs_failure
from agentq.runtime.events import envelope
from agentq.store.records import job_record
from agentq.store.state import StateStore, now_iso


def finalize_job(store: StateStore, job_id: str, *, source: str = "agentq", error: dict | None = None) -> bool:
    """Give a plan job whose awaited calls all finished its final status and record (idempotent).

    Used after the commit of a job's last awaited call, and at submission for a plan job that awaits no call
    at all (no calls, or only fire-and-forget ones), which no commit would ever finalize."""
    fields, log_messages, statuses = store.finish_inputs(job_id)
    failed_ids = [call_id for call_id, status in statuses.items() if status == "failed"]
    failed = _unabsorbed_failures(store.call_records(job_id, failed_ids), statuses, log_messages)
    status = "failed" if failed or error else "succeeded"
    if failed and error is None:
        error = {"type": "CallsFailed",
                 "message": f"{len(failed)} call(s) failed: " + "; ".join(failed)}
    fields = {**fields, "status": status, "finished_at": now_iso()}
    record = job_record(fields, log_messages, error=error)
    if fields.get("kind") == "plan":
        record["result"] = record["state"]
    locale = json.loads(fields.get("options") or "{}").get("locale", "en")
    part = (error_part(error["message"], source=source, locale=locale) if error
            else activity_part(f"Job {status}", source=source, locale=locale))
    event = envelope("job.finished", job_id, status=status, error=error, part=part)
    return store.finalize(job_id, status=status, record=record, event=event)


def _unabsorbed_failures(records: dict, statuses: dict, log_messages: list[dict]) -> list[str]:
    errors = {m["data"]["call"].get("id"): m["data"]["error"] for m in log_messages
              if m.get("type") == "error" and isinstance(m.get("data"), dict)}
    failed = []
    for call_id, status in statuses.items():
        record = records.get(call_id, {})
        # fire-and-forget calls (not awaited) never decide the job's outcome
        if status == "failed" and record.get("awaited") and not absorbs_failure(record.get("call", {})):
            error = errors.get(call_id) or {}
            failed.append(f"{record.get('tool')} ({call_id}): {error.get('type', 'Error')}: {error.get('message', '')}")
    return sorted(failed)
