"""`create_api`: the HTTP API and web page as one FastAPI app over the composition root's parts
(README.md#the-http-api-and-the-web-page).

    parts = connect(settings)                       # agentq.runtime.root
    app = create_api(parts, auth=ApiAuth.configure(settings.api_tokens))

The app owns an async view of the store (`AsyncStateStore`) for everything that waits or streams; writes go
through `parts.jobs`, the job service the Python client and the CLI use too.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator

from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentq import __version__
from agentq.api import config, continuation, events, fleet, jobs, pages, resume, rollouts, schedules, waits
from agentq.api.auth import ApiAuth
from agentq.api.diff import router as diff_router
from agentq.api.errors import error_body, install_error_handlers
from agentq.api.openapi import operation_id
from agentq.errors import Problem
from agentq.runtime.root import Parts
from agentq.store.aio import AsyncStateStore, open_async_store

DESCRIPTION = """agentq's HTTP API: submit agent and plan jobs, follow their events, read their calls and
history, approve calls. Authenticate with `Authorization: Bearer <token>` (every path but `GET /v1/health`).
Errors are `{"error": {"type", "message", "problems": [{"pointer", "message"}]}}`."""


def create_api(parts: Parts, *, auth: ApiAuth, store: AsyncStateStore | None = None) -> FastAPI:
    """The API over `parts` (closed by the caller); `store` defaults to an async view of `parts`' store."""
    settings = parts.settings
    reads = store or open_async_store(settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await reads.close()

    app = FastAPI(title="agentq", version=__version__, description=DESCRIPTION, lifespan=lifespan,
                  openapi_url=None, docs_url=None, redoc_url=None,  # served with auth by `pages`
                  generate_unique_id_function=operation_id)  # submitJob, approveCall, ... (api/openapi.py)
    app.state.parts, app.state.store, app.state.auth = parts, reads, auth
    install_error_handlers(app)
    for module in (jobs, events, fleet, rollouts, schedules, config, waits, continuation, resume, pages):
        app.include_router(module.router)
    app.include_router(diff_router)  # GET /v1/jobs/{a}/diff/{b} (docs/compare.md)
    app.add_middleware(BodyLimit, max_bytes=settings.max_job_bytes)
    return app


class BodyLimit:
    """Refuse a request body over `max_bytes` (413, README.md#the-http-api-and-the-web-page), by its Content-Length or
    as it arrives, before a route reads it into memory."""

    def __init__(self, app: ASGIApp, *, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or ()).get(b"content-length")
        if declared is not None and await self._refused_as_declared(declared, receive, send):
            return
        received = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise _TooLarge(more=bool(message.get("more_body")))
            return message

        async def tracked_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, tracked_send)
        except _TooLarge as too_large:
            if not started:
                if too_large.more:  # read the rest (up to the drain limit): a client still sending reads the answer
                    await _drain(receive, _DRAIN_LIMIT - received)
                await self._refuse(send, None)

    async def _refused_as_declared(self, declared: bytes, receive: Receive, send: Send) -> bool:
        """Refuse a body whose Content-Length is over the limit (or no number) before reading it; whether it did."""
        size = int(declared) if declared.isdigit() else None
        if size is not None and size <= self.max_bytes:
            return False
        if size is not None and size <= _DRAIN_LIMIT:
            await _drain(receive)  # so the client, still sending, reads the answer instead of a broken pipe
        await self._refuse(send, size)
        return True

    async def _refuse(self, send: Send, size: int | None) -> None:
        what = f"{size} bytes" if size is not None else "larger than that"
        body = json.dumps(error_body("PayloadTooLarge", "the request body is too large", [Problem(
            "", f"the body is {what}; the limit is {self.max_bytes} bytes (AGENTQ_MAX_JOB_BYTES)")])).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


_DRAIN_LIMIT = 64 * 1024 * 1024  # a refused body up to this size is read and dropped before the answer


async def _drain(receive: Receive, limit: int | None = None) -> None:
    """Read and drop the rest of a request body; with a `limit`, stop once that many bytes were dropped (the
    answer then closes the connection on a client that is still sending)."""
    dropped = 0
    while True:
        message = await receive()
        if message["type"] != "http.request" or not message.get("more_body"):
            return
        dropped += len(message.get("body", b""))
        if limit is not None and dropped > limit:
            return


class _TooLarge(Exception):
    """A body grew past the limit while it arrived; `more`: the client had more of it to send."""

    def __init__(self, *, more: bool):
        super().__init__("the request body is over the limit")
        self.more = more
