"""Event envelopes: what a job's event stream holds, as one tagged union (the tag is `event`).

Each envelope is a frozen record; `to_dict()` gives the stored JSON form `{"event": <name>, "job_id": ...,
<fields>, ["part"]}` and `parse_envelope` reads it back. `part` is a front-end part (seed 004) with its
technical details, which `agentq.protocol.events.strip_technical_details` removes before anything reaches a
front end.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar, cast

JSON = dict[str, Any]


@dataclass(frozen=True, kw_only=True, slots=True)
class _Envelope:
    name: ClassVar[str]
    #: fields left out of the JSON form while they are None
    optional: ClassVar[frozenset[str]] = frozenset()

    job_id: str
    part: JSON | None = None

    def to_dict(self) -> JSON:
        body: JSON = {"event": self.name, "job_id": self.job_id}
        for name in _field_names(type(self)):
            value = getattr(self, name)
            if value is None and name in self.optional:
                continue
            body[name] = value
        if self.part is not None:
            body["part"] = self.part
        return body


@dataclass(frozen=True, kw_only=True, slots=True)
class JobQueued(_Envelope):
    name = "job.queued"
    status: str = "queued"
    kind: str
    calls: int


@dataclass(frozen=True, kw_only=True, slots=True)
class JobStarted(_Envelope):
    name = "job.started"


@dataclass(frozen=True, kw_only=True, slots=True)
class JobFinished(_Envelope):
    name = "job.finished"
    optional = frozenset({"running"})
    status: str
    error: JSON | None = None
    running: list[str] | None = None  # a cancel: the calls still running, whose outcomes come after it


@dataclass(frozen=True, kw_only=True, slots=True)
class JobResumed(_Envelope):
    """An ended job runs again where it stopped (docs/resume.md): `run` is the number of the run it starts (the store
    step that resumes the job writes it), `previous` the status and error the last run ended with."""

    name = "job.resumed"
    optional = frozenset({"run"})
    status: str
    previous: JSON
    run: int | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class CallStarted(_Envelope):
    name = "call.started"
    optional = frozenset({"instance"})
    call_id: str
    tool: str
    attempt: int
    instance: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class CallAwaitingApproval(_Envelope):
    """A call is held for a reviewer (approve, edit or reject); its job does not end meanwhile."""

    name = "call.awaiting_approval"
    optional = frozenset({"instance"})
    call_id: str
    tool: str
    instance: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class CallWaiting(_Envelope):
    """A wait call (docs/waits.md) is open: what it waits for (`awaits`) and until when (`until`, RFC 3339; None:
    no timeout). It holds nothing while it waits."""

    name = "call.waiting"
    optional = frozenset({"instance"})
    call_id: str
    tool: str
    awaits: JSON
    until: str | None
    instance: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class CallRetrying(_Envelope):
    name = "call.retrying"
    call_id: str
    tool: str
    attempt: int
    error: JSON
    retry_in_s: float


@dataclass(frozen=True, kw_only=True, slots=True)
class CallFinished(_Envelope):
    name = "call.finished"
    optional = frozenset({"error", "absorbed", "after_cancel"})
    call_id: str
    tool: str
    status: str
    duration_ms: float
    error: JSON | None = None
    absorbed: bool | None = None
    after_cancel: bool | None = None  # the call ended after its job was canceled (set by the store's commit)


@dataclass(frozen=True, kw_only=True, slots=True)
class Thought(_Envelope):
    name = "thought"
    optional = frozenset({"after_cancel"})
    call_id: str | None = None
    after_cancel: bool | None = None  # published by a commit that came after the job's cancel


@dataclass(frozen=True, kw_only=True, slots=True)
class Thinking(_Envelope):
    """The summary of the model's thinking during a tick (extended thinking,
    docs/protocol.md#thinking-and-stop-reasons): a seed 004 `thought` part marked as the model's own (`display_info.id`
    "thinking"). Redacted thinking is never shown."""

    name = "thinking"
    tick: int


@dataclass(frozen=True, kw_only=True, slots=True)
class TickStarted(_Envelope):
    """An agent job asks the model for its next solution (`tick` counts from 1; `attempt` > 1 is a retry of
    the same request, `corrective` a request that sends an invalid solution back)."""

    name = "tick.started"
    tick: int
    attempt: int = 1
    corrective: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class TickFinished(_Envelope):
    """The model answered: how many calls the tick dispatched, the problems of its solution, its usage."""

    name = "tick.finished"
    tick: int
    calls: int
    problems: list[JSON]
    usage: dict[str, int]
    output: bool = False  # the solution carried the job's final output


@dataclass(frozen=True, kw_only=True, slots=True)
class Part(_Envelope):
    """A part an activity emitted through its context (progress, a chart, ...)."""

    name = "part"
    call_id: str | None = None


Envelope = (JobQueued | JobStarted | JobFinished | JobResumed | CallStarted | CallAwaitingApproval | CallRetrying
            | CallFinished
            | Thought | Thinking | TickStarted | TickFinished | Part | CallWaiting)

ENVELOPES: dict[str, type[_Envelope]] = {
    cls.name: cls for cls in (JobQueued, JobStarted, JobFinished, JobResumed, CallStarted, CallAwaitingApproval,
                              CallRetrying,
                              CallFinished, Thought, Thinking, TickStarted, TickFinished, Part, CallWaiting)
}

_FIELDS: dict[type, tuple[str, ...]] = {}


def _field_names(cls: type) -> tuple[str, ...]:
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(f.name for f in fields(cls) if f.name not in ("job_id", "part"))
    return names


def parse_envelope(data: JSON) -> Envelope:
    """The typed envelope of a stored JSON form (keys it does not know are ignored; raises KeyError for an
    unknown event name, TypeError for missing fields)."""
    cls = ENVELOPES[data["event"]]
    known = {name: data[name] for name in ("job_id", "part", *_field_names(cls)) if name in data}
    return cast(Envelope, cls(**known))  # each class of ENVELOPES is one of Envelope's members
