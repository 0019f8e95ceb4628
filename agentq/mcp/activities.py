"""MCP servers' tools as agentq tools and activities (`agentq worker --mcp FILE`, docs/mcp.md).

`register_servers` starts each configured server once, lists its tools, and registers for each a tool schema
(`schemas.py`) and an activity, `MCPToolActivity`, with the options the config gives it (retries, timeout,
queue, rate limit). The activity calls the tool on this process's session with the server (`connection.py`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentq.errors import ConfigurationError, RegistrationError
from agentq.mcp.config import ServerConfig, load_config
from agentq.mcp.connection import MCPCallError, MCPConnection, connection_for
from agentq.mcp.schemas import MCPToolRef, SchemaRefused, agentq_names, tool_schema
from agentq.protocol.activities import ActivityRegistry
from agentq.protocol.tools import ToolRegistry

__all__ = ["MCPToolActivity", "register_servers", "result_value"]

log = logging.getLogger("agentq.mcp")

#: The `_meta` key under which a call with `_scopes` sends its scoped context messages to the server.
CONTEXT_META_KEY = "agentq/context"


@dataclass(frozen=True)
class MCPToolActivity:
    """The activity of one MCP tool: a tools/call with the call's parameters (meta fields left out)."""

    ref: MCPToolRef
    structured: bool  # the tool declares an outputSchema: its result is the structuredContent

    def __call__(self, call: dict, context: Any) -> Any:
        arguments = {key: value for key, value in call.items() if not key.startswith("_")}
        messages = getattr(context, "messages", None)
        meta = {CONTEXT_META_KEY: messages} if self.ref.options.scopes and messages is not None else None
        result = connection_for(self.ref.server).call_tool(self.ref.tool, arguments, timeout=self.ref.options.timeout,
                                                           meta=meta)
        return result_value(self.ref, result, structured=self.structured)


def result_value(ref: MCPToolRef, result: Any, *, structured: bool) -> Any:
    """What a `CallToolResult` writes: its structuredContent (a tool with an outputSchema), else its text;
    `MCPCallError` (the call's retries apply) for an error result."""
    if result.is_error:
        raise MCPCallError(f"MCP tool {ref.tool!r} of server {ref.server.name!r} answered an error: "
                           f"{content_text(result.content) or 'no message'}")
    if structured:
        if result.structured_content is None:
            raise MCPCallError(f"MCP tool {ref.tool!r} of server {ref.server.name!r} declares an outputSchema but "
                               f"answered no structuredContent")
        return result.structured_content
    return content_text(result.content)


def content_text(content: list[Any]) -> str:
    """The text of a result's content blocks; other blocks (images, audio, resources) as a short note."""
    parts = []
    for block in content:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource_link":
            parts.append(str(block.uri))
        elif kind == "resource":
            parts.append(getattr(block.resource, "text", None) or str(block.resource.uri))
        else:
            parts.append(f"[{kind} {getattr(block, 'mime_type', '') or ''}]".replace(" ]", "]"))
    return "\n".join(parts)


def _require_sdk() -> None:
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise ConfigurationError("--mcp needs the `mcp` package: pip install 'agentq[mcp]'") from None


def list_server_tools(server: ServerConfig) -> list[Any]:
    """The tools `server` lists, from a session of its own closed afterwards (a prefork pool's processes start
    their own); `ConfigurationError` naming the server if it cannot start or does not answer."""
    connection = MCPConnection(server)
    try:
        return connection.list_tools()
    except MCPCallError as error:
        raise ConfigurationError(f"MCP server {server.name!r} cannot start: {error}") from None
    finally:
        connection.close()


def register_servers(path: str | Path, activities: ActivityRegistry, tools: ToolRegistry) -> list[str]:
    """Register every tool of the servers of the config at `path` as a tool and an activity; returns their
    names. A tool that cannot be an agentq tool is skipped with a warning naming it."""
    _require_sdk()
    servers = load_config(path)
    listed = [(server, tool) for server in servers for tool in list_server_tools(server)]
    refs = agentq_names([(server, tool.name) for server, tool in listed],
                        taken={*tools.names, *activities.names})
    registered = [ref.name for ref, (_, tool) in zip(refs, listed, strict=True)
                  if _register(ref, tool, activities, tools)]
    for server in servers:
        names = [ref.name for ref in refs if ref.server is server and ref.name in registered]
        log.info("MCP server %r (%s): %d tools: %s", server.name, server.transport, len(names), ", ".join(names))
    return registered


def _register(ref: MCPToolRef, tool: Any, activities: ActivityRegistry, tools: ToolRegistry) -> bool:
    """Register one MCP tool's schema and activity; False (with a warning naming it) when it cannot be one."""
    try:
        schema = tool_schema(ref, tool)
    except SchemaRefused as why:
        log.warning("MCP server %r: tool %r skipped: %s", ref.server.name, ref.tool, why)
        return False
    try:
        activities.register(ref.name, MCPToolActivity(ref, tool.output_schema is not None),
                            **ref.options.activity_options(), replace=True)
    except RegistrationError as error:
        raise ConfigurationError(f"MCP server {ref.server.name!r}, tool {ref.tool!r}: {error}") from None
    tools.register(ref.name, schema, replace=True)
    return True
