"""A job's event stream as server-sent events (docs/protocol.md#events, README.md#the-http-api-and-the-web-page; seed
004), resumable without loss or duplicates.

`GET /v1/jobs/{id}/events` sends, after a `retry:` hint, one message per stored event: `id:` the stream entry
id, `event:` the envelope's name, `data:` the envelope without technical details. It ends after
`job.finished`. A reconnecting client sends the last id it received (`Last-Event-ID`, as a browser's
EventSource does, or `?after=`) and gets exactly the entries after it; resuming after the final event answers
204 (an EventSource then stops reconnecting). Comments keep an idle connection open (every 15 s).

`?format=parts` sends seed 004's streaming parts instead: `data:` an ActivityOutputPart (or a text part),
followed by its legacy `__STREAM_ACTIVITY__` marker unless `?markers=false`. An activity's part and its marker
are two messages of one entry: the part's id is `<entry>;part` and the marker's `<entry>`, so a client that
lost the connection between them resumes with just the marker.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.sse import EventSourceResponse, ServerSentEvent

from agentq.api.deps import AuthorizedOrQuery, app_parts, app_store, visible_job
from agentq.api.errors import ApiError, NoContent
from agentq.api.models import responses
from agentq.errors import AgentQError, Problem
from agentq.protocol.events import strip_technical_details
from agentq.protocol.history import stream_marker

log = logging.getLogger("agentq.api")

router = APIRouter(tags=["events"])

_CURSOR = re.compile(r"^(\d{1,20}(?:-\d{1,20})?)(;part)?$")
_PART = ";part"


@dataclass(frozen=True)
class Resume:
    """Where a stream starts: after entry `after`; `marker_of` is an entry whose part was sent but whose
    marker was not."""

    job_id: str
    after: str
    marker_of: str | None
    format: str
    markers: bool


async def _resume(request: Request, job_id: str,
                  after: Annotated[str | None, Query(max_length=64, description="resume after this event id")] = None,
                  format: Literal["envelopes", "parts"] = "envelopes",
                  markers: Annotated[bool, Query(description="with format=parts: the legacy __STREAM_ACTIVITY__ "
                                                             "markers")] = True,
                  last_event_id: Annotated[str | None, Header(alias="Last-Event-ID", max_length=64)] = None,
                  ) -> Resume:
    """Check the job and the resume position before the stream starts (errors are still plain answers)."""
    cursor, where = (last_event_id, "/headers/Last-Event-ID") if last_event_id else (after, "/query/after")
    after_id, marker_of = _position(cursor, where, with_markers=format == "parts" and markers)
    store = app_store(request)
    await visible_job(request, job_id)
    status = await store.job_status(job_id)
    if status.is_final and marker_of is None and cursor and not await store.read_events(job_id, after_id, count=1):
        raise NoContent()
    return Resume(job_id, after_id, marker_of, format, markers)


def _position(cursor: str | None, where: str, *, with_markers: bool) -> tuple[str, str | None]:
    """The entry a stream resumes after (`0-0`: from the start) and, when the client got an activity's part but not
    its marker, that entry (`<entry>;part`); 422 for a cursor that is no entry id of a stream (at `where`)."""
    if not cursor:
        return "0-0", None
    match = _CURSOR.match(cursor.strip())
    if match is None:
        raise ApiError(422, "InvalidRequest", "not an event id of this stream",
                       [Problem(where, "expected a stream entry id such as 1700000000000-0")])
    after_id = match.group(1)
    return after_id, after_id if match.group(2) and with_markers else None


@router.get("/v1/jobs/{job_id}/events", response_class=EventSourceResponse, dependencies=[AuthorizedOrQuery],
            summary="A job's events as server-sent events (resumable)",
            responses={200: {"description": "text/event-stream: each message's data is an Event", "content": {
                           "text/event-stream": {"schema": {"$ref": "#/components/schemas/EventModel"}}}},
                       204: {"description": "nothing after that id: the job ended"}, **responses(401, 404, 422, 503)})
async def job_events(request: Request, resume: Annotated[Resume, Depends(_resume)]) -> AsyncIterator[ServerSentEvent]:
    store = app_store(request)
    yield ServerSentEvent(retry=app_parts(request).settings.api_sse_retry_ms)
    try:
        if resume.marker_of is not None:
            envelope = await store.event(resume.job_id, resume.marker_of)
            if envelope is not None and _is_activity(envelope.get("part")):
                yield ServerSentEvent(raw_data=_json(stream_marker(envelope["part"])), id=resume.marker_of)
        async for entry_id, envelope in store.events(resume.job_id, resume.after):
            for message in _messages(entry_id, envelope, resume):
                yield message
    except AgentQError as error:  # the store went away mid-stream: end it; the client resumes from its last id
        log.warning("event stream of job %s ended early: %s", resume.job_id, error)


def _messages(entry_id: str, envelope: dict, resume: Resume) -> list[ServerSentEvent]:
    if resume.format == "envelopes":
        body = {**envelope, "part": strip_technical_details(envelope["part"])} if "part" in envelope else envelope
        return [ServerSentEvent(raw_data=_json(body), event=str(envelope.get("event", "")), id=entry_id)]
    part = envelope.get("part")
    if not isinstance(part, dict):
        return []
    if resume.markers and _is_activity(part):
        return [ServerSentEvent(raw_data=_json(strip_technical_details(part)), id=entry_id + _PART),
                ServerSentEvent(raw_data=_json(stream_marker(part)), id=entry_id)]
    return [ServerSentEvent(raw_data=_json(strip_technical_details(part)), id=entry_id)]


def _is_activity(part: object) -> bool:
    return isinstance(part, dict) and part.get("type") == "activity"


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
