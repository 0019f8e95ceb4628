"""A real MCP server for the tests, built with the `mcp` package's MCPServer (FastMCP before mcp 2).

    python -m tests.mcp_server                  # over stdio
    python -m tests.mcp_server --http PORT      # over streamable HTTP at http://127.0.0.1:PORT/mcp

Tools: `add` and `whoami` (structured output), `shout` (text only), `tag` (a nested model: `$defs` and `$ref` in
its inputSchema), `peek` (what the request's `_meta` carried), `fail` (an error result), `flaky` (an error result
on its first call only), `slow` (answers after some seconds), `crash` (exits the server process: the client sees
the connection close), and `broken`, whose inputSchema is not a valid JSON Schema.
`MCP_TEST_PREFIX` prefixes every tool name (two servers listing the same names).
"""

from __future__ import annotations

import argparse
import os
import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel

PREFIX = os.environ.get("MCP_TEST_PREFIX", "")
server = MCPServer("agentq-test")


class Identity(BaseModel):
    pid: int
    transport: str


class Item(BaseModel):
    label: str
    weight: int


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def shout(text: str) -> str:
    """The text in capitals."""
    return text.upper() + "!"


def whoami() -> Identity:
    """The server process's id and transport (tells a restarted server from the first one)."""
    return Identity(pid=os.getpid(), transport=TRANSPORT)


def tag(item: Item, note: str = "") -> str:
    """Describe an item."""
    return f"{item.label}:{item.weight}{':' + note if note else ''}"


def peek(ctx: Context) -> str:
    """The `agentq/context` entry of the request's `_meta`, as its JSON text."""
    import json

    meta = ctx.request_context.meta or {}
    return json.dumps(dict(meta).get("agentq/context"))


def fail() -> str:
    """Always answers an error."""
    raise ToolError("this tool always fails")


_FLAKY_CALLS = [0]


def flaky() -> str:
    """Fails its first call in each server process, then succeeds."""
    _FLAKY_CALLS[0] += 1
    if _FLAKY_CALLS[0] == 1:
        raise ToolError("first call fails")
    return f"ok after {_FLAKY_CALLS[0]} calls"


async def slow(seconds: float) -> str:
    """Answers after `seconds`."""
    import anyio

    await anyio.sleep(seconds)
    return "done"


def crash() -> str:
    """Exits the server process before answering."""
    sys.stderr.flush()
    os._exit(3)


def broken(x: int) -> str:
    """A tool whose inputSchema is made invalid below."""
    return str(x)


TRANSPORT = "stdio"
for function in (add, shout, whoami, tag, peek, fail, flaky, slow, crash, broken):
    server.add_tool(function, name=PREFIX + function.__name__,
                    structured_output=False if function not in (add, whoami) else None)
server._tool_manager.get_tool(PREFIX + "broken").parameters = {  # type: ignore[union-attr]
    "type": "object", "properties": {"x": {"type": "integer", "minimum": "zero"}}}


def main() -> None:
    global TRANSPORT
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, default=None, metavar="PORT")
    args = parser.parse_args()
    if args.http is None:
        server.run("stdio")
    else:
        TRANSPORT = "http"
        server.run("streamable-http", host="127.0.0.1", port=args.http)


if __name__ == "__main__":
    main()
