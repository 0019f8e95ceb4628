"""agentq as an MCP server (`agentq mcp`, docs/mcp.md): an assistant enqueues agent jobs and follows them.

Tools, each a thin layer over `agentq.Client` (so a job is validated exactly as `agentq submit` validates it):

- `submit_job(job, job_id?)`: validate and enqueue a job; its id and status;
- `job_status(job_id)`: the status;
- `job_result(job_id, wait_s?)`: the job's record (after waiting up to `wait_s` seconds for it to end);
- `job_calls(job_id)`: its calls, with the ids of those awaiting approval;
- `approve_call(job_id, call_id)` / `reject_call(job_id, call_id, reason?)`: an approval decision.

An agentq error (a job that does not validate, with every problem and its JSON pointer; an unknown job; a call
not awaiting approval) is the tool's error result, with agentq's message. Over stdio the server is the
caller's own subprocess; over streamable HTTP (`--port`) every request needs `Authorization: Bearer <token>`
with one of the API's tokens (`AGENTQ_API_TOKENS`, else one made at start and printed), as `agentq api`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agentq.errors import AgentQError, JobTimeoutError

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

__all__ = ["bearer_guard", "build_server"]

#: The longest `job_result` waits in one call (a client's request timeout is usually shorter).
MAX_WAIT_S = 300.0


def build_server(client: Any) -> MCPServer:
    """The MCPServer with agentq's tools over `client` (an `agentq.Client`)."""
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("agentq", instructions="Submit agentq jobs (plan jobs with `calls`, agent jobs with `tools` "
                                              "and an `output`), follow their status, read their results and "
                                              "decide on calls awaiting approval.")
    for tool in _tools(client):
        server.add_tool(_reported(tool), name=tool.__name__, structured_output=True)
    return server


def _reported(tool: Callable[..., Any]) -> Callable[..., Any]:
    """`tool` with agentq's errors turned into the tool's error result (their message, not a traceback)."""
    from mcp.server.mcpserver.exceptions import ToolError

    @functools.wraps(tool)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return tool(*args, **kwargs)
        except AgentQError as error:
            raise ToolError(f"{type(error).__name__}: {error}") from None

    return run


def _tools(client: Any) -> list[Callable[..., Any]]:
    def submit_job(job: dict[str, Any] | str, job_id: str | None = None) -> dict[str, Any]:
        """Validate and enqueue an agentq job (docs/protocol.md#jobs): a JSON object with `context` and either `calls`
        (a plan job) or `tools` (an agent job, with an optional `output` schema). Returns its id and status; a job
        that does not validate is refused with every problem and its JSON pointer, and nothing is written."""
        handle = client.submit(json.loads(job) if isinstance(job, str) else job, job_id=job_id)
        return {"id": handle.id, "status": handle.status()}

    def job_status(job_id: str) -> dict[str, Any]:
        """The status of a job: queued, running, waiting, succeeded, failed or canceled."""
        return {"id": job_id, "status": client.job(job_id).status()}

    def job_result(job_id: str, wait_s: float = 0.0) -> dict[str, Any]:
        """The record of a job (status, result, state, error, usage), after waiting up to `wait_s` seconds (at
        most 300) for it to end; a job still running is returned as it stands."""
        handle = client.job(job_id)
        if wait_s > 0:
            try:
                return handle.result(timeout=min(wait_s, MAX_WAIT_S))
            except JobTimeoutError:
                pass
        return handle.record()

    def job_calls(job_id: str) -> dict[str, Any]:
        """The calls of a job: id, tool, status (`awaiting_approval` for those waiting on a decision), attempts,
        error."""
        return {"calls": client.calls(job_id)}

    def approve_call(job_id: str, call_id: str) -> dict[str, Any]:
        """Let a call awaiting approval run; returns the call."""
        return client.approve(job_id, call_id)

    def reject_call(job_id: str, call_id: str, reason: str | None = None) -> dict[str, Any]:
        """Fail a call awaiting approval ("rejected by reviewer", with the reason); returns the call."""
        return client.reject(job_id, call_id, reason=reason)

    return [submit_job, job_status, job_result, job_calls, approve_call, reject_call]


def bearer_guard(app: Any, accepts: Callable[[str | None], bool]) -> Any:
    """An ASGI app that answers 401 to an HTTP request without an accepted `Authorization: Bearer` token."""

    async def guarded(scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            header = dict(scope.get("headers") or []).get(b"authorization", b"").decode("latin-1")
            scheme, _, token = header.partition(" ")
            if scheme.lower() != "bearer" or not accepts(token.strip() or None):
                body = b'{"error": "missing or wrong token: send Authorization: Bearer <token>"}'
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return guarded
