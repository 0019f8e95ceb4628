"""Job routes (README.md#the-http-api-and-the-web-page): submit, list, read, cancel, calls, approvals, history, webhook
deliveries (docs/webhooks.md).

Writes go through the shared `JobService` (run in the server's thread pool: each is a few short Redis round
trips and a broker publish); reads that may wait or scan use the async store, so they hold no thread.
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from agentq.api.deps import Authorized, app_parts, app_store, principal, visible_job
from agentq.api.errors import ApiError
from agentq.api.models import (
    JOB_BODY_SCHEMA,
    CallModel,
    DeliveryModel,
    EditBody,
    HistoryModel,
    JobRecordModel,
    RejectBody,
    responses,
)
from agentq.engine.call_views import job_call, job_calls
from agentq.errors import JobExistsError, Problem
from agentq.protocol.jsonsafe import text_depth_problem
from agentq.protocol.records import JobRecord
from agentq.protocol.status import JobStatus
from agentq.protocol.tenants import DEFAULT_TENANT
from agentq.runtime.history import history_of
from agentq.store.aio import AsyncStateStore

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], dependencies=[Authorized])

_LIST_SCAN_LIMIT = 5000  # how many of the newest jobs a filtered listing looks through at most
IdempotencyKey = Annotated[str | None, Header(
    min_length=1, max_length=255, description="the same key returns the same job, as long as that job is kept "
                                              "(its TTL)")]

TraceParent = Annotated[str | None, Header(
    description="W3C Trace Context: the job's trace continues this one (kept with the job whether or not this "
                "API traces)")]


@router.post("", status_code=201, summary="Submit a job",
             responses={201: {"model": JobRecordModel, "description": "the job was created"},
                        200: {"model": JobRecordModel, "description": "the Idempotency-Key named this job already"},
                        **responses(400, 401, 403, 413, 422, 429, 503)},
             openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
                 "schema": JOB_BODY_SCHEMA}}}})
async def submit_job(request: Request, idempotency_key: IdempotencyKey = None,
                     traceparent: TraceParent = None) -> JSONResponse:
    parts, who = app_parts(request), principal(request)
    if not who.may_write:
        raise ApiError(403, "Forbidden", f"this token may only read (role {who.role.value!r})")
    text, job = await json_body(request)
    job_id = None if idempotency_key is None else idempotent_job_id(idempotency_key, who.tenant)
    if job_id is not None and (replay := await _replay(request, job_id, job)) is not None:
        return replay
    try:
        job_id = await run_in_threadpool(parts.jobs.submit, text, job_id=job_id, traceparent=traceparent,
                                         tenant=who.tenant)
    except JobExistsError:
        if job_id is None:
            raise
        replay = await _replay(request, job_id, job)  # submitted at the same moment by a twin request
        if replay is None:
            raise
        return replay
    record = await app_store(request).record(job_id)
    return JSONResponse(record.to_dict(), status_code=201, headers={"Location": f"/v1/jobs/{job_id}"})


def idempotent_job_id(key: str, tenant: str = DEFAULT_TENANT) -> str:
    """The job id an `Idempotency-Key` stands for: a twin request names the same job, which can only be
    created once (the store's submit step refuses an id that exists), so no extra record is needed. Keys are
    the tenant's own: the same key sent by two tenants names two jobs."""
    scoped = key if tenant == DEFAULT_TENANT else f"{tenant}\n{key}"
    return "job_idem_" + hashlib.sha256(scoped.encode("utf-8", "surrogatepass")).hexdigest()[:32]


async def _replay(request: Request, job_id: str, job: Any) -> JSONResponse | None:
    """The answer to a request whose Idempotency-Key named an existing job; None when there is none."""
    store = app_store(request)
    submitted = await store.submitted(job_id)
    if submitted is None:
        return None
    if submitted != job:
        raise ApiError(422, "IdempotencyKeyReused", "this Idempotency-Key was used for a different job",
                       [Problem("", f"the key names job {job_id}, submitted with another body")])
    record = await store.record(job_id)
    return JSONResponse(record.to_dict(), status_code=200,
                        headers={"Location": f"/v1/jobs/{job_id}", "Idempotent-Replayed": "true"})


async def json_body(request: Request, *, required: bool = True) -> tuple[str, Any]:
    """The body as (text, decoded JSON): 400 when it is not UTF-8 or not JSON, 422 when nested too deep.
    (Its size was checked as it arrived: see `BodyLimit`.)"""
    raw = await request.body()
    if not raw.strip() and not required:
        return "", None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ApiError(400, "MalformedJSON", "the body is not UTF-8 text",
                       [Problem("", f"byte {error.start}: {error.reason}")]) from None
    if not text.strip():
        raise ApiError(400, "MalformedJSON", "the body is empty; a JSON object was expected", [Problem("", "empty")])
    depth_problem = text_depth_problem(text, app_parts(request).settings.max_depth)
    if depth_problem is not None:
        raise ApiError(422, "JobValidationError", "the body nests too deeply", [depth_problem])
    try:
        return text, json.loads(text)
    except ValueError as error:
        raise ApiError(400, "MalformedJSON", "the body is not valid JSON", [Problem("", str(error))]) from None


@router.get("", summary="The newest jobs, newest first",
            responses={200: {"model": list[JobRecordModel]}, **responses(401, 422, 503)})
async def list_jobs(request: Request, status: JobStatus | None = None,
                    limit: Annotated[int, Query(ge=1, le=500)] = 50,
                    tenant: Annotated[str | None, Query(max_length=64, description="only this tenant's jobs (an "
                                                        "admin token's listing holds every tenant's)")] = None,
                    ) -> JSONResponse:
    who = principal(request)
    if not who.is_admin:
        if tenant is not None and tenant != who.tenant:
            return JSONResponse([])  # another tenant's jobs do not exist for this token
        tenant = who.tenant
    return JSONResponse(await _newest(app_store(request), limit, status, tenant))


async def _newest(store: AsyncStateStore, limit: int, status: JobStatus | None, tenant: str | None) -> list[dict]:
    """Up to `limit` records of the newest jobs with `status` of `tenant` (None: any). A filter that the listing
    does not apply by itself (a status; the default tenant, whose jobs are among every tenant's) reads pages of
    the listing until enough match, looking through `_LIST_SCAN_LIMIT` jobs at most."""
    found: list[dict] = []
    filtered = status is not None or tenant == DEFAULT_TENANT
    offset, page = 0, max(limit, 100) if filtered else limit
    while len(found) < limit and offset < _LIST_SCAN_LIMIT:
        ids = await store.recent_jobs(page, offset=offset, tenant=tenant)
        found += [record.to_dict() for record in await store.records(ids) if _matches(record, status, tenant)]
        if len(ids) < page or not filtered:
            break
        offset += page
    return found[:limit]


def _matches(record: JobRecord, status: JobStatus | None, tenant: str | None) -> bool:
    return (status is None or record.status is status) and (tenant is None or record.tenant == tenant)


@router.get("/{job_id}", summary="A job's record",
            responses={200: {"model": JobRecordModel}, **responses(401, 404, 503)})
async def get_job(request: Request, job_id: str) -> JSONResponse:
    await visible_job(request, job_id)
    return JSONResponse((await app_store(request).record(job_id)).to_dict())


@router.post("/{job_id}/cancel", summary="Cancel a job: no call starts after this",
             responses={200: {"model": JobRecordModel}, **responses(401, 403, 404, 503)})
async def cancel_job(request: Request, job_id: str) -> JSONResponse:
    await visible_job(request, job_id, write=True)  # 404 (or 403) before anything else
    await run_in_threadpool(app_parts(request).jobs.cancel, job_id)
    return JSONResponse((await app_store(request).record(job_id)).to_dict())


@router.get("/{job_id}/calls", summary="A job's calls: status, attempts, duration, what each waits on",
            responses={200: {"model": list[CallModel]}, **responses(401, 404, 503)})
async def list_calls(request: Request, job_id: str) -> JSONResponse:
    await visible_job(request, job_id)
    return JSONResponse(await run_in_threadpool(job_calls, app_parts(request).store, job_id))


@router.get("/{job_id}/deliveries", summary="A job's webhook deliveries: each event, its id and every attempt",
            responses={200: {"model": list[DeliveryModel]}, **responses(401, 404, 503)})
async def list_deliveries(request: Request, job_id: str) -> JSONResponse:
    await visible_job(request, job_id)
    return JSONResponse(await run_in_threadpool(app_parts(request).jobs.deliveries, job_id))


@router.post("/{job_id}/calls/{call_id}/approve", summary="Let a call awaiting approval run",
             responses={200: {"model": CallModel}, **responses(401, 403, 404, 409, 503)})
async def approve_call(request: Request, job_id: str, call_id: str) -> JSONResponse:
    await visible_job(request, job_id, write=True)
    parts = app_parts(request)
    await run_in_threadpool(parts.jobs.approve, job_id, call_id)
    return JSONResponse(await run_in_threadpool(job_call, parts.store, job_id, call_id))


@router.post("/{job_id}/calls/{call_id}/reject", summary="Fail a call awaiting approval (\"rejected by reviewer\")",
             responses={200: {"model": CallModel}, **responses(400, 401, 403, 404, 409, 413, 422, 503)},
             openapi_extra={"requestBody": {"required": False, "content": {"application/json": {
                 "schema": RejectBody.model_json_schema()}}}})
async def reject_call(request: Request, job_id: str, call_id: str) -> JSONResponse:
    await visible_job(request, job_id, write=True)
    _, body = await json_body(request, required=False)
    reason = _field(body, "reason", str, required=False)
    parts = app_parts(request)
    await run_in_threadpool(parts.jobs.reject, job_id, call_id, reason)
    return JSONResponse(await run_in_threadpool(job_call, parts.store, job_id, call_id))


@router.post("/{job_id}/calls/{call_id}/edit", summary="Replace a call's parameters and let it run",
             responses={200: {"model": CallModel}, **responses(400, 401, 403, 404, 409, 413, 422, 503)},
             openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
                 "schema": EditBody.model_json_schema()}}}})
async def edit_call(request: Request, job_id: str, call_id: str) -> JSONResponse:
    await visible_job(request, job_id, write=True)
    _, body = await json_body(request)
    params = _field(body, "params", dict, required=True)
    parts = app_parts(request)
    await run_in_threadpool(parts.jobs.edit, job_id, call_id, params)
    return JSONResponse(await run_in_threadpool(job_call, parts.store, job_id, call_id))


# one branch per way a small body can be wrong, all named in the one 422
def _field(body: Any, name: str, kind: type, *, required: bool) -> Any:
    """One field of a small request body, or 422 naming where it is wrong."""
    if body is None and not required:
        return None
    if not isinstance(body, dict):
        raise ApiError(422, "InvalidRequest", "the body must be a JSON object", [Problem("", "not an object")])
    unknown = sorted(set(body) - {name})
    problems = [Problem(f"/{key}", "unknown field") for key in unknown]
    value = body.get(name)
    if value is None and required:
        problems.append(Problem(f"/{name}", "required"))
    elif value is not None and not isinstance(value, kind):
        problems.append(Problem(f"/{name}", f"must be {'an object' if kind is dict else 'a string'}"))
    if problems:
        raise ApiError(422, "InvalidRequest", "the body is not valid", problems)
    return value


@router.get("/{job_id}/history", name="get_history", summary="A job's history message (seed 004)",
            responses={200: {"model": HistoryModel}, **responses(401, 404, 503)})
async def history(request: Request, job_id: str) -> JSONResponse:
    store = app_store(request)
    await visible_job(request, job_id)
    return JSONResponse(history_of([entry async for entry in store.events(job_id, follow=False, batch=1000)]))
