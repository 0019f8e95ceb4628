"""Rollout routes (docs/rollouts.md): the report and the tools' rules, for admin tokens (the rules route
every tenant's calls and the report counts them)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from agentq.api.deps import Authorized, app_parts, principal
from agentq.api.errors import ApiError
from agentq.api.jobs import json_body
from agentq.api.models import RolloutReportModel, responses

router = APIRouter(prefix="/v1/rollouts", tags=["rollouts"])

RULE_SCHEMA = {"title": "RolloutRule", "type": "object", "required": ["routes"], "properties": {"routes": {
    "type": "array", "items": {
    "type": "object", "required": ["to"], "properties": {
        "to": {"type": "string", "description": '"<activity>@<version>", or "" for the model'},
        "tenants": {"type": "array", "items": {"type": "string"}},
        "share": {"type": "number", "minimum": 0, "maximum": 1}}}}}}


def _admin(request: Request) -> None:
    if not principal(request).is_admin:
        raise ApiError(403, "Forbidden", "rollouts are for admin tokens")


@router.get("", name="get_rollout_report",
            dependencies=[Authorized], summary="Per tool and route: calls, success rate, p50/p95 duration, cost",
            responses={200: {"model": RolloutReportModel},
                       **responses(401, 403, 503)})
async def report(request: Request) -> JSONResponse:
    _admin(request)
    return JSONResponse(await run_in_threadpool(app_parts(request).rollouts.report))


@router.put("/{tool}", name="set_rollout_rule",
            dependencies=[Authorized], summary="Set a tool's rollout rule (checked first)",
            responses={200: {"description": "the rule as stored"}, **responses(400, 401, 403, 422, 503)},
            openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
                "schema": RULE_SCHEMA}}}})
async def set_rule(request: Request, tool: str) -> JSONResponse:
    _admin(request)
    _, body = await json_body(request)
    rule = await run_in_threadpool(app_parts(request).rollouts.set, tool, body)
    return JSONResponse({"tool": tool, **rule.to_dict()})


@router.delete("/{tool}", name="clear_rollout_rule", dependencies=[Authorized], summary="Clear a tool's rollout rule",
               responses={204: {"description": "cleared"}, **responses(401, 403, 404, 503)})
async def clear_rule(request: Request, tool: str) -> Response:
    _admin(request)
    if not await run_in_threadpool(app_parts(request).rollouts.clear, tool):
        raise ApiError(404, "NotFound", f"tool {tool!r} has no rollout rule")
    return Response(status_code=204)
