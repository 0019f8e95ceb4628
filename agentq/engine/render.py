"""The events of a call's attempt, rendered (pure: nothing here reaches the store).

A call shows as: a thought (its `_reasoningForCall`, first attempt only), `call.started` with the
`tool_request` part (first attempt only: the history pairs it with the call's one `tool_result`), maybe
`call.retrying`, then `call.finished` with the `tool_result` part. Parameters are shown without meta fields and
with sensitive values masked, everywhere.
"""

from __future__ import annotations

from typing import Any

from agentq.protocol.envelopes import CallFinished, CallStarted, Envelope, JobStarted, Thought
from agentq.protocol.events import job_part, technical_details, thought_part, tool_request_part, tool_result_part
from agentq.protocol.records import CallRecord
from agentq.protocol.sensitive import mask, redactor_for, sensitive_paths
from agentq.protocol.status import CallStatus


def arguments(call: dict, tool: dict | None) -> dict:
    """A call's parameters as a front end shows them: without meta fields, sensitive values masked."""
    return mask({k: v for k, v in call.items() if not k.startswith("_")}, sensitive_paths(tool))


def job_started(job_id: str, *, locale: str, source: str) -> JobStarted:
    """The `job.started` event its first claim publishes: a plan job's (an agent job is started by its first tick)."""
    return JobStarted(job_id=job_id, part=job_part("Job started", kind="plan", source=source, locale=locale))


def start_events(job_id: str, call_id: str, record: CallRecord, tool: dict, resolved: dict, attempt: int, *,
                 source: str) -> list[Envelope]:
    """The events published when an attempt starts: a thought (first attempt), then call.started."""
    call, name, locale = record.call, record.tool, record.locale
    first = attempt == 1
    events: list[Envelope] = []
    if first and call.get("_reasoningForCall"):
        events.append(Thought(job_id=job_id, call_id=call_id,
                              part=thought_part(redactor_for(resolved, tool).redact(call["_reasoningForCall"]),
                                                source=source, locale=locale)))
    request = None if not first else tool_request_part(
        call_id=call_id, name=name, arguments=arguments(resolved, tool), source=source, locale=locale,
        display=tool.get("x-display"))
    events.append(CallStarted(job_id=job_id, call_id=call_id, tool=name, attempt=attempt,
                              instance=record.instance or None, part=request))
    return events


def done_event(job_id: str, call_id: str, record: CallRecord, tool: dict, resolved: dict, result: Any,
               started: float, finished: float, *, source: str) -> CallFinished:
    """The `call.finished` event of an attempt that succeeded."""
    name = record.tool
    part = tool_result_part(
        call_id=call_id, name=name, content=result, is_error=False, source=source, locale=record.locale,
        display=tool.get("x-display"),
        technical=technical_details(name, arguments(resolved, tool), result, started, finished, "success"))
    return CallFinished(job_id=job_id, call_id=call_id, tool=name, status=CallStatus.DONE.value,
                        duration_ms=round((finished - started) * 1000, 3), part=part)
