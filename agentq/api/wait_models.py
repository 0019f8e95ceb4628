"""The shapes of the waits' and schedules' routes in the OpenAPI document (docs/waits.md, docs/schedules.md), and
the small answers of the fleet's routes: what generated clients type those answers and bodies as."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

SIGNAL_BODY_SCHEMA: dict[str, Any] = {
    "title": "SignalBody", "type": "object", "additionalProperties": False,
    "properties": {"data": {"description": "any JSON: what the waitForSignal call's output holds as `data`"}}}

EVENT_BODY_SCHEMA: dict[str, Any] = {
    "title": "EventBody", "type": "object", "required": ["name"], "properties": {
        "name": {"type": "string", "description": "the event's name, what a waitForEvent's `event` names"},
        "data": {"description": "any JSON: what a waitForEvent's `match` pointers look into"},
        "id": {"type": "string", "description": "an id sent again within a day is not delivered again"}}}


class SignalModel(BaseModel):
    name: str
    data: Any = None
    id: str
    time: str


class SignalSentModel(BaseModel):
    """A signal kept with the job until a waitForSignal of its name takes it."""

    signal: SignalModel
    taken: bool = Field(description="a waiting waitForSignal took it now")


class EventSentModel(BaseModel):
    id: str
    woken: int = Field(description="how many open waitForEvent calls it woke")


class LastJobModel(BaseModel):
    id: str
    status: str = Field(description='the job\'s status ("expired" once its data is gone)')


class ScheduleViewModel(BaseModel):
    """A schedule: its definition, its next runs (RFC 3339 UTC, none while paused), its last job and counts."""

    model_config = ConfigDict(extra="allow")

    name: str
    job: dict[str, Any]
    next_runs: list[str]
    last_job: LastJobModel | None = None
    pending: str | None = None
    counts: dict[str, int] = Field(default_factory=dict, description="fired, skipped, missed, failed")
    error: Any = None


class ScheduleListModel(BaseModel):
    schedules: list[ScheduleViewModel]


class TriggeredModel(BaseModel):
    job_id: str


class StatusModel(BaseModel):
    status: str
