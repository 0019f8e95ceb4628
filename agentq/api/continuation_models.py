"""The shapes of continue, fork, resume, threads and forks in the OpenAPI document (docs/continue-and-fork.md,
docs/resume.md). The routes read their bodies themselves (one 422 naming every problem); these describe them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agentq.api.models import JobRecordModel


class ContinueBody(BaseModel):
    """What a continuation adds to the ended job's conversation."""

    model_config = ConfigDict(extra="forbid")

    context: list[dict[str, Any]] = Field(min_length=1, description="the new messages (docs/protocol.md#messages)")
    options: dict[str, Any] | None = Field(default=None, description="the old job's options with these on top")


class ForkBody(BaseModel):
    """Where a fork leaves its source, and what it changes from there on."""

    model_config = ConfigDict(extra="forbid")

    at_tick: int = Field(ge=0, description="the ticks replayed from the source (their answers and outputs, at no "
                                           "cost) before the fork runs live")
    options: dict[str, Any] | None = Field(default=None, description="the source's options with these on top")
    tools: list[str | dict[str, Any]] | None = Field(default=None, description="the tools, replacing the source's")
    context: list[dict[str, Any]] | None = Field(default=None, description="the first messages, replacing the "
                                                                           "source's")


class ResumeBody(BaseModel):
    """Overrides of the job's options for the resumed run (a larger budget, a new deadline)."""

    model_config = ConfigDict(extra="forbid")

    options: dict[str, Any] | None = None


class LinkedJob(BaseModel):
    """One job of a thread or of a job's forks: the messages it added and its record."""

    id: str
    kind: Literal["agent", "plan"]
    messages: list[dict[str, Any]] = Field(default_factory=list)
    record: JobRecordModel


class ThreadModel(BaseModel):
    """A thread's jobs in order: the first job, then each continuation."""

    thread: str
    jobs: list[LinkedJob]


class ForksModel(BaseModel):
    """A job's forks, oldest first."""

    job: str
    forks: list[LinkedJob]


def body_of(model: type[BaseModel], *, required: bool) -> dict[str, Any]:
    """The `openapi_extra` declaring a route's JSON body as `model` (named after it in the document)."""
    schema = {**model.model_json_schema(), "title": model.__name__}
    return {"requestBody": {"required": required, "content": {"application/json": {"schema": schema}}}}
