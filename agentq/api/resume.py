"""`POST /v1/jobs/{id}/resume {"options"?}` (docs/resume.md): a failed, canceled or deadline-exceeded job runs again
where it stopped. 409 for a job that succeeded or runs, 410 once its data expired, 404 for another tenant's job, 422
with every problem's pointer for bad options, 403 for a read-only token; nothing is written then."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from agentq.api.continuation_models import ResumeBody, body_of
from agentq.api.deps import Authorized, app_parts, app_store, visible_job
from agentq.api.errors import ApiError
from agentq.api.jobs import json_body
from agentq.api.models import ErrorModel, JobRecordModel, responses
from agentq.engine.job_lookup import readable
from agentq.errors import Problem

router = APIRouter(tags=["jobs"], dependencies=[Authorized])

_SHAPE = "a resume's body is {\"options\"?: {...}}"
_GONE: dict[int | str, dict[str, Any]] = {
    410: {"model": ErrorModel, "description": "the job's data expired with its ttl_s"}}


@router.post("/v1/jobs/{job_id}/resume", summary="Resume a failed, canceled or deadline-exceeded job where it stopped",
             responses={200: {"model": JobRecordModel}, **responses(400, 401, 403, 404, 409, 422, 503), **_GONE},
             openapi_extra=body_of(ResumeBody, required=False))
async def resume_job(request: Request, job_id: str) -> JSONResponse:
    parts = app_parts(request)
    await run_in_threadpool(readable, parts.store, job_id)  # 410 once its data expired
    await visible_job(request, job_id, write=True)  # 404 for another tenant's job (or 403) before anything else
    _, body = await json_body(request, required=False)
    options = _options_of(body)
    await run_in_threadpool(parts.jobs.resume, job_id, options)
    return JSONResponse((await app_store(request).record(job_id)).to_dict())


def _options_of(body: Any) -> Any:
    """A resume's option overrides: the body's `options` (no body: none)."""
    if body is None:
        return None
    if not isinstance(body, dict):
        raise ApiError(422, "InvalidRequest", _SHAPE, [Problem("", "not a JSON object")])
    if unknown := sorted(set(body) - {"options"}):
        raise ApiError(422, "InvalidRequest", _SHAPE,
                       [Problem(f"/{k}", "unknown field; a resume takes options") for k in unknown])
    return body.get("options")
