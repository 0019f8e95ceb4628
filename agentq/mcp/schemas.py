"""MCP tools as agentq tools (docs/mcp.md): names, and the tool schema each MCP tool's `inputSchema` and
`outputSchema` make.

The parameters are the `inputSchema`'s properties and its `required`; `_output` is the `outputSchema` when the
tool declares one (its result is then the call's `structuredContent`), else a string (the text of its content).
Local `$ref`s are inlined, since a tool schema is composed into the solution schema where the MCP schema's
root no longer is. A tool that cannot be a valid agentq tool (an invalid JSON Schema, a recursive or remote
`$ref`, a parameter named like a meta field) is refused here with the reason; the caller skips it.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from agentq.errors import AgentQError
from agentq.mcp.config import ServerConfig, ToolOptions
from agentq.protocol.tool_schema import check_tool_schema

__all__ = ["MCPToolRef", "SchemaRefused", "agentq_names", "tool_schema"]

_PROPERTY_KEY = re.compile(r"^[a-zA-Z0-9_.-]{1,64}$")  # what the Messages API accepts as a parameter name
_NOT_NAME = re.compile(r"[^A-Za-z0-9_-]")
_OUTPUT_PATH = {"type": "string", "pattern": "^†",
                "description": "Where the result is written, e.g. †state.x; `A && B` writes to both, `A || B` "
                               "branches."}


class SchemaRefused(AgentQError):
    """An MCP tool that cannot be served as an agentq tool; the message says why."""


@dataclass(frozen=True)
class MCPToolRef:
    """One MCP tool as agentq serves it: its agentq name, its server and its name there."""

    name: str
    server: ServerConfig
    tool: str

    @property
    def options(self) -> ToolOptions:
        return self.server.options_of(self.tool)


def _base_name(tool: str) -> str:
    name = _NOT_NAME.sub("_", tool)
    return (name if name[:1].isalpha() else f"t_{name}")[:128]


def agentq_names(listed: Iterable[tuple[ServerConfig, str]], taken: Iterable[str] = ()) -> list[MCPToolRef]:
    """The agentq name of each (server, MCP tool name): the tool's own name (characters an agentq name cannot
    hold become `_`), or `<server>__<tool>` when another server lists the same name or it is taken already (a
    tool or activity of the worker's modules)."""
    pairs = list(listed)
    counts = Counter(_base_name(tool) for _, tool in pairs)
    taken = set(taken)
    refs = []
    for server, tool in pairs:
        base = _base_name(tool)
        name = base if counts[base] == 1 and base not in taken else f"{server.name}__{base}"[:128]
        refs.append(MCPToolRef(name=name, server=server, tool=tool))
    return refs


def tool_schema(ref: MCPToolRef, tool: Any) -> dict:
    """The agentq tool schema of the MCP `tool` (an `mcp.types.Tool`); `SchemaRefused` if there is none."""
    inputs = _valid(tool.input_schema, "inputSchema")
    params = _parameters(inputs)
    output = _valid(tool.output_schema, "outputSchema") if tool.output_schema is not None else {"type": "string"}
    schema: dict[str, Any] = {
        "type": "object",
        "description": tool.description or tool.title or f"{tool.name} (MCP server {ref.server.name})",
        "properties": {**_meta_fields(ref), **params, "_output": output},
        "required": ["_tool", *[name for name in inputs.get("required", []) if name in params]],
        "x-display": {"friendly_name": tool.title or tool.name, "category": ref.server.name},
        "x-mcp": {"server": ref.server.name, "tool": ref.tool},  # `activities forget` unpublishes it with its activity
    }
    if ref.options.sensitive:
        schema["x-sensitive"] = list(ref.options.sensitive)
    try:
        return check_tool_schema(ref.name, schema)
    except AgentQError as error:
        raise SchemaRefused(str(error)) from None


def _parameters(inputs: dict) -> dict:
    params = inputs.get("properties", {})
    if not isinstance(params, dict):
        raise SchemaRefused("its inputSchema's properties are not an object")
    for key in params:
        if key.startswith("_") or not _PROPERTY_KEY.match(key):
            raise SchemaRefused(f"its parameter {key!r} cannot be an agentq parameter (names starting with '_' "
                                f"are meta fields; the model API accepts letters, digits, '_', '.', '-')")
    return params


def _meta_fields(ref: MCPToolRef) -> dict[str, Any]:
    meta: dict[str, Any] = {"_tool": {"type": "string", "const": ref.name}, "_outputPath": _OUTPUT_PATH}
    if ref.options.scopes:
        meta["_scopes"] = {"const": list(ref.options.scopes)}
    return meta


def _valid(schema: Any, what: str) -> dict:
    """`schema` checked as Draft 2020-12 with its local `$ref`s inlined."""
    if not isinstance(schema, Mapping):
        raise SchemaRefused(f"its {what} is not a JSON object")
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as error:
        pointer = "".join(f"/{part}" for part in error.absolute_path) or "/"
        raise SchemaRefused(f"its {what} is not a valid JSON Schema: {error.message} (at {pointer})") from None
    inlined = _inline(dict(schema), dict(schema), frozenset(), what)
    for key in ("$defs", "definitions", "$schema", "$id"):
        inlined.pop(key, None)
    return inlined


def _inline(node: Any, root: dict, expanding: frozenset[str], what: str) -> Any:
    if isinstance(node, list):
        return [_inline(item, root, expanding, what) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if not isinstance(ref, str):
        return {key: _inline(value, root, expanding, what) for key, value in node.items()}
    return _expanded(node, ref, root, expanding, what)


def _expanded(node: dict, ref: str, root: dict, expanding: frozenset[str], what: str) -> Any:
    """`node` with its `$ref` replaced by what it points to (the node's other keywords kept)."""
    if not ref.startswith("#"):
        raise SchemaRefused(f"its {what} has a $ref outside itself ({ref!r})")
    if ref in expanding:
        raise SchemaRefused(f"its {what} has a recursive $ref ({ref!r})")
    target = _inline(_resolve(root, ref, what), root, expanding | {ref}, what)
    siblings = {key: _inline(value, root, expanding, what) for key, value in node.items() if key != "$ref"}
    return {**target, **siblings} if isinstance(target, dict) else target


def _resolve(root: dict, ref: str, what: str) -> Any:
    node: Any = root
    for part in filter(None, ref[1:].split("/")):
        key = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and key in node:
            node = node[key]
        elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        else:
            raise SchemaRefused(f"its {what} has a $ref to nothing ({ref!r})")
    return node
