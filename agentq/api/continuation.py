"""Continue and fork routes (docs/continue-and-fork.md): `POST /v1/jobs/{id}/continue` and `/fork` (201 with the new
job's record, as a submission), `GET /v1/jobs/{id}/forks` and `GET /v1/threads/{thread}`.

Another tenant's job (or thread) is not found (404), one whose data expired is 410, one that cannot be continued
409, a bad request 422 naming every problem by its pointer; nothing is written on any of them. The writes run in
the server's thread pool through `runtime/continuation.py`, as submissions do through the job service.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from agentq.api.continuation_models import ContinueBody, ForkBody, ForksModel, ThreadModel, body_of
from agentq.api.deps import Authorized, app_parts, app_store, principal
from agentq.api.errors import ApiError
from agentq.api.jobs import json_body
from agentq.api.models import ErrorModel, JobRecordModel, responses
from agentq.runtime.continuation import Continuations

router = APIRouter(tags=["continue and fork"], dependencies=[Authorized])

_GONE: dict[int | str, dict[str, Any]] = {410: {"model": ErrorModel, "description": "the job's data expired (ttl_s)"}}
_CREATED: dict[int | str, dict[str, Any]] = {201: {"model": JobRecordModel, "description": "the new job"}}


def _copies(request: Request) -> Continuations:
    return Continuations(app_parts(request).jobs)


async def _created(request: Request, job_id: str) -> JSONResponse:
    record = await app_store(request).record(job_id)
    return JSONResponse(record.to_dict(), status_code=201, headers={"Location": f"/v1/jobs/{job_id}"})


def _writer(request: Request) -> Any:
    who = principal(request)
    if not who.may_write:
        raise ApiError(403, "Forbidden", f"this token may only read (role {who.role.value!r})")
    return who


@router.post("/v1/jobs/{job_id}/continue", status_code=201, summary="Continue an ended agent job's conversation",
             responses={**_CREATED, **responses(400, 401, 403, 404, 409, 422, 503), **_GONE},
             openapi_extra=body_of(ContinueBody, required=True))
async def continue_job(request: Request, job_id: str) -> JSONResponse:
    who = _writer(request)
    _, body = await json_body(request)
    new_id = await run_in_threadpool(_copies(request).continue_job, job_id, body, visible=who.sees)
    return await _created(request, new_id)


@router.post("/v1/jobs/{job_id}/fork", status_code=201, summary="Fork an agent job: replay its first ticks, then run "
             "live with changes", responses={**_CREATED, **responses(400, 401, 403, 404, 422, 503), **_GONE},
             openapi_extra=body_of(ForkBody, required=True))
async def fork_job(request: Request, job_id: str) -> JSONResponse:
    who = _writer(request)
    _, body = await json_body(request)
    new_id = await run_in_threadpool(_copies(request).fork, job_id, body, visible=who.sees)
    return await _created(request, new_id)


@router.get("/v1/jobs/{job_id}/forks", summary="A job's forks, oldest first",
            responses={200: {"model": ForksModel}, **responses(401, 404, 503), **_GONE})
async def job_forks(request: Request, job_id: str) -> JSONResponse:
    who = principal(request)
    return JSONResponse(await run_in_threadpool(_copies(request).forks, job_id, visible=who.sees))


@router.get("/v1/threads/{thread}", summary="A thread's jobs in order: the first job and each continuation",
            responses={200: {"model": ThreadModel}, **responses(401, 404, 503)})
async def thread_jobs(request: Request, thread: str) -> JSONResponse:
    who = principal(request)
    return JSONResponse(await run_in_threadpool(_copies(request).thread, thread, visible=who.sees))
