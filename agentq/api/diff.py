"""`GET /v1/jobs/{a}/diff/{b}`: two jobs compared side by side (docs/compare.md), and the shape of its answer.

The answer is `protocol/job_diff.py`'s `JobDiff.to_dict()`, read by `engine/job_compare.py` in the server's
thread pool (a few short reads of each job: record, calls, events). Either job unknown, or another tenant's,
is a 404 naming which side (`/a`, `/b`); a job whose data expired with its `ttl_s` is a 410.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from agentq.api.deps import Authorized, app_parts, principal
from agentq.api.errors import ApiError
from agentq.api.models import CallError, ErrorModel, responses
from agentq.engine.job_compare import compare_jobs, missing_sides, sides_error
from agentq.errors import JobExpiredError

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], dependencies=[Authorized])


class ChangeModel(BaseModel):
    pointer: str = Field(description="JSON pointer of the value that differs (\"\" for the whole value)")
    kind: Literal["added", "removed", "changed"] = Field(description="added: only B has it; removed: only A")
    a: Any = Field(default=None, description="A's value (null where A has none)")
    b: Any = Field(default=None, description="B's value (null where B has none)")


class JsonDiffModel(BaseModel):
    """A structural diff of two JSON values by pointer."""

    same: bool
    changes: list[ChangeModel]
    truncated: bool = Field(description="only the first 200 changes are listed")


class FigureModel(BaseModel):
    a: float | None
    b: float | None
    delta: float | None = Field(description="b - a; null when either side has no figure")


class SideModel(BaseModel):
    """One job as the diff shows it."""

    id: str
    status: str
    tenant: str
    error: CallError | None
    created_at: str | None
    finished_at: str | None
    duration_ms: float | None = Field(description="from submission to the end; null while it runs")
    models: list[str] = Field(description="the models its requests went to")
    usage: dict[str, Any] = Field(description="requests, token counters and cost_usd, as in the job record")
    calls: int
    forked_from: str | None = Field(default=None, description="the job this one was forked from, if any")


class CallSideModel(BaseModel):
    id: str
    status: str | None
    attempts: int
    duration_ms: float | None
    output_path: str | None
    error: CallError | None
    params: dict[str, Any]
    output: Any = Field(default=None, description="what the call returned (null: none; see has_output)")
    has_output: bool


class CallPairModel(BaseModel):
    """The n-th call of a tool (and instance) on each side."""

    tool: str
    instance: str | None
    n: int = Field(description="which call of this tool and instance, from 1")
    kind: Literal["same", "changed", "only_a", "only_b"]
    a: CallSideModel | None
    b: CallSideModel | None
    status_changed: bool
    error_changed: bool
    params: JsonDiffModel
    output: JsonDiffModel
    duration_ms: FigureModel


class JobDiffModel(BaseModel):
    """Two jobs compared side by side (docs/compare.md). `same`: the same outcome (status, error, final output,
    state, models, every call's status, error, parameters and output); cost and durations are compared, never a
    difference."""

    a: SideModel
    b: SideModel
    same: bool
    status_changed: bool
    error_changed: bool
    models_changed: bool
    result: JsonDiffModel = Field(description="the final output")
    state: JsonDiffModel
    usage: dict[str, FigureModel] = Field(description="requests, input_tokens, output_tokens, "
                                          "cache_creation_input_tokens, cache_read_input_tokens, cost_usd")
    duration_ms: FigureModel
    matched_by: Literal["tool_order"] = Field(description="calls are paired by tool, instance and order")
    call_counts: dict[str, int] = Field(description="pairs by kind: same, changed, only_a, only_b")
    replayed_calls: int = Field(default=0, description="the source's calls of the ticks a fork replayed, left out "
                                                       "of the pairs (a fork compared with the job it forks)")
    calls: list[CallPairModel]


@router.get("/{a}/diff/{b}", summary="Two jobs side by side: status, final output, state, calls, cost, duration",
            responses={200: {"model": JobDiffModel}, **responses(401, 404, 503),
                       410: {"model": ErrorModel, "description": "a job's data expired with its ttl_s"}})
async def diff_jobs(request: Request, a: str, b: str) -> JSONResponse:
    store, who = app_parts(request).store, principal(request)
    missing = await run_in_threadpool(missing_sides, store, a, b, sees=who.sees)
    if missing:
        expired = all(isinstance(error, JobExpiredError) for _, error in missing)
        raise ApiError(410 if expired else 404, "JobExpired" if expired else "JobNotFound",
                       f"cannot compare the jobs: {sides_error(missing)}", [problem for problem, _ in missing])
    diff = await run_in_threadpool(compare_jobs, store, a, b, sees=who.sees)
    return JSONResponse(diff.to_dict())
