"""`agentq mcp`: serve agentq as an MCP server (docs/mcp.md), over stdio (the default: an assistant starts it as a
subprocess) or over streamable HTTP on `--port`, behind the API's bearer tokens."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from agentq.errors import ConfigurationError

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

    from agentq.api.auth import ApiAuth


def cmd_mcp(args: argparse.Namespace) -> int:
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise ConfigurationError("`agentq mcp` needs the `mcp` package: pip install 'agentq[mcp]'") from None
    from agentq.client import Client
    from agentq.mcp.server import build_server

    client = Client(settings=args.settings)
    try:
        server = build_server(client)
        if args.port is None:
            server.run("stdio")
        else:
            _serve_http(server, args)
    finally:
        client.close()
    return 0


def _serve_http(server: MCPServer, args: argparse.Namespace) -> None:
    import uvicorn

    from agentq.api.auth import ApiAuth
    from agentq.mcp.server import bearer_guard

    app = server.streamable_http_app(host=args.host)
    auth = ApiAuth.configure(args.settings.api_tokens, enabled=not args.no_auth)
    if auth.enabled:  # its tools act for every tenant (a Client): admin tokens only (docs/tenants.md)
        app = bearer_guard(app, auth.admits_admin)
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level="warning", lifespan="on")
    http = uvicorn.Server(config)
    _announce(http, args, auth)
    http.run()


def _announce(http: object, args: argparse.Namespace, auth: ApiAuth) -> None:
    """Print the endpoint (its port once bound, for `--port 0`) and, when it was made at start, the token."""
    import threading
    import time

    def announce() -> None:  # once uvicorn has bound its sockets
        while not getattr(http, "started", False):
            time.sleep(0.05)
        sockets = [s for server in getattr(http, "servers", []) for s in server.sockets]
        port = sockets[0].getsockname()[1] if sockets else args.port
        print(f"agentq mcp: serving http://{args.host}:{port}/mcp (streamable HTTP)", flush=True)
        if auth.generated:
            print(f"agentq mcp: no AGENTQ_API_TOKENS set; send `Authorization: Bearer {auth.page_token}`",
                  flush=True)
        elif not auth.enabled:
            print("agentq mcp: authentication is off (--no-auth)", flush=True)

    threading.Thread(target=announce, name="agentq-mcp-announce", daemon=True).start()
