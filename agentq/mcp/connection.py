"""One MCP server's session in this process: a daemon thread runs an event loop that owns the `mcp` client.

Activities call `MCPConnection.call_tool` from any thread (a prefork child's main thread, the threads of a
threads pool); the calls share the one session, which the loop serves concurrently. The session starts on the
first call; a session whose server went away (a stdio server that exited, an HTTP server that closed the
stream) is started again on the next call. `connection_for` keeps one connection per server and process: a
prefork child does not share its parent's (the thread and the server's pipes do not survive a fork).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections.abc import AsyncIterator
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from agentq.errors import ConfigurationError
from agentq.mcp.config import ServerConfig

__all__ = ["MCPCallError", "MCPConnection", "close_all", "connection_for"]

log = logging.getLogger("agentq.mcp")

#: How long starting a server and its handshake may take.
START_TIMEOUT_S = 30.0
#: How long a tools/call may take when the tool has no `timeout` (the default activity timeout).
DEFAULT_CALL_TIMEOUT_S = 900.0
_CONNECTION_CLOSED = -32000  # the JSON-RPC code the `mcp` client gives a request whose transport closed


class MCPCallError(RuntimeError):
    """A tools/call that did not give a result: the tool answered an error, its server went away or could not
    start again, or it did not answer in time. Deliberately not an `AgentQError`: an activity that raises one of
    agentq's errors fails its call for good, where this is the tool's own runtime error, tried again within the
    call's retries. One string argument, so it pickles across a prefork pool."""


def innermost(error: BaseException) -> BaseException:
    """The first leaf of a (possibly grouped) failure: what the `mcp` client's task groups wrap."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error


def reason_of(error: BaseException) -> str:
    """The innermost error of a (possibly grouped) failure, as one line."""
    error = innermost(error)
    text = str(getattr(error, "strerror", None) or error) or type(error).__name__
    filename = getattr(error, "filename", None)  # an OSError's, when it has one
    if filename:
        text = f"{text}: {filename!r}"
    return text.splitlines()[0] if text else type(error).__name__


class _WatchedStream:
    """The transport's read stream, noting when it ended (the server went away)."""

    def __init__(self, stream: Any, ended: threading.Event):
        self._stream, self._ended = stream, ended

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    async def __aenter__(self) -> _WatchedStream:
        await self._stream.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        self._ended.set()
        return await self._stream.__aexit__(*exc)

    def __aiter__(self) -> _WatchedStream:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self._stream.__anext__()
        except BaseException:
            self._ended.set()
            raise


@contextlib.asynccontextmanager
async def _transport(server: ServerConfig, ended: threading.Event) -> AsyncIterator[Any]:
    if server.command is not None:
        from mcp.client.stdio import StdioServerParameters, stdio_client

        params = StdioServerParameters(command=server.command, args=list(server.args), env=dict(server.env) or None,
                                       cwd=server.cwd)
        async with stdio_client(params) as (read, write):
            yield _WatchedStream(read, ended), write
    else:
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        # the `mcp` client's own timeouts: a response stream may stay open as long as a call runs
        timeout = httpx2.Timeout(30.0, read=DEFAULT_CALL_TIMEOUT_S)
        async with httpx2.AsyncClient(headers=dict(server.headers), timeout=timeout) as http, \
                streamable_http_client(str(server.url), http_client=http) as (read, write):
            yield _WatchedStream(read, ended), write


class MCPConnection:
    """The session with one MCP server, owned by a background event loop thread of this process."""

    def __init__(self, server: ServerConfig):
        self.server = server
        self.pid = os.getpid()
        self.starts = 0  # how many sessions were started (the first, then each restart)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"agentq-mcp-{server.name}", daemon=True)
        self._thread.start()
        self._lock = asyncio.Lock()  # made outside the loop: used only from it (Python >= 3.10 binds lazily)
        self._client: Any = None
        self._ended = threading.Event()
        self._stop: asyncio.Event | None = None
        self._holder: asyncio.Future[None] | None = None

    # ------------------------------------------------------------------------------------------ from any thread

    def list_tools(self, timeout: float = START_TIMEOUT_S) -> list[Any]:
        """Every tool the server lists (all pages); `ConfigurationError` naming the server if it cannot start."""
        return self._run(self._list_tools(), timeout)

    def call_tool(self, name: str, arguments: dict, *, timeout: float | None = None,
                  meta: dict | None = None) -> Any:
        """The `CallToolResult` of a tools/call; `MCPCallError` when the server went away or did not answer."""
        limit = timeout or DEFAULT_CALL_TIMEOUT_S
        try:
            return self._run(self._call_tool(name, arguments, limit, meta), START_TIMEOUT_S + limit + 5)
        except ConfigurationError as error:  # the server could not start again: maybe it can at the next attempt
            raise MCPCallError(str(error)) from None

    def close(self, timeout: float = 10.0) -> None:
        if self._loop.is_closed():
            return
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._shut(), self._loop).result(timeout)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout)
        if not self._thread.is_alive():
            self._loop.close()

    def _run(self, coroutine: Any, timeout: float) -> Any:
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return future.result(timeout)
        except FutureTimeout:
            future.cancel()
            raise MCPCallError(f"MCP server {self.server.name!r} did not answer within {timeout:g} s") from None

    # ------------------------------------------------------------------------------------------ in the loop

    async def _session(self) -> Any:
        """The live client, started (again) when there is none or its server went away."""
        async with self._lock:
            if self._client is None or self._ended.is_set():
                if self._client is not None:
                    log.warning("MCP server %r went away; starting it again", self.server.name)
                await self._shut()
                await self._start()
            return self._client

    async def _start(self) -> None:
        ready: asyncio.Future[Any] = self._loop.create_future()
        self._ended = ended = threading.Event()
        self._stop = stop = asyncio.Event()
        self._holder = asyncio.ensure_future(self._hold(ready, stop, ended))
        try:
            self._client = await asyncio.wait_for(asyncio.shield(ready), START_TIMEOUT_S)
        except Exception as error:
            await self._shut()
            why = f"no handshake within {START_TIMEOUT_S:g} s" if isinstance(error, TimeoutError) else reason_of(error)
            if getattr(innermost(error), "code", None) == _CONNECTION_CLOSED:
                why = "it closed the connection before the handshake ended (did it exit? see its output)"
            where = " ".join([self.server.command, *self.server.args]) if self.server.command else self.server.url
            raise ConfigurationError(f"MCP server {self.server.name!r} ({self.server.transport}, {where}) cannot "
                                     f"start: {why}") from None
        self.starts += 1

    async def _hold(self, ready: asyncio.Future[Any], stop: asyncio.Event, ended: threading.Event) -> None:
        """Enter the client and keep it until told to stop (the `mcp` client's task groups must be left by the
        task that entered them)."""
        from mcp import Client

        try:
            async with Client(_Transport(self.server, ended), mode="legacy") as client:
                ready.set_result(client)
                await stop.wait()
        except BaseException as error:
            if not ready.done():
                ready.set_exception(error if isinstance(error, Exception) else RuntimeError(reason_of(error)))
            elif not isinstance(error, asyncio.CancelledError):
                log.debug("MCP server %r: session ended: %s", self.server.name, reason_of(error))
        finally:
            ended.set()

    async def _shut(self) -> None:
        holder, self._holder, self._client = self._holder, None, None
        if holder is None:
            return
        if self._stop is not None:
            self._stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(holder), 10)
        except BaseException:
            holder.cancel()
            with contextlib.suppress(BaseException):
                await holder

    async def _list_tools(self) -> list[Any]:
        client = await self._session()
        tools, cursor = [], None
        while True:
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                return tools

    async def _call_tool(self, name: str, arguments: dict, timeout: float, meta: dict | None) -> Any:
        client = await self._session()
        try:
            try:
                return await client.call_tool(name, arguments, read_timeout_seconds=timeout, meta=meta)
            except Exception as error:
                if not _session_unknown(error):
                    raise
            # an HTTP server that restarted no longer knows the session: it refused the request without running
            # it, so a new session may send it again (once)
            self._ended.set()
            client = await self._session()
            return await client.call_tool(name, arguments, read_timeout_seconds=timeout, meta=meta)
        except Exception as error:
            raise self._failure(name, error) from None

    def _failure(self, name: str, error: Exception) -> MCPCallError:
        if getattr(innermost(error), "code", None) == _CONNECTION_CLOSED or self._ended.is_set():
            self._ended.set()  # the next call starts the server again
            return MCPCallError(f"MCP server {self.server.name!r} went away during tools/call {name!r} "
                                f"({reason_of(error)}); it is started again for the next call")
        return MCPCallError(f"MCP server {self.server.name!r}: tools/call {name!r} failed: {reason_of(error)}")


def _session_unknown(error: Exception) -> bool:
    """The streamable-HTTP answer to a session id the server does not know (404, "Session not found")."""
    text = str(innermost(error)).lower()
    return "session not found" in text or "session terminated" in text


class _Transport:
    """An `mcp` client transport (an async context manager of the read and write streams)."""

    def __init__(self, server: ServerConfig, ended: threading.Event):
        self._context = _transport(server, ended)

    async def __aenter__(self) -> Any:
        return await self._context.__aenter__()

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._context.__aexit__(*exc)


_connections: dict[tuple[int, str], MCPConnection] = {}
_connections_lock = threading.Lock()


def connection_for(server: ServerConfig) -> MCPConnection:
    """This process's connection to `server` (made on first use; a forked child makes its own)."""
    key = (os.getpid(), server.name)
    with _connections_lock:
        connection = _connections.get(key)
        if connection is None or connection.server != server:
            connection = _connections[key] = MCPConnection(server)
        return connection


def close_all() -> None:
    """Close this process's connections (their stdio servers exit)."""
    with _connections_lock:
        mine = [key for key in _connections if key[0] == os.getpid()]
        connections = [_connections.pop(key) for key in mine]
    for connection in connections:
        connection.close()
