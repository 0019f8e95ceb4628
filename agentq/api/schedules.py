"""Schedule routes (docs/schedules.md): `/v1/schedules` lists them with their next runs and last job, `PUT` /
`GET` / `DELETE /v1/schedules/{name}`, and `pause`, `resume`, `trigger`. A tenant's token sees and changes its own
tenant's schedules (another tenant's is 404), an admin's all of them; a read token only reads."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from agentq.api.deps import Authorized, app_parts, principal
from agentq.api.errors import ApiError
from agentq.api.jobs import json_body
from agentq.api.models import responses
from agentq.api.wait_models import ScheduleListModel, ScheduleViewModel, TriggeredModel
from agentq.errors import ScheduleNotFoundError
from agentq.runtime.schedules import Schedules

router = APIRouter(prefix="/v1/schedules", tags=["schedules"])

SCHEDULE_SCHEMA = {"title": "Schedule", "type": "object", "required": ["job"], "properties": {
    "cron": {"type": "string", "description": 'a cron expression, "0 8 * * 1-5" (or every_s)'},
    "every_s": {"type": "integer", "minimum": 1},
    "timezone": {"type": "string", "description": "an IANA time zone (default UTC)"},
    "job": {"type": "object", "description": "the job, as POST /v1/jobs takes it"},
    "overlap": {"enum": ["skip", "buffer_one", "allow"]},
    "catchup_window_s": {"type": "number", "minimum": 0}, "jitter_s": {"type": "number", "minimum": 0},
    "paused": {"type": "boolean"}, "tenant": {"type": "string", "description": "admin tokens only"}}}
VIEW: dict[int | str, dict[str, Any]] = {
    200: {"model": ScheduleViewModel, "description": "the schedule, its next_runs, last_job {id, status} and counts"}}


def _schedules(request: Request, *, write: bool = False) -> Schedules:
    who = principal(request)
    if write and not who.may_write:
        raise ApiError(403, "Forbidden", f"this token may only read (role {who.role.value!r})")
    return app_parts(request).schedules.for_principal(who)


async def _call(function: Any, *args: Any) -> Any:
    try:
        return await run_in_threadpool(function, *args)
    except ScheduleNotFoundError as error:
        raise ApiError(404, "ScheduleNotFound", str(error)) from None


@router.get("", dependencies=[Authorized], summary="The schedules this token sees, with next runs and last job",
            responses={200: {"model": ScheduleListModel}, **responses(401, 503)})
async def list_schedules(request: Request) -> JSONResponse:
    return JSONResponse({"schedules": await _call(_schedules(request).list)})


@router.put("/{name}", dependencies=[Authorized], summary="Set a schedule (checked whole first)",
            responses={**VIEW, **responses(400, 401, 403, 409, 422, 503)},
            openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
                "schema": SCHEDULE_SCHEMA}}}})
async def set_schedule(request: Request, name: str) -> JSONResponse:
    schedules = _schedules(request, write=True)
    _, body = await json_body(request)
    return JSONResponse(await _call(schedules.set, name, body))


@router.get("/{name}", dependencies=[Authorized], summary="A schedule", responses={**VIEW, **responses(401, 404, 503)})
async def get_schedule(request: Request, name: str) -> JSONResponse:
    return JSONResponse(await _call(_schedules(request).get, name))


@router.delete("/{name}", dependencies=[Authorized], summary="Delete a schedule (its jobs stay)",
               responses={204: {"description": "deleted"}, **responses(401, 403, 404, 503)})
async def delete_schedule(request: Request, name: str) -> Response:
    await _call(_schedules(request, write=True).delete, name)
    return Response(status_code=204)


@router.post("/{name}/pause", dependencies=[Authorized], summary="Pause a schedule: no slot fires until resumed",
             responses={**VIEW, **responses(401, 403, 404, 503)})
async def pause_schedule(request: Request, name: str) -> JSONResponse:
    return JSONResponse(await _call(_schedules(request, write=True).pause, name))


@router.post("/{name}/resume", dependencies=[Authorized], summary="Resume a schedule from its next slot",
             responses={**VIEW, **responses(401, 403, 404, 503)})
async def resume_schedule(request: Request, name: str) -> JSONResponse:
    return JSONResponse(await _call(_schedules(request, write=True).resume, name))


@router.post("/{name}/trigger", dependencies=[Authorized], summary="Submit the schedule's job now",
             responses={202: {"model": TriggeredModel}, **responses(401, 403, 404, 422, 429, 503)})
async def trigger_schedule(request: Request, name: str) -> JSONResponse:
    job_id = await _call(_schedules(request, write=True).trigger, name)
    return JSONResponse({"job_id": job_id}, status_code=202)
