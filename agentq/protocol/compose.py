"""Schema composition: tools + live activities + output → the solution schema (docs/protocol.md#activities).

:func:`compose_tool` turns one tool schema into its composed form: ``_activity`` resolved, meta fields first
(``_tool``, ``_activity``, ``_reasoningForCall``, the other meta fields in the tool's order), then the
parameters in the tool's order, ``_output`` last and nullable. :func:`compose` sorts the tools by name and
wraps them into the solution schema::

    {"type": "object", "properties": {
      "calls": {"type": "array", "items": {"anyOf": [<composed tools>]}},
      "output": {"anyOf": [<output>, {"type": "null"}]}},
     "required": ["calls", "output"]}

With no tools (an anonymous module, a job that lists none) ``calls`` is ``{"type": "array", "maxItems": 0}``:
an empty ``anyOf`` is not a valid JSON Schema (Draft 2020-12 wants a non-empty array), and the Messages API
refuses a tool whose ``input_schema`` is invalid. Every solution schema is a valid Draft 2020-12 schema.

Determinism: the same tools and live activities give identical :func:`solution_bytes` whatever the order of
registration or of the input list (key order *inside* a tool schema is kept: it is meaningful to the LLM).

Caching: :func:`compose` returns a cached object for inputs it has seen. **The returned schema is shared and
must not be mutated** (copy it first). Cache keys:

* a :class:`ToolRegistry`: ``(registry.version, live, output JSON, plan)``; versions are unique process-wide
  (every change of any registry takes a new one), so a version names one registry's contents;
* a list / mapping of schemas: a fingerprint of their JSON text (order-preserving), so a schema changed in
  place composes afresh.

Module resolution ``"x-module-resolution": "upfront"``: when a ``module_loader(name) -> dict`` is given and a
tool has ``_module`` (not ``"anonymous"``) and ``"x-module-resolution": "upfront"``, the loader's module
``{"input": <schema>, "output": <schema>, ...}`` is merged in: the properties of ``input`` become parameters
(a same-named tool parameter is replaced in place, new ones are appended; ``_``-prefixed names are ignored),
its ``required`` is added, and ``output`` replaces ``_output``. Without a loader such tools are composed
unchanged. Compositions that called the loader are not cached (the module file may change).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

from agentq.errors import DuplicateRegistrationError, ToolSchemaError
from agentq.protocol.cache import LRU
from agentq.protocol.tools import ToolRegistry, tool_name_of
from agentq.protocol.values import copy_json

__all__ = [
    "REASONING_FOR_CALL",
    "clear_cache",
    "compose",
    "compose_tool",
    "composed_tools",
    "solution_bytes",
]

#: The ``_reasoningForCall`` property composition adds (unless the tool defines its own).
REASONING_FOR_CALL: dict[str, str] = {
    "type": "string",
    "description": "Why this call is made; shown to the user as a thought.",
}

_FIRST = ("_tool", "_activity", "_reasoningForCall")
_NULL = {"type": "null"}
_CACHE_SIZE = 256

ModuleLoader = Callable[[str], Mapping[str, Any]]


def _live_set(live_activities: Iterable[str] | None) -> frozenset[str]:
    if not live_activities:
        return frozenset()
    if isinstance(live_activities, str):
        return frozenset((live_activities,))
    return frozenset(live_activities)


def _resolve_activity(props: Mapping[str, Any], name: str, live: frozenset[str]) -> str:
    explicit = props.get("_activity")
    if isinstance(explicit, Mapping) and isinstance(explicit.get("const"), str) and explicit["const"]:
        return explicit["const"]
    return name if name in live else ""


def _upfront_module(schema: Mapping[str, Any], props: Mapping[str, Any],
                    loader: ModuleLoader | None) -> Mapping[str, Any] | None:
    if loader is None or schema.get("x-module-resolution") != "upfront":
        return None
    module = props.get("_module")
    ref = module.get("const") if isinstance(module, Mapping) else None
    if not isinstance(ref, str) or not ref or ref == "anonymous":
        return None
    return loader(ref)


def _compose(schema: Mapping[str, Any], live: frozenset[str], loader: ModuleLoader | None) -> tuple[dict, bool]:
    """(composed tool, whether a module loader was used)."""
    name, props = _named_props(schema)
    module = _upfront_module(schema, props, loader)
    out_props, params = _split_props(name, props, live)
    output = copy_json(props["_output"])
    required = ["_tool"] + [r for r in schema.get("required", ()) if r != "_tool"]
    if module is not None:
        output = _merge_module(module, params, required, output)
    out_props.update(params)
    out_props["_output"] = {"anyOf": [output, dict(_NULL)]}
    return _wrap(schema, out_props, required), module is not None


def _named_props(schema: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    """The tool's name and properties; ToolSchemaError without ``_tool`` or ``_output``."""
    name = tool_name_of(schema)
    if name is None:
        raise ToolSchemaError(
            "a tool schema must be a JSON object with properties._tool.const naming the tool "
            "(keyword '_tool' at /properties/_tool)"
        )
    props = schema["properties"]
    if "_output" not in props:
        raise ToolSchemaError(
            f"tool {name!r} has no _output: add properties._output with the JSON Schema of its result "
            f"(keyword '_output' at /properties/_output)"
        )
    return name, props


def _split_props(name: str, props: Mapping[str, Any], live: frozenset[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(meta fields, first ``_tool``, ``_activity``, ``_reasoningForCall``; parameters), copied in the tool's
    order, ``_output`` left out."""
    meta: dict[str, Any] = {
        "_tool": {"type": "string", "const": name},
        "_activity": {"type": "string", "const": _resolve_activity(props, name, live)},
        "_reasoningForCall": (copy_json(props["_reasoningForCall"]) if "_reasoningForCall" in props
                              else dict(REASONING_FOR_CALL)),
    }
    params: dict[str, Any] = {}
    for key, value in props.items():
        if key in _FIRST or key == "_output":
            continue
        if key.startswith("_"):
            meta[key] = copy_json(value)
        else:
            params[key] = copy_json(value)
    return meta, params


def _merge_module(module: Mapping[str, Any], params: dict[str, Any], required: list[str], output: Any) -> Any:
    """Merge an upfront module's ``input`` into ``params`` and ``required`` (in place); return the output
    schema (the module's ``output`` when it has one)."""
    m_input = module.get("input")
    if isinstance(m_input, Mapping):
        for key, value in (m_input.get("properties") or {}).items():
            if not key.startswith("_"):
                params[key] = copy_json(value)
        required += [r for r in m_input.get("required", ()) if r not in required and not r.startswith("_")]
    if "output" in module and module["output"] is not None:
        return copy_json(module["output"])
    return output


def _wrap(schema: Mapping[str, Any], out_props: dict[str, Any], required: list[str]) -> dict:
    """The tool's own keywords in their order, with the composed properties and ``required``."""
    composed: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "properties":
            composed["properties"] = out_props
            if "required" not in schema:
                composed["required"] = required
        elif key == "required":
            composed["required"] = required
        else:
            composed[key] = copy_json(value)
    return composed


def compose_tool(
    schema: Mapping[str, Any],
    live_activities: Iterable[str] = (),
    *,
    module_loader: ModuleLoader | None = None,
) -> dict:
    """The composed form of one tool schema (a new dict; the input is not modified).

    ``_activity`` resolution: an explicit non-empty ``_activity`` const is kept; else the tool's name if an
    activity of that name is live; else ``""`` (latent).
    """
    return _compose(schema, _live_set(live_activities), module_loader)[0]


# ------------------------------------------------------------------------------------------ solution


_cache: LRU[Any, dict] = LRU(_CACHE_SIZE)


def clear_cache() -> None:
    """Forget every cached composition (tests and benchmarks use this to measure cold composition)."""
    _cache.clear()


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _tool_list(
        tools: ToolRegistry | Mapping[str, Any] | Iterable[Mapping[str, Any]]) -> list[tuple[str, Mapping[str, Any]]]:
    """(name, schema) pairs sorted by name; checks names and duplicates."""
    if isinstance(tools, ToolRegistry):
        return list(tools.snapshot().items())
    pairs: dict[str, Mapping[str, Any]] = {}
    if isinstance(tools, Mapping):
        items: Iterable[tuple[str | None, Any]] = tools.items()
    else:
        items = ((None, s) for s in tools)
    for key, schema in items:
        name = _listed_name(key, schema)
        if name in pairs and _dumps(pairs[name]) != _dumps(schema):
            raise DuplicateRegistrationError(f"tool {name!r} is listed twice with different schemas")
        pairs[name] = schema
    return sorted(pairs.items())


def _listed_name(key: str | None, schema: Any) -> str:
    """The name a tool schema gives itself, which must be the one it is listed under (`key`, when listed)."""
    name = tool_name_of(schema)
    if name is None:
        label = f"tool {key!r}" if key is not None else "a tool schema"
        raise ToolSchemaError(
            f"{label} has no properties._tool.const naming it (keyword '_tool' at /properties/_tool)")
    if key is not None and key != name:
        raise ToolSchemaError(
            f"tool {key!r}: properties._tool.const is {name!r} but the tool is listed as {key!r} "
            f"(keyword 'const' at /properties/_tool/const)"
        )
    return name


def composed_tools(solution_schema: Mapping[str, Any]) -> list[dict]:
    """The composed tool schemas inside a solution schema (``properties.calls.items.anyOf``; none when
    ``calls`` has no ``items``, as for a job without tools)."""
    try:
        tools = solution_schema["properties"]["calls"]["items"]["anyOf"]
    except (KeyError, TypeError):
        return []
    return list(tools) if isinstance(tools, list) else []


def _calls_schema(composed: list[dict]) -> dict:
    """``calls``: an array of the composed tools; with none, an array that must stay empty."""
    if not composed:
        return {"type": "array", "maxItems": 0}
    return {"type": "array", "items": {"anyOf": composed}}


def compose(
    tools: ToolRegistry | Mapping[str, Any] | Iterable[Mapping[str, Any]],
    live_activities: Iterable[str] = (),
    output: Mapping[str, Any] | bool | None = None,
    *,
    plan: bool = False,
    module_loader: ModuleLoader | None = None,
) -> dict:
    """The solution schema for ``tools`` (a registry, a list of tool schemas, or a mapping name → schema).

    ``output`` is the job's output schema; without one a plan job (``plan=True``) gets ``output: {"type":
    "null"}`` and an agent job ``{"anyOf": [{"type": "string"}, {"type": "null"}]}``. The result is cached
    and shared: **do not mutate it**.
    """
    live = _live_set(live_activities)
    out_key = None if output is None else _dumps(output)
    if isinstance(tools, ToolRegistry):
        key: Any = ("registry", tools.version, live, out_key, plan, module_loader is not None)
        pairs = None
    else:
        pairs = _tool_list(tools)
        digest = hashlib.blake2b(digest_size=20)
        for name, schema in pairs:
            digest.update(_dumps([name, schema]).encode("utf-8"))
        key = ("list", digest.hexdigest(), live, out_key, plan, module_loader is not None)
    cached = _cache.get(key)
    if cached is not None:
        return cached

    stable = True
    if pairs is None:
        registry = cast(ToolRegistry, tools)  # pairs is None only for a registry
        version = registry.version
        pairs = _tool_list(tools)
        stable = registry.version == version == key[1]
    composed: list[dict] = []
    used_loader = False
    for _, schema in pairs:
        tool, loaded = _compose(schema, live, module_loader)
        composed.append(tool)
        used_loader = used_loader or loaded

    solution = {
        "type": "object",
        "properties": {
            "calls": _calls_schema(composed),
            "output": _output_schema(output, plan=plan),
        },
        "required": ["calls", "output"],
    }
    if used_loader or not stable:
        return solution
    return _cache.put(key, solution)


def _output_schema(output: Mapping[str, Any] | bool | None, *, plan: bool) -> dict[str, Any]:
    """The solution's `output`: the job's output schema or null; without one, null for a plan job and a string
    or null for an agent job."""
    if output is not None:
        return {"anyOf": [copy_json(output), dict(_NULL)]}
    if plan:
        return dict(_NULL)
    return {"anyOf": [{"type": "string"}, dict(_NULL)]}


def solution_bytes(schema: Any) -> bytes:
    """Compact UTF-8 JSON of a (solution) schema, keys in their meaningful order (not sorted).

    """
    return _dumps(schema).encode("utf-8")
