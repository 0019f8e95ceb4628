"""MCP (the Model Context Protocol, docs/mcp.md), both ways.

- MCP servers as activities (`agentq worker --mcp FILE`): `config` reads the `mcpServers` file, `schemas`
  makes each MCP tool an agentq tool schema, `connection` keeps one session per server and process (a background
  event loop thread owns it; a server that went away is started again), `activities` registers the tools and
  the activities that call them.
- agentq as an MCP server (`agentq mcp`): `server` serves submit_job, job_status, job_result, job_calls,
  approve_call and reject_call over stdio or streamable HTTP, built on `agentq.Client`.

Everything here needs the `mcp` package (`pip install 'agentq[mcp]'`), imported only when used.
"""

from __future__ import annotations

from agentq.mcp.activities import MCPToolActivity, register_servers
from agentq.mcp.config import ServerConfig, load_config, parse_config
from agentq.mcp.connection import MCPCallError

__all__ = ["MCPCallError", "MCPToolActivity", "ServerConfig", "load_config", "parse_config", "register_servers"]
