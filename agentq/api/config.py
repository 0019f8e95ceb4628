"""The fleet's shared settings (docs/config.md): `/v1/config` and `/v1/config/{name}`, for admin tokens (they hold
every tenant's limits and rule the whole fleet)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from agentq.api.deps import Authorized, app_parts, principal
from agentq.api.errors import ApiError
from agentq.api.jobs import json_body
from agentq.api.models import responses
from agentq.runtime.fleet_config import unknown_name

router = APIRouter(prefix="/v1/config", tags=["config"])

_ENTRY = '{"version": N (0: never set), "value": <JSON> (null: unset), "set_at", "source", "variable", "read_by"}'


def _admin(request: Request) -> None:
    if not principal(request).is_admin:
        raise ApiError(403, "Forbidden", "the fleet's config is for admin tokens")


def _known(name: str) -> None:
    if (problem := unknown_name(name)) is not None:
        raise ApiError(404, "NotFound", problem)


@router.get("", name="list_config",
            dependencies=[Authorized], summary="Every shared setting of the fleet, with its version",
            responses={200: {"description": '{"config": {"<name>": ' + _ENTRY + "}}"}, **responses(401, 403, 503)})
async def show_all(request: Request) -> JSONResponse:
    _admin(request)
    return JSONResponse({"config": await run_in_threadpool(app_parts(request).config.show)})


@router.get("/{name}", name="get_config",
            dependencies=[Authorized], summary="One shared setting of the fleet, with its version",
            responses={200: {"description": '{"name": ..., ' + _ENTRY[1:]}, **responses(401, 403, 404, 503)})
async def show(request: Request, name: str) -> JSONResponse:
    _admin(request)
    _known(name)
    shown = await run_in_threadpool(app_parts(request).config.show, name)
    return JSONResponse({"name": name, **shown[name]})


@router.put("/{name}", name="set_config", dependencies=[Authorized],
            summary="Set a shared setting (checked first; each set is a new version, read by every process within "
                    "a heartbeat)",
            responses={200: {"description": "the setting as stored, with its new version"},
                       **responses(400, 401, 403, 404, 422, 503)},
            openapi_extra={"requestBody": {"required": True, "content": {"application/json": {"schema": {}}}}})
async def set_value(request: Request, name: str) -> JSONResponse:
    _admin(request)
    _known(name)
    _, body = await json_body(request)
    entry = await run_in_threadpool(app_parts(request).config.set, name, body)
    return JSONResponse({"name": name, **entry})
