"""The long-running commands: `worker`, `dispatcher`, `api` and `metrics` start a process's part of the fleet
from the composition root and serve until stopped; `healthcheck` tells whether this host's workers are live."""

from __future__ import annotations

import argparse
import sys

from agentq.cli.common import local_tools
from agentq.errors import ConfigurationError


def cmd_worker(args: argparse.Namespace, *, engine: bool = False, activities: bool = True) -> int:
    from agentq.runtime.root import Runtime
    from agentq.runtime.worker import DEFAULT_MODULES, load_modules, serve

    mcp_config = getattr(args, "mcp", None)
    modules = args.module or (list(DEFAULT_MODULES) if activities and not mcp_config else [])
    registries = load_modules(args.settings, modules=modules, tool_dirs=args.tools)  # what the modules filled
    if mcp_config:  # the tools of MCP servers, each with an activity calling it (docs/mcp.md)
        from agentq.mcp import register_servers

        register_servers(mcp_config, registries.activities, registries.tools)
    runtime = Runtime(settings=args.settings, activities=registries.activities, tools=registries.tools)
    serve(runtime, activities=activities, engine=engine, concurrency=args.concurrency, pool=args.pool,
          loglevel=args.loglevel, hostname=args.hostname)
    return 0


def cmd_dispatcher(args: argparse.Namespace) -> int:
    return cmd_worker(args, engine=True, activities=bool(args.module))


def cmd_api(args: argparse.Namespace) -> int:
    """`agentq api`: the HTTP API and the web page (README.md#the-http-api-and-the-web-page). Embedded, it serves
    the example activities (those the page's example jobs call) unless `-m` says otherwise, and answers their model
    requests as `agentq demo --agent` does: from the configured provider, else from the packaged replay files."""
    from agentq.api.server import serve

    settings, modules = args.settings, args.module
    if args.embedded:
        from agentq.cli.examples import EXAMPLE_MODULES, with_packaged_replays

        settings, provider = with_packaged_replays(settings)
        modules = modules or list(EXAMPLE_MODULES)
        print(f"agentq api: LLM: {provider}", file=sys.stderr, flush=True)
    tools = local_tools(args.module, args.tools) if (args.module or args.tools) and not args.embedded else None
    serve(settings, host=args.host, port=args.port, auth_enabled=not args.no_auth, embedded=args.embedded,
          modules=modules, tool_dirs=args.tools, tools=tools)
    return 0


def cmd_healthcheck(args: argparse.Namespace) -> int:
    """`agentq healthcheck`: 0 when a worker or dispatcher of this host announced itself within two heartbeats,
    else 1 with one line saying why (for container healthchecks)."""
    from agentq.runtime import health
    from agentq.runtime.root import open_fleet, open_store

    settings = args.settings
    store = open_store(settings)
    try:
        verdict = health.check(open_fleet(store), hostname=args.hostname, role=args.role,
                               heartbeat_s=settings.heartbeat_s, timeout_s=args.timeout)
    finally:
        store.close()
    if verdict.healthy:
        print(verdict.message)
        return 0
    print(f"agentq healthcheck: {verdict.message}", file=sys.stderr)
    return 1


def cmd_metrics(args: argparse.Namespace) -> int:
    """`agentq metrics --port N`: serve the Prometheus metrics (docs/metrics.md) without the API."""
    import secrets

    from agentq.metrics import MetricsServer
    from agentq.runtime.root import connect

    settings = args.settings
    token = None if args.no_auth else (settings.metrics_token or secrets.token_urlsafe(24))
    parts = connect(settings)
    try:
        try:
            server = MetricsServer(parts, args.host, args.port, (token,) if token else ()).start()
        except OSError as error:
            raise ConfigurationError(f"cannot listen on {args.host}:{args.port}: {error.strerror or error}") from None
        print(f"agentq metrics: serving http://{args.host}:{server.port}/metrics", flush=True)
        if token and not settings.metrics_token:
            print(f"agentq metrics: no AGENTQ_METRICS_TOKEN set; scrape with `Authorization: Bearer {token}`",
                  flush=True)
        elif not token:
            print("agentq metrics: authentication is off (--no-auth)", flush=True)
        try:
            server.serve_forever()
        finally:
            server.stop()
    finally:
        parts.close()
    return 0
