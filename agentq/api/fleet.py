"""Fleet routes (README.md#the-http-api-and-the-web-page): tools, activities, health, readiness, metrics, and whom a
token acts for."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from agentq.api.deps import Authorized, app_parts, app_store, principal
from agentq.api.errors import ApiError
from agentq.api.models import ActivityModel, TenantModel, ToolsModel, responses
from agentq.api.wait_models import StatusModel
from agentq.errors import StoreUnavailableError
from agentq.protocol.compose import compose, composed_tools

router = APIRouter(tags=["fleet"])


@router.get("/v1/tools", name="list_tools",
            dependencies=[Authorized], summary="The composed solution schema, and each tool's activity",
            responses={200: {"model": ToolsModel}, **responses(401, 503)})
async def tools(request: Request) -> JSONResponse:
    jobs = app_parts(request).jobs

    def read() -> dict:
        available, known = jobs.available_tools(), jobs.known_activities()
        solution = compose(list(available.values()), sorted(known))
        info = {}
        for schema in composed_tools(solution):
            name = schema["properties"]["_tool"]["const"]
            activity = schema["properties"]["_activity"]["const"]
            entry = known.get(activity) if activity else None
            info[name] = {"activity": activity, "live": bool(entry and entry["live"]), "known": entry is not None}
        return {"solution": solution, "tools": info}

    return JSONResponse(await run_in_threadpool(read))


@router.get("/v1/activities", name="list_activities", dependencies=[Authorized],
            summary="Known activities: live or not, their workers, queue and last announcement",
            responses={200: {"model": dict[str, ActivityModel]}, **responses(401, 503)})
async def activities(request: Request) -> JSONResponse:
    return JSONResponse(await run_in_threadpool(app_parts(request).jobs.known_activities))


@router.get("/v1/me", name="get_me",
            dependencies=[Authorized], summary="The tenant and role of the token in use (docs/tenants.md)",
            responses={200: {"model": TenantModel},
                       **responses(401)})
async def me(request: Request) -> JSONResponse:
    who = principal(request)
    return JSONResponse({"tenant": who.tenant, "role": who.role.value})


@router.get("/v1/health", summary="200 while the process runs (no auth)", responses={200: {"model": StatusModel}})
async def health() -> JSONResponse:
    return JSONResponse({"status": "ok"})


@router.get("/v1/ready", dependencies=[Authorized], summary="200 when the state store answers, else 503",
            responses={200: {"model": StatusModel}, **responses(401, 503)})
async def ready(request: Request) -> JSONResponse:
    try:
        await app_store(request).ping()
    except StoreUnavailableError as error:
        raise ApiError(503, "StoreUnavailable", str(error), headers={"Retry-After": "5"}) from None
    return JSONResponse({"status": "ready"})


@router.get("/v1/examples", name="list_examples",
            dependencies=[Authorized], summary="The example jobs shipped with agentq, by name",
            responses={200: {"description": "name -> job"}, **responses(401)})
async def examples() -> JSONResponse:
    return JSONResponse(example_jobs())


def example_jobs() -> dict[str, Any]:
    """The packaged example jobs (`workers/jobs/*.json`) by file stem; none when that package is absent."""
    try:
        folder = resources.files("workers").joinpath("jobs")
        return {entry.name.removesuffix(".json"): json.loads(entry.read_text(encoding="utf-8"))
                for entry in sorted(folder.iterdir(), key=lambda e: e.name) if entry.name.endswith(".json")}
    except (ModuleNotFoundError, FileNotFoundError):
        return {}


@router.get("/metrics", name="get_metrics", dependencies=[Authorized], summary="Prometheus metrics (docs/metrics.md)",
            responses={200: {"description": "Prometheus text format", "content": {"text/plain": {}}},
                       **responses(401, 403)})
async def metrics(request: Request) -> Response:
    from agentq.metrics import render_metrics

    if not principal(request).is_admin:  # fleet-wide figures, every tenant's among them
        raise ApiError(403, "Forbidden", "the metrics are for admin tokens")
    body, content_type = await run_in_threadpool(render_metrics, app_parts(request))
    return Response(body, media_type=content_type)
