"""Committing a failed call: the one place that renders a failure's log messages and `call.finished` event and
writes them (an attempt that failed for good, a reviewer's rejection, a module's child job that did not
succeed)."""

from __future__ import annotations

from dataclasses import dataclass

from agentq.protocol.digests import now_iso
from agentq.protocol.envelopes import CallFinished
from agentq.protocol.events import tool_result_part
from agentq.protocol.records import CallRecord
from agentq.protocol.status import CallStatus
from agentq.protocol.writes import absorbs_failure, failure_messages
from agentq.store.base import Commit
from agentq.store.contracts import CallStore


@dataclass(frozen=True)
class Shown:
    """How a failed call shows in its `tool_result` part: `content` (default: the message), its display
    hints and technical details, and the run time its event reports."""

    content: str | None = None
    display: dict | None = None
    technical: dict | None = None
    duration_ms: float = 0.0


def commit_failure(store: CallStore, job_id: str, call_id: str, *, token: str, record: CallRecord, error_type: str,
                   message: str, source: str, shown: Shown = Shown(), lease_ms: int = 0) -> tuple[Commit, CallFinished]:
    """Commit the call as failed with `error_type: message` (sensitive values already masked): its error
    message in the log (or the `||` branch that takes it) and its `call.finished` event. Returns the commit's
    reply and the event. `lease_ms`: the caller's lease length (`Store.commit`)."""
    messages, event = failure(job_id, call_id, record=record, error_type=error_type, message=message, source=source,
                              shown=shown)
    commit = store.commit(job_id, call_id, token=token, status=CallStatus.FAILED, messages=messages, events=[event],
                          lease_ms=lease_ms)
    return commit, event


def failure(job_id: str, call_id: str, *, record: CallRecord, error_type: str, message: str, source: str,
            shown: Shown = Shown()) -> tuple[list[dict], CallFinished]:
    """A failed call's log messages and `call.finished` event, for a step that commits them (`commit_failure`; a
    reviewer's rejection, committed with its decision: `runtime/decisions.py`)."""
    messages = failure_messages(record.call, call_id=call_id, error_type=error_type, message=message,
                                date=now_iso())
    part = tool_result_part(call_id=call_id, name=record.tool, content=shown.content or message, is_error=True,
                            source=source, locale=record.locale, display=shown.display, technical=shown.technical)
    event = CallFinished(job_id=job_id, call_id=call_id, tool=record.tool, status=CallStatus.FAILED.value,
                         duration_ms=shown.duration_ms, error={"type": error_type, "message": message},
                         absorbed=absorbs_failure(record.call), part=part)
    return messages, event
