"""The `agentq worker --mcp FILE` configuration: the `mcpServers` JSON format MCP clients share (docs/mcp.md).

    {"mcpServers": {
       "files":  {"command": "npx", "args": ["-y", "some-mcp-server"], "env": {"TOKEN": "..."}},
       "search": {"url": "https://search.example/mcp", "headers": {"Authorization": "Bearer ..."}}}}

A server with `command` runs as a subprocess spoken to over stdio; one with `url` is reached over streamable
HTTP. agentq reads one more, optional, key per server: `"agentq"`, the options its tools' activities and
schemas get (retries, timeout, queue, rate limit; per tool also scopes and sensitive parameters):

    "agentq": {"retries": 2, "retry_backoff": 1, "timeout": 30, "queue": null, "rate_limit": null,
               "tools": {"charge": {"sensitive": ["/card"], "scopes": ["state"], "retries": 0}}}

Every problem of the file is reported at once, each with its JSON pointer, in one `ConfigurationError`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentq.errors import ConfigurationError
from agentq.protocol.tool_schema import is_valid_name

__all__ = ["ServerConfig", "ToolOptions", "load_config", "parse_config"]

_ACTIVITY_OPTIONS = ("retries", "retry_backoff", "timeout", "queue", "rate_limit")
_TOOL_OPTIONS = (*_ACTIVITY_OPTIONS, "sensitive", "scopes")
_STDIO_KEYS = ("command", "args", "env", "cwd")
_HTTP_KEYS = ("url", "headers")
_OTHER_KEYS = ("agentq", "type", "disabled", "description")  # `type` and `disabled` as other MCP clients write them


@dataclass(frozen=True)
class ToolOptions:
    """The agentq options of one MCP tool: its activity's options and what its schema adds."""

    retries: int = 0
    retry_backoff: float = 1.0
    timeout: float | None = None
    queue: str | None = None
    rate_limit: str | None = None
    sensitive: tuple[str, ...] = ()  # JSON pointers into the parameters (the tool's `x-sensitive`)
    scopes: tuple[str, ...] = ()     # context kinds the call is given (`_scopes`), sent in the request's `_meta`

    def activity_options(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _ACTIVITY_OPTIONS}


@dataclass(frozen=True)
class ServerConfig:
    """One MCP server: how to reach it (`command` for stdio, else `url`) and the options of its tools."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    defaults: ToolOptions = ToolOptions()
    tools: Mapping[str, ToolOptions] = field(default_factory=dict)

    @property
    def transport(self) -> str:
        return "stdio" if self.command is not None else "streamable HTTP"

    def options_of(self, tool: str) -> ToolOptions:
        return self.tools.get(tool, self.defaults)


def load_config(path: str | Path) -> list[ServerConfig]:
    """The servers of the file at `path`; `ConfigurationError` (one line per problem) if it cannot be used."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigurationError(f"MCP config {path}: cannot read it: {getattr(error, 'strerror', None) or error}") \
            from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigurationError(f"MCP config {path}: not JSON: {error.msg} at line {error.lineno} column "
                                 f"{error.colno}") from None
    return parse_config(document, source=f"MCP config {path}")


def parse_config(document: Any, *, source: str = "MCP config") -> list[ServerConfig]:
    problems: list[str] = []
    servers: list[ServerConfig] = []
    entries = document.get("mcpServers") if isinstance(document, dict) else None
    if not isinstance(entries, dict):
        problems.append('/mcpServers: expected an object of servers by name: {"mcpServers": {"name": {...}}}')
        entries = {}
    for name, entry in entries.items():
        server = _server(name, entry, f"/mcpServers/{_escape(name)}", problems)
        if server is not None:
            servers.append(server)
    if problems:
        head = f"{source}: " + ("; ".join(problems) if len(problems) == 1 else f"{len(problems)} problems: ")
        raise ConfigurationError(head if len(problems) == 1 else head + "; ".join(problems))
    return servers


def _escape(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


def _server(name: str, entry: Any, pointer: str, problems: list[str]) -> ServerConfig | None:
    before = len(problems)
    if not is_valid_name(name):
        problems.append(f"{pointer}: server name {name!r} must be a letter followed by letters, digits, '_' or '-'")
    if not isinstance(entry, dict):
        problems.append(f"{pointer}: expected an object with \"command\" (stdio) or \"url\" (streamable HTTP)")
        return None
    if entry.get("disabled") is True:
        return None
    unknown = sorted(set(entry) - {*_STDIO_KEYS, *_HTTP_KEYS, *_OTHER_KEYS})
    problems.extend(f"{pointer}/{_escape(key)}: unknown key (known: command, args, env, cwd, url, headers, agentq)"
                    for key in unknown)
    transport = _transport(entry, pointer, problems)
    defaults, tools = _agentq_options(entry.get("agentq", {}), f"{pointer}/agentq", problems)
    if len(problems) > before:
        return None
    return ServerConfig(name=name, defaults=defaults, tools=tools, **transport)


def _transport(entry: dict, pointer: str, problems: list[str]) -> dict[str, Any]:
    has_command, has_url = "command" in entry, "url" in entry
    if has_command == has_url:
        problems.append(f"{pointer}: give either \"command\" (a stdio server) or \"url\" (streamable HTTP)"
                        + (", not both" if has_command else ""))
        return {}
    if has_command:
        return {"command": _string(entry["command"], f"{pointer}/command", problems),
                "args": tuple(_strings(entry.get("args", []), f"{pointer}/args", problems)),
                "env": _string_map(entry.get("env", {}), f"{pointer}/env", problems),
                "cwd": _string(entry["cwd"], f"{pointer}/cwd", problems) if "cwd" in entry else None}
    url = _string(entry["url"], f"{pointer}/url", problems)
    if url is not None and not url.startswith(("http://", "https://")):
        problems.append(f"{pointer}/url: expected an http:// or https:// URL, got {url!r}")
    return {"url": url, "headers": _string_map(entry.get("headers", {}), f"{pointer}/headers", problems)}


def _string(value: Any, pointer: str, problems: list[str]) -> str | None:
    if isinstance(value, str) and value:
        return value
    problems.append(f"{pointer}: expected a non-empty string, got {json.dumps(value)}")
    return None


def _strings(value: Any, pointer: str, problems: list[str]) -> list[str]:
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return value
    problems.append(f"{pointer}: expected an array of strings")
    return []


def _string_map(value: Any, pointer: str, problems: list[str]) -> dict[str, str]:
    if isinstance(value, dict) and all(isinstance(item, str) for item in value.values()):
        return dict(value)
    problems.append(f"{pointer}: expected an object of strings")
    return {}


def _agentq_options(value: Any, pointer: str, problems: list[str]) -> tuple[ToolOptions, dict[str, ToolOptions]]:
    if not isinstance(value, dict):
        problems.append(f"{pointer}: expected an object of options")
        return ToolOptions(), {}
    server_level = {key: item for key, item in value.items() if key != "tools"}
    defaults = _options(server_level, pointer, problems, ToolOptions())
    tools_value = value.get("tools", {})
    if not isinstance(tools_value, dict):
        problems.append(f"{pointer}/tools: expected an object of options by tool name")
        return defaults, {}
    tools = {tool: _options(options, f"{pointer}/tools/{_escape(tool)}", problems, defaults)
             for tool, options in tools_value.items()}
    return defaults, tools


def _options(value: Any, pointer: str, problems: list[str], base: ToolOptions) -> ToolOptions:
    if not isinstance(value, dict):
        problems.append(f"{pointer}: expected an object of options")
        return base
    fields: dict[str, Any] = {}
    for key, item in value.items():
        if key not in _TOOL_OPTIONS:
            problems.append(f"{pointer}/{_escape(key)}: unknown option (known: {', '.join(_TOOL_OPTIONS)}, tools)")
            continue
        problem = _option_problem(key, item)
        if problem:
            problems.append(f"{pointer}/{key}: {problem}")
        else:
            fields[key] = tuple(item) if key in ("sensitive", "scopes") else item
    return ToolOptions(**{**base.__dict__, **fields})


def _is_seconds(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def _is_pointers(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(p, str) and p.startswith("/") for p in value)


def _is_kinds(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(k, str) and k for k in value)


# option -> (accepts the value, what it expects); the activity registry checks the ranges again at registration
_CHECKS: dict[str, tuple[Any, str]] = {
    "retries": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "an integer >= 0"),
    "retry_backoff": (_is_seconds, "a number of seconds > 0"),
    "timeout": (lambda v: v is None or _is_seconds(v), "a number of seconds > 0 or null"),
    "queue": (lambda v: v is None or (isinstance(v, str) and bool(v)), "a queue name or null"),
    "rate_limit": (lambda v: v is None or (isinstance(v, str) and bool(v)), "a rate like \"10/s\" or null"),
    "sensitive": (_is_pointers, "an array of JSON pointers into the parameters, e.g. [\"/password\"]"),
    "scopes": (_is_kinds, "an array of context kinds, e.g. [\"state\"]"),
}


def _option_problem(key: str, value: Any) -> str | None:
    accepts, expected = _CHECKS[key]
    return None if accepts(value) else f"expected {expected}, got {json.dumps(value)}"
