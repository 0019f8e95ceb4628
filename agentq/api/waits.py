"""Signals and events in (docs/waits.md): `POST /v1/jobs/{id}/signals/{name}` sends a signal to one job (kept until
a `waitForSignal` of that name takes it), `POST /v1/events` an event to the caller's tenant (delivered to every open
`waitForEvent` of that tenant it matches). Read-only tokens cannot send; another tenant's job is not found."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from agentq.api.deps import Authorized, app_parts, principal, visible_job
from agentq.api.errors import ApiError
from agentq.api.jobs import json_body
from agentq.api.models import responses
from agentq.api.wait_models import EVENT_BODY_SCHEMA, SIGNAL_BODY_SCHEMA, EventSentModel, SignalSentModel
from agentq.errors import Problem

router = APIRouter(tags=["waits"], dependencies=[Authorized])


@router.post("/v1/jobs/{job_id}/signals/{name}", summary="Send a signal to a job (kept until a waitForSignal takes it)",
             responses={200: {"model": SignalSentModel}, **responses(400, 401, 403, 404, 409, 422, 503)},
             openapi_extra={"requestBody": {"required": False, "content": {"application/json": {
                 "schema": SIGNAL_BODY_SCHEMA}}}})
async def send_signal(request: Request, job_id: str, name: str) -> JSONResponse:
    await visible_job(request, job_id, write=True)  # 404 (or 403) before anything else
    _, body = await json_body(request, required=False)
    data = _data_of(body)
    return JSONResponse(await run_in_threadpool(app_parts(request).jobs.signal, job_id, name, data))


@router.post("/v1/events", summary="Send an event to the open waitForEvent calls of your tenant that match it",
             responses={200: {"model": EventSentModel}, **responses(400, 401, 403, 422, 503)},
             openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
                 "schema": EVENT_BODY_SCHEMA}}}})
async def send_event(request: Request) -> JSONResponse:
    who = principal(request)
    if not who.may_write:
        raise ApiError(403, "Forbidden", f"this token may only read (role {who.role.value!r})")
    _, body = await json_body(request)
    return JSONResponse(await run_in_threadpool(app_parts(request).jobs.send_event, body, tenant=who.tenant))


def _data_of(body: Any) -> Any:
    """A signal's data: the body's `data` (no body: null)."""
    if body is None:
        return None
    if not isinstance(body, dict) or set(body) - {"data"}:
        raise ApiError(422, "InvalidRequest", "a signal's body is {\"data\": <any JSON>}",
                       [Problem(f"/{k}", "unknown field; a signal has data") for k in sorted(set(body) - {"data"})]
                       if isinstance(body, dict) else [Problem("", "not a JSON object")])
    return body.get("data")
