"""The shapes the API documents in its OpenAPI document (docs/protocol.md#the-job-record,
README.md#the-http-api-and-the-web-page).

Routes answer with the dicts the job service builds (no second serialization); these models describe them
for `/openapi.json`, `/docs` and for clients generated from it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class ProblemModel(BaseModel):
    pointer: str = Field(description="JSON pointer of the offending value (\"\" for the whole document)")
    message: str


class ErrorInfo(BaseModel):
    type: str
    message: str
    problems: list[ProblemModel] = Field(default_factory=list)


class ErrorModel(BaseModel):
    error: ErrorInfo


class CallError(BaseModel):
    type: str
    message: str


class JobRecordModel(BaseModel):
    """The job record (docs/protocol.md#the-job-record)."""

    id: str
    status: Literal["scheduled", "waiting", "queued", "running", "awaiting_approval", "succeeded", "failed", "canceled"]
    tenant: str = "default"  # whose job it is (docs/tenants.md)
    result: Any = None
    state: Any = None
    instances: dict[str, Any] = Field(default_factory=dict)
    error: CallError | None = None
    usage: dict[str, Any] = Field(default_factory=dict)  # token counters, cost_usd, by_model (docs/protocol.md)
    created_at: str | None = None
    finished_at: str | None = None
    runs: list[dict[str, Any]] | None = None  # a resumed job's runs: run, started_at, finished_at, status, error
    continued_from: str | None = None  # the job a continuation continues (docs/continue-and-fork.md)
    thread: str | None = None  # the first job of a continuation's thread
    forked_from: str | None = None  # the job a fork replays
    fork: dict[str, Any] | None = None  # a fork's tick and its replayed ticks (at no cost)


class CallModel(BaseModel):
    """One call of a job (README.md#the-http-api-and-the-web-page `/calls`)."""

    id: str
    tool: str
    activity: str | None
    mode: str
    instance: str | None
    status: str | None
    attempts: int
    depends_on: list[str]
    output_path: str | None
    started_at: str | None
    finished_at: str | None
    duration_ms: float | None
    error: CallError | None
    params: dict[str, Any] = Field(default_factory=dict, description="the call's parameters as planned (no meta "
                                   "fields; references unresolved): what a call awaiting approval would do")
    route: str | None = Field(default=None, description='the rollout route its tool\'s rule gave it '
                              '(docs/rollouts.md): "<activity>@<version>", "" (the model) or "*" (the usual '
                              'resolution); absent: no rule')


class DeliveryAttempt(BaseModel):
    at: str
    status: int | None = Field(description="the receiver's HTTP status (null: no answer)")
    error: str | None = Field(description="why it was not delivered (null: a 2xx answer)")
    duration_ms: float


class DeliveryModel(BaseModel):
    """One webhook delivery of a job (docs/webhooks.md): one event, its stable `webhook-id` and every attempt."""

    id: str = Field(description="the `webhook-id` every attempt sends")
    job_id: str
    type: Literal["job.finished", "call.finished", "call.awaiting_approval"]
    url: str
    created_at: str
    state: Literal["pending", "delivered", "failed"]
    next_attempt_at: str | None
    attempts: list[DeliveryAttempt]


class HistoryModel(BaseModel):
    """A job's history message (seed 004): parts in chronological order, and the legacy activity list."""

    role: Literal["assistant"]
    parts: list[dict[str, Any]]
    activity_parts: list[dict[str, Any]]


class ToolInfo(BaseModel):
    activity: str = Field(description="the activity that runs the tool's calls; \"\" when they run latent")
    live: bool = Field(description="a worker serves that activity now")
    known: bool = Field(description="a worker announced that activity within AGENTQ_ACTIVITY_MEMORY_S")


class ToolsModel(BaseModel):
    solution: dict[str, Any] = Field(description="the composed solution schema (docs/protocol.md#activities)")
    tools: dict[str, ToolInfo]


class ActivityModel(BaseModel):
    model_config = ConfigDict(extra="allow")

    live: bool
    workers: list[str]
    queue: str | None = None
    last_seen: str
    activity: str | None = Field(default=None, description="the activity's name (the key sendEmail@2 is a version)")
    version: str | None = Field(default=None, description='the version this entry is (docs/rollouts.md; "1" '
                                "unless registered with another)")


class RejectBody(BaseModel):
    reason: str | None = Field(default=None, max_length=2000)


class EditBody(BaseModel):
    params: dict[str, Any] = Field(description="the call's new parameters (meta fields stay as they were)")


JOB_BODY_SCHEMA: dict[str, Any] = {
    "title": "Job",
    "type": "object",
    "description": "A job (docs/protocol.md#jobs): an agent job has no `calls`; a plan job names its calls.",
    "properties": {
        "context": {"type": "array", "items": {"type": "object"},
                    "description": "messages (docs/protocol.md#messages)"},
        "tools": {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "object"}]}},
        "output": {"type": "object", "description": "JSON Schema of the final output"},
        "calls": {"type": "array", "items": {"type": "object"}},
        "options": {"type": "object", "properties": {
            "max_ticks": {"type": "integer"}, "model": {"type": "string"},
            "approval": {"type": "array", "items": {"type": "string"}}, "ttl_s": {"type": "integer"},
            "locale": {"type": "string"}, "deadline_s": {"type": "number", "exclusiveMinimum": 0}}},
    },
}


class EventModel(BaseModel):
    """One event of a job's stream (docs/protocol.md#events): the `data` of each server-sent event."""

    model_config = ConfigDict(extra="allow")

    event: str = Field(description="job.queued, job.started, tick.started, call.started, call.awaiting_approval, "
                                   "call.finished, part, job.finished, ...")
    job_id: str
    call_id: str | None = None
    tool: str | None = None
    status: str | None = None
    part: dict[str, Any] | None = Field(default=None, description="the front-end part (seed 004's "
                                        "ActivityOutputPart or a text part)")


class TenantModel(BaseModel):
    """Whom a token acts for (docs/tenants.md)."""

    tenant: str
    role: Literal["admin", "submit", "read"]


class RolloutRouteStats(BaseModel):
    model_config = ConfigDict(extra="allow")

    route: str
    calls: int


class RolloutToolReport(BaseModel):
    model_config = ConfigDict(extra="allow")

    rule: dict[str, Any] | None = None
    routes: list[RolloutRouteStats]


class RolloutReportModel(BaseModel):
    """Per tool, its routes side by side (docs/rollouts.md)."""

    tools: dict[str, RolloutToolReport]


#: shapes the document names without a route answering them as JSON (events travel as server-sent events)
EXTRA_MODELS: tuple[type[BaseModel], ...] = (EventModel,)


def responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The documented error answers of a route."""
    described = {400: "malformed JSON", 401: "no or a wrong token", 403: "a cookie-authorized change from "
                 "another site", 404: "unknown job or call", 409: "conflict", 410: "the job's data expired with "
                 "its ttl_s", 413: "body over AGENTQ_MAX_JOB_BYTES", 422: "invalid job or request",
                 429: "a tenant's limit refused the job: nothing was written; submit again after Retry-After",
                 503: "the state store is unreachable"}
    retry = {"Retry-After": {"description": "seconds to wait before trying again", "schema": {"type": "integer"}}}
    return {s: {"model": ErrorModel, "description": described[s], **({"headers": retry} if s in (429, 503) else {})}
            for s in statuses}
