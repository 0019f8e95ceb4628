"""`agentq api`: serve the HTTP API and the web page with uvicorn (README.md#the-http-api-and-the-web-page).

With no `AGENTQ_API_TOKENS`, a random token is made at start and the page's URL is printed with it, so the
port is never open without auth; `--no-auth` turns auth off explicitly (and says so). `--embedded` serves a
private Redis with in-process workers for the example activities, so the page can be tried on a fresh machine.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from agentq.api.app import create_api
from agentq.api.auth import ApiAuth
from agentq.settings import Settings

if TYPE_CHECKING:
    from agentq.protocol.tools import ToolRegistry
    from agentq.runtime.root import Parts

log = logging.getLogger("agentq.api")


def serve(settings: Settings, *, host: str = "127.0.0.1", port: int = 8000, auth_enabled: bool = True,
          embedded: bool = False, modules: Iterable[str] = (), tool_dirs: Iterable[Path | str] = (),
          tools: ToolRegistry | None = None, out: Callable[[str], None] | None = None) -> None:
    """Run the API until interrupted."""
    import uvicorn

    say = out or (lambda line: print(line, file=sys.stderr, flush=True))
    auth = ApiAuth.configure(settings.api_tokens, enabled=auth_enabled)
    with _deployment(settings, embedded=embedded, modules=modules, tool_dirs=tool_dirs, tools=tools) as parts:
        app = create_api(parts, auth=auth)
        for line in banner(auth, host, port, embedded=embedded):
            say(line)
        config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False,
                                timeout_graceful_shutdown=5, server_header=False)
        uvicorn.Server(config).run()


def banner(auth: ApiAuth, host: str, port: int, *, embedded: bool = False) -> list[str]:
    """What `agentq api` prints at start: where the page is, and how to authenticate."""
    shown = host if host not in ("0.0.0.0", "::", "") else "127.0.0.1"
    if ":" in shown:
        shown = f"[{shown}]"
    url = f"http://{shown}:{port}/"
    lines = [f"agentq api: serving on {url}" + (" (embedded: private Redis, in-process workers)" if embedded else "")]
    if not auth.enabled:
        lines.append("agentq api: authentication is OFF (--no-auth): anyone who reaches this port can use it")
        if not _is_loopback(host):
            lines.append(f"agentq api: warning: {host} is reachable from other machines")
    elif auth.generated:
        lines.append(f"agentq api: no AGENTQ_API_TOKENS set; this run's token is {auth.page_token}")
        lines.append(f"agentq api: open {url}?token={auth.page_token}")
    else:
        lines.append("agentq api: bearer tokens from AGENTQ_API_TOKENS; open the page with ?token=<token>")
    return lines


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@contextlib.contextmanager
def _deployment(settings: Settings, *, embedded: bool, modules: Iterable[str], tool_dirs: Iterable[Path | str],
                tools: ToolRegistry | None) -> Iterator[Parts]:
    """The parts to serve with: the composition root's for `settings`, or those of a private embedded
    deployment (built once, shared with its in-process workers)."""
    if not embedded:
        from agentq.runtime.root import connect

        parts = connect(settings, tools=tools)
        try:
            yield parts
        finally:
            parts.close()
        return
    from agentq.runtime.embedded import Embedded

    with Embedded(modules=list(modules) or ["workers"], tool_dirs=tool_dirs, settings=settings) as runtime:
        yield runtime.parts
