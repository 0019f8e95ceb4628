"""The API's error answers (README.md#the-http-api-and-the-web-page): `{"error": {"type", "message", "problems":
[{"pointer", "message"}]}}`.

agentq's own errors map to their HTTP status here, once: 400 malformed JSON, 401 no or a wrong token, 404 an
unknown job or call, 409 a conflict, 410 a job whose data expired, 413 a body over the limit, 422 an invalid job
or request, 503 the state store unreachable. Anything else is a bug of agentq's: it is logged with its traceback
and answered 500 without one.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from agentq.errors import (
    AgentQError,
    CallNotFoundError,
    ConflictError,
    InvalidInputError,
    InvalidJobIdError,
    JobExpiredError,
    JobNotFoundError,
    Problem,
    RateLimited,
    StoreUnavailableError,
)

log = logging.getLogger("agentq.api")


class ApiError(Exception):
    """An error answer: raise it from a route (or a dependency) to answer with this status and body."""

    def __init__(self, status: int, type: str, message: str, problems: list[Problem] | tuple[Problem, ...] = (),
                 *, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.type, self.message = status, type, message
        self.problems = list(problems)
        self.headers = headers


class NoContent(Exception):
    """Answer 204 with no body (an event stream resumed after its job's final event: nothing will follow,
    and a 204 tells a browser's EventSource to stop reconnecting)."""


def error_body(type: str, message: str, problems: list[Problem] | tuple[Problem, ...] = ()) -> dict[str, Any]:
    return {"error": {"type": type, "message": message, "problems": [p.to_dict() for p in problems]}}


def error_response(error: ApiError) -> JSONResponse:
    return JSONResponse(error_body(error.type, error.message, error.problems), status_code=error.status,
                        headers=error.headers)


def as_api_error(error: AgentQError) -> ApiError:
    """The HTTP answer of one of agentq's errors."""
    if isinstance(error, JobExpiredError):
        return ApiError(410, "JobExpired", str(error))
    if isinstance(error, (JobNotFoundError, InvalidJobIdError)):
        return ApiError(404, "JobNotFound", str(error) if isinstance(error, JobNotFoundError)
                        else f"no such job: {error}")
    if isinstance(error, CallNotFoundError):
        return ApiError(404, "CallNotFound", str(error))
    if isinstance(error, ConflictError):
        return ApiError(409, "Conflict", str(error))
    if isinstance(error, InvalidInputError):
        return ApiError(422, type(error).__name__, error.summary, error.problems)
    if isinstance(error, RateLimited):
        wait_s = max(1, math.ceil(error.retry_after_s))
        return ApiError(429, "RateLimited", str(error), headers={"Retry-After": str(wait_s)})
    if isinstance(error, StoreUnavailableError):
        return ApiError(503, "StoreUnavailable", str(error), headers={"Retry-After": "5"})
    return ApiError(400, type(error).__name__, str(error))


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, error: ApiError) -> Response:
        return error_response(error)

    @app.exception_handler(NoContent)
    async def no_content(request: Request, error: NoContent) -> Response:
        return Response(status_code=204)

    @app.exception_handler(AgentQError)
    async def agentq_error(request: Request, error: AgentQError) -> Response:
        return error_response(as_api_error(error))

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, error: RequestValidationError) -> Response:
        problems = [Problem(_pointer(e.get("loc", ())), str(e.get("msg", "invalid"))) for e in error.errors()]
        return error_response(ApiError(422, "InvalidRequest", "the request is not valid", problems))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> Response:
        types = {404: "NotFound", 405: "MethodNotAllowed", 401: "Unauthorized", 413: "PayloadTooLarge"}
        return error_response(ApiError(error.status_code, types.get(error.status_code, "HTTPError"),
                                       str(error.detail), headers=getattr(error, "headers", None)))

    @app.exception_handler(Exception)
    async def unexpected(request: Request, error: Exception) -> Response:
        log.exception("unexpected error answering %s %s", request.method, request.url.path)
        return error_response(ApiError(500, "InternalError", "agentq failed to answer this request; the API's "
                                                             "log has the details"))


def _pointer(location: Any) -> str:
    """A JSON pointer of a FastAPI error location, e.g. ("query", "limit") -> "/query/limit"."""
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in location)
