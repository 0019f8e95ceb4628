"""The calls view of a job (the HTTP API's `GET /v1/jobs/{id}/calls`, README.md#the-http-api-and-the-web-page;
`JobHandle.calls()`, `agentq calls`).

One item per call, in the order of the calls' indexes:

    {"id", "tool", "activity", "mode", "instance", "status", "attempts", "depends_on", "output_path",
     "started_at", "finished_at", "duration_ms", "error", "params"}

- `depends_on`: the ids of the calls it waits on (the store keeps the other direction, `dependents`);
- `attempts`: attempts started so far (0 before the first);
- `started_at`: when its first attempt started (its first `call.started` event), `finished_at` when it ended
  (its `call.finished` event), ISO-8601 UTC like the job record's times; null until then. A call that never ran
  (rejected, skipped, canceled) has no `started_at`;
- `duration_ms`: what its `call.finished` event reports (the run of its last attempt); a call whose event
  reports none (a module call, timed by its child job) gets the time from `started_at` to `finished_at`;
- `error`: `{"type", "message"}` of a failed call (a rejection included), else null;
- `params`: the call's parameters as planned (its fields but the meta fields `_tool`, `_outputPath`, ...;
  references unresolved, an edit's parameters once edited), so a reviewer sees what a call awaiting approval
  would do; parameters its tool marks `x-sensitive` are masked, as everywhere agentq shows a call.

Read-only: built from `Store.call_table` and the job's event stream (events relayed from a module's child job
are not the job's own calls and are skipped).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic, Protocol, TypeVar

from agentq.errors import CallNotFoundError
from agentq.protocol.envelopes import CallFinished, CallStarted, Envelope, parse_envelope
from agentq.protocol.sensitive import mask, sensitive_paths
from agentq.store.contracts import CallStore, EventStore, JobStore


class CallViewStore(CallStore, EventStore, JobStore, Protocol):
    """What the calls view reads."""

CALL_FIELDS = ("id", "tool", "activity", "mode", "instance", "status", "attempts", "depends_on", "output_path",
               "started_at", "finished_at", "duration_ms", "error", "params")
_BATCH = 1000


def job_calls(store: CallViewStore, job_id: str) -> list[dict[str, Any]]:
    """The calls view of a job: the HTTP API's `/calls` items (see the module's docstring). Raises
    `JobNotFoundError` for an unknown job."""
    table = store.call_table(job_id)
    depends_on = _depends_on(table.dependents)
    times = _call_times(store, job_id, set(table.records))
    tools = store.job_tools(job_id)
    hidden = {name: sensitive_paths(schema) for name, schema in tools.items()}
    items = []
    for record in sorted(table.records.values(), key=lambda r: (r.index, r.id)):
        started, finished = times.get(record.id, (None, None))
        status = table.statuses.get(record.id)
        duration, error = _ended(started, finished)
        output_path = record.call.get("_outputPath")
        items.append({
            "id": record.id, "tool": record.tool, "activity": record.activity, "mode": record.mode.value,
            "instance": record.instance, "status": status.value if status is not None else None,
            "attempts": table.attempts.get(record.id, 0),
            "depends_on": sorted(depends_on.get(record.id, ()), key=lambda c: _index(table.records, c)),
            "output_path": output_path if isinstance(output_path, str) else None,
            "started_at": _iso(started), "finished_at": _iso(finished), "duration_ms": duration, "error": error,
            "params": mask({key: value for key, value in record.call.items() if not key.startswith("_")},
                           hidden.get(record.tool, ())),
        } | ({"route": record.route} if record.route is not None else {}))  # its tool's route (docs/rollouts.md)
    return items


def _depends_on(dependents: dict[str, list[str]]) -> dict[str, list[str]]:
    """Call id -> the calls it waits on (the store keeps the other direction: the calls waiting on each)."""
    depends_on: dict[str, list[str]] = {}
    for call_id, waiting in dependents.items():
        for dependent in waiting:
            depends_on.setdefault(dependent, []).append(call_id)
    return depends_on


def _ended(started: _Seen[CallStarted] | None,
           finished: _Seen[CallFinished] | None) -> tuple[float | None, dict[str, Any] | None]:
    """A call's duration in ms and its error, once it finished (the time between its events when the finishing
    event tells none)."""
    if finished is None:
        return None, None
    duration = finished.event.duration_ms
    if not duration and started is not None:
        duration = round((finished.at - started.at).total_seconds() * 1000, 3)
    return duration, finished.event.error or None


def job_call(store: CallViewStore, job_id: str, call_id: str) -> dict[str, Any]:
    """One item of the calls view; `CallNotFoundError` when the job has no such call."""
    for item in job_calls(store, job_id):
        if item["id"] == call_id:
            return item
    raise CallNotFoundError(f"job {job_id!r} has no call {call_id!r}")


def _index(records: dict, call_id: str) -> tuple[int, str]:
    record = records.get(call_id)
    return (record.index if record is not None else -1, call_id)


_E = TypeVar("_E", CallStarted, CallFinished)


@dataclass(frozen=True)
class _Seen(Generic[_E]):
    """A call's event and its time: the time of its part, else of its stream entry."""

    event: _E
    at: datetime


def _call_times(store: CallViewStore, job_id: str,
                calls: set[str]) -> dict[str, tuple[_Seen[CallStarted] | None, _Seen[CallFinished] | None]]:
    """Call id -> (its first `call.started`, its last `call.finished`)."""
    started: dict[str, _Seen[CallStarted]] = {}
    finished: dict[str, _Seen[CallFinished]] = {}
    after = "0-0"
    while True:
        batch = store.read_events(job_id, after, count=_BATCH)
        for entry_id, envelope in batch:
            after = entry_id
            if envelope.get("call_id") not in calls or "relayed_from" in envelope:
                continue
            match event := _parsed(envelope):
                case CallStarted(call_id=call_id) if call_id not in started:
                    started[call_id] = _Seen(event, _event_time(entry_id, envelope))
                case CallFinished(call_id=call_id):
                    finished[call_id] = _Seen(event, _event_time(entry_id, envelope))
        if len(batch) < _BATCH:
            break
    return {c: (started.get(c), finished.get(c)) for c in started.keys() | finished.keys()}


def _parsed(envelope: dict[str, Any]) -> Envelope | None:
    """The typed envelope of a stored one (None for one this version does not know)."""
    try:
        return parse_envelope(envelope)
    except (KeyError, TypeError):
        return None


def _event_time(entry_id: str, envelope: dict) -> datetime:
    part = envelope.get("part")
    stamp = part.get("timestamp") if isinstance(part, dict) else None
    if isinstance(stamp, str):
        try:
            moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
            return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
        except ValueError:
            pass
    milliseconds = int(entry_id.partition("-")[0] or 0)  # a Redis stream id starts with the server's ms time
    return datetime.fromtimestamp(milliseconds / 1000, UTC)


def _iso(seen: _Seen[Any] | None) -> str | None:
    if seen is None:
        return None
    return seen.at.isoformat(timespec="microseconds").replace("+00:00", "Z")
