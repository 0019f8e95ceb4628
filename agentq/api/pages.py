"""The web page (README.md#the-http-api-and-the-web-page): static files shipped in the package, no build step; and the
API's own docs.

`/` lists recent jobs and submits one; `/jobs/{id}` shows one job live; `/threads/{id}` a thread of continued jobs
as one conversation (docs/continue-and-fork.md); `/schedules` lists the schedules (their next
runs, last job, paused: docs/schedules.md); `/rollouts` shows the rollout report
(docs/rollouts.md: per tool, its routes side by side; the report is for admin tokens, so another token's page
says so). Each reads the API with the page's cookie: opening one with `?token=<token>` sets it (HttpOnly,
SameSite=Strict) and redirects to the same URL without the token. Pages carry a Content-Security-Policy that
allows only the page's own scripts, styles and connections, so text from a job can never run as code even if it
were inserted as HTML (it is not: the scripts insert it with `textContent`).
"""

from __future__ import annotations

import mimetypes
from functools import cache
from importlib import resources
from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.security import HTTPAuthorizationCredentials

from agentq.api.auth import COOKIE, check, unauthorized
from agentq.api.errors import ApiError
from agentq.api.openapi import openapi_document
from agentq.api.page_shell import render_page

router = APIRouter(include_in_schema=False)

SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


@cache
def static_files() -> dict[str, bytes]:
    """The page's files by name (read once from the installed package)."""
    folder = resources.files("agentq.api").joinpath("static")
    return {entry.name: entry.read_bytes() for entry in folder.iterdir() if entry.is_file()}


@cache
def page_html(name: str) -> bytes:
    """A page's whole document: its file in the shell all pages share (`page_shell.py`), built once."""
    return render_page(static_files()[name].decode("utf-8")).encode("utf-8")


def _page(request: Request, name: str, token: str | None) -> Response:
    if token is not None:
        auth = request.app.state.auth
        if not auth.accepts(token):
            raise unauthorized("the token in the page's address is not one of the API's tokens")
        query = urlencode([(k, v) for k, v in request.query_params.multi_items() if k != "token"])
        response: Response = RedirectResponse(request.url.path + (f"?{query}" if query else ""), status_code=303)
        response.set_cookie(COOKIE, token, httponly=True, samesite="strict", path="/",
                            secure=request.url.scheme == "https")
        return response
    check(request, _bearer_of(request), query_token=False)
    return HTMLResponse(page_html(name), headers=SECURITY_HEADERS)


Token = Annotated[str | None, Query(max_length=512)]


@router.get("/")
async def index(request: Request, token: Token = None) -> Response:
    return _page(request, "index.html", token)


@router.get("/jobs/{job_id}")
async def job_page(request: Request, job_id: str, token: Token = None) -> Response:
    return _page(request, "job.html", token)


@router.get("/diff")
async def diff_page(request: Request, token: Token = None) -> Response:
    return _page(request, "diff.html", token)  # ?a=ID&b=ID: two jobs side by side (docs/compare.md)


@router.get("/schedules")
async def schedules_page(request: Request, token: Token = None) -> Response:
    return _page(request, "schedules.html", token)


@router.get("/threads/{thread_id}")
async def thread_page(request: Request, thread_id: str, token: Token = None) -> Response:
    return _page(request, "thread.html", token)


@router.get("/rollouts")
async def rollouts_page(request: Request, token: Token = None) -> Response:
    return _page(request, "rollouts.html", token)


@router.get("/static/{name}")
async def static(request: Request, name: str) -> Response:
    check(request, _bearer_of(request), query_token=False)
    body = static_files().get(name)
    if body is None or name.endswith(".html"):
        raise ApiError(404, "NotFound", f"no static file {name!r}")
    media_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
    return Response(body, media_type=media_type, headers=SECURITY_HEADERS)


@router.get("/openapi.json")
async def openapi(request: Request) -> JSONResponse:
    check(request, _bearer_of(request), query_token=False)
    return JSONResponse(openapi_document(request.app))


@router.get("/docs")
async def docs(request: Request, token: Token = None) -> Response:
    if token is not None:
        return _page(request, "index.html", token)  # sets the cookie and comes back here
    check(request, _bearer_of(request), query_token=False)
    return get_swagger_ui_html(openapi_url="/openapi.json", title="agentq API")


def _bearer_of(request: Request) -> HTTPAuthorizationCredentials | None:
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not credentials:
        return None
    return HTTPAuthorizationCredentials(scheme=scheme, credentials=credentials)
