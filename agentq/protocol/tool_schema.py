"""Tool schema checks: what registration requires of a tool schema (docs/protocol.md#tools), without any registry.

:func:`check_tool_schema` runs every check and returns the deep copy a registry stores; it changes nothing
anywhere, so a registry can check a whole batch of tools before it stores any of them.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from agentq.errors import ReferenceSyntaxError, RegistrationError, ToolSchemaError, UnknownMethodError
from agentq.protocol.cache import LRU
from agentq.protocol.call_keys import x_concurrency_problems
from agentq.protocol.sensitive import check_sensitive
from agentq.protocol.thinking import thinking_problems

__all__ = [
    "KNOWN_META_FIELDS",
    "OUTPUT_METHODS",
    "check_draft",
    "check_tool_schema",
    "is_valid_name",
    "tool_name_of",
]

#: The write methods of docs/protocol.md#output-paths (kept here as well so this module does not depend on
#: ``values.py``).
OUTPUT_METHODS: frozenset[str] = frozenset({"set", "merge", "assign", "push", "concat"})

#: Meta fields docs/protocol.md#tools defines on a tool schema. Other ``_`` names are allowed (forward
#: compatible) unless they look like a misspelling of one of these.
KNOWN_META_FIELDS: tuple[str, ...] = (
    "_tool",
    "_activity",
    "_reasoningForCall",
    "_outputPath",
    "_outputMethod",
    "_scopes",
    "_imports",
    "_instance",
    "_module",
    "_output",
)

_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,127}$")

def is_valid_name(name: object) -> bool:
    """True for an identifier-like name: a letter, then letters, digits, ``_`` or ``-`` (≤ 128 chars)."""
    return isinstance(name, str) and bool(_NAME_RE.match(name))


def tool_name_of(schema: object) -> str | None:
    """The ``properties._tool.const`` of a tool schema, or None when it has none."""
    if not isinstance(schema, Mapping):
        return None
    props = schema.get("properties")
    if not isinstance(props, Mapping):
        return None
    tool = props.get("_tool")
    if not isinstance(tool, Mapping):
        return None
    const = tool.get("const")
    return const if isinstance(const, str) else None


def _pointer(parts: Any) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def _schema_error(name: str, keyword: str, pointer: str, message: str) -> ToolSchemaError:
    err = ToolSchemaError(f"tool {name!r}: {message} (keyword {keyword!r} at {pointer or '/'})")
    # Extra structured detail for callers that want it (the message already says everything).
    err.tool, err.keyword, err.pointer = name, keyword, pointer
    return err


def _json_copy(name: str, schema: Any) -> dict:
    """A deep copy through JSON: proves the schema is plain JSON (it is published to the store as JSON)."""
    try:
        text = json.dumps(schema, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise _schema_error(name, "$schema", "", f"the schema is not plain JSON ({exc})") from None
    return json.loads(text)


# --------------------------------------------------------------------------------------------- checks


_VALID_SCHEMAS: LRU[str, bool] = LRU(4096)  # canonical JSON of schemas that passed the metaschema check


def check_draft(schema: Any) -> None:
    """The Draft 2020-12 metaschema check (``SchemaError`` for an invalid schema; about 5 ms a tool). Schemas
    that passed are remembered by their canonical JSON, since every job submission registers its tools again in
    a job-local registry and names its output schema, most often the same as the job before."""
    try:
        key: str | None = json.dumps(schema, sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError):  # not JSON (a test's Python object): checked every time
        key = None
    if key is not None and _VALID_SCHEMAS.get(key):
        return
    Draft202012Validator.check_schema(schema)
    if key is not None:
        _VALID_SCHEMAS.put(key, True)


def _check_draft(name: str, schema: dict) -> None:
    try:
        check_draft(schema)
    except SchemaError as exc:
        parts = list(exc.path)
        keyword = next((p for p in reversed(parts) if isinstance(p, str)), None) or str(exc.validator)
        raise _schema_error(
            name, keyword, _pointer(parts), f"not a valid Draft 2020-12 JSON Schema: {exc.message}"
        ) from None


def _check_output_method(name: str, spec: Any) -> None:
    ptr = "/properties/_outputMethod"
    if not isinstance(spec, dict):
        raise _schema_error(name, "_outputMethod", ptr, "_outputMethod must be a schema with an enum of methods")
    if "enum" in spec:
        values, kw = spec["enum"], "enum"
    elif "const" in spec:
        values, kw = [spec["const"]], "const"
    else:
        raise _schema_error(
            name, "_outputMethod", ptr,
            "_outputMethod must declare an enum of methods, e.g. {\"enum\": [\"set\", \"merge\"]}",
        )
    unknown = [v for v in values if v not in OUTPUT_METHODS]
    if unknown:
        raise UnknownMethodError(
            f"tool {name!r}: _outputMethod {kw} has unknown method(s) {unknown!r} "
            f"(keyword {kw!r} at {ptr}/{kw}); allowed: {', '.join(sorted(OUTPUT_METHODS))}"
        )


# one branch per way a provisioned or requested kind list can be malformed, each with its own pointer
def _check_kind_list(name: str, field: str, spec: Any) -> None:
    ptr = f"/properties/{field}"
    hint = (
        f"{field} must be {{\"const\": [\"state\", ...]}} (provisioned) or "
        f"{{\"type\": \"array\", \"items\": {{\"enum\": [...]}}}} (requested)"
    )
    if not isinstance(spec, dict):
        raise _schema_error(name, field, ptr, hint)
    if "const" in spec:
        const = spec["const"]
        if not isinstance(const, list) or not all(isinstance(k, str) for k in const):
            raise _schema_error(name, "const", ptr + "/const", f"{field} const must be a list of strings")
        return
    items = spec.get("items")
    if spec.get("type") != "array" or not isinstance(items, dict) or "enum" not in items:
        raise _schema_error(name, field, ptr, hint)
    if not all(isinstance(k, str) for k in items["enum"]):
        raise _schema_error(name, "enum", ptr + "/items/enum", f"{field} items enum must list strings")


def _check_expression(name: str, keyword: str, pointer: str, text: Any) -> None:
    from agentq.protocol.expressions import parse_expression  # written beside this module; imported lazily

    if not isinstance(text, str):
        raise _schema_error(name, keyword, pointer, f"_outputPath {keyword} must be a string, got {text!r}")
    try:
        parse_expression(text)
    except ReferenceSyntaxError as exc:
        raise _schema_error(name, keyword, pointer,
                            f"_outputPath {keyword} {text!r} is not an output path: {exc}") from None


def _check_output_path(name: str, spec: Any) -> None:
    ptr = "/properties/_outputPath"
    hint = (
        "_outputPath must be {\"type\": \"string\", \"pattern\": \"^†\"} (free path) "
        "or {\"const\": \"†state.x\"} (fixed path)"
    )
    if not isinstance(spec, dict):
        raise _schema_error(name, "_outputPath", ptr, hint)
    if "const" in spec:
        _check_expression(name, "const", ptr + "/const", spec["const"])
        return
    if "enum" in spec:
        for i, text in enumerate(spec["enum"]):
            _check_expression(name, "enum", f"{ptr}/enum/{i}", text)
        return
    if spec.get("type") != "string":
        raise _schema_error(name, "type", ptr, hint)
    pattern = spec.get("pattern")
    if not isinstance(pattern, str) or not pattern.startswith("^†"):
        raise _schema_error(name, "pattern", ptr + "/pattern", f"{hint}; the pattern must start with '^†'")


def _check_const_string(name: str, field: str, spec: Any, *, allow_empty: bool) -> None:
    ptr = f"/properties/{field}"
    if not isinstance(spec, dict) or not isinstance(spec.get("const"), str):
        raise _schema_error(name, field, ptr, f"{field} must be {{\"const\": \"<name>\"}}")
    if not allow_empty and not spec["const"]:
        raise _schema_error(name, "const", ptr + "/const", f"{field} const must not be empty")


def _check_meta_names(name: str, props: dict) -> None:
    for key in props:
        if not key.startswith("_") or key in KNOWN_META_FIELDS:
            continue
        close = [k for k in KNOWN_META_FIELDS if k.lower() == key.lower()]
        close = close or difflib.get_close_matches(key, KNOWN_META_FIELDS, n=1, cutoff=0.85)
        if close:
            raise _schema_error(
                name, key, f"/properties/{key}", f"unknown meta field {key!r}: did you mean {close[0]!r}?"
            )


def check_tool_schema(name: str, schema: Any) -> dict:
    """Run every registration check on ``schema`` registered as ``name``; return a deep copy to store.

    Raises :class:`ToolSchemaError` (naming the tool, the keyword and its JSON pointer),
    :class:`UnknownMethodError` for an ``_outputMethod`` outside set/merge/assign/push/concat, or
    :class:`RegistrationError` for a name that is not identifier-like. Changes nothing anywhere.
    """
    if not is_valid_name(name):
        raise RegistrationError(
            f"invalid tool name {name!r}: use a letter followed by letters, digits, '_' or '-' (max 128)"
        )
    if not isinstance(schema, Mapping):
        raise _schema_error(name, "type", "", f"a tool schema must be a JSON object, got {type(schema).__name__}")
    copy = _json_copy(name, schema)
    _check_draft(name, copy)
    props = _check_object(name, copy)
    _check_identity(name, props)
    _check_meta_names(name, props)
    _check_meta_fields(name, props)
    check_sensitive(name, copy)
    for problem in thinking_problems(copy.get("x-thinking"), "/x-thinking"):
        raise _schema_error(name, "x-thinking", problem.pointer, problem.message)
    if "x-concurrency" in copy:
        problems = x_concurrency_problems(copy["x-concurrency"])
        if problems:
            raise _schema_error(name, "x-concurrency", problems[0].pointer,
                                "; ".join(f"{p.message} at {p.pointer}" for p in problems))
    return copy


def _check_object(name: str, copy: dict) -> dict:
    """The schema's ``properties``, once it is shown to be an object schema with some."""
    if copy.get("type") != "object":
        raise _schema_error(name, "type", "/type",
                            f"a tool schema must have \"type\": \"object\", got {copy.get('type')!r}")
    props = copy.get("properties")
    if not isinstance(props, dict):
        raise _schema_error(name, "properties", "/properties",
                            "a tool schema needs \"properties\" with _tool and _output")
    return props


def _check_identity(name: str, props: dict) -> None:
    """``_tool`` names the tool as registered, and ``_output`` is a schema."""
    tool = props.get("_tool")
    if not isinstance(tool, dict) or "const" not in tool:
        raise _schema_error(
            name, "_tool", "/properties/_tool",
            f"tool {name!r} has no _tool const: add properties._tool = {{\"type\": \"string\", \"const\": {name!r}}}",
        )
    if tool["const"] != name:
        raise _schema_error(
            name, "const", "/properties/_tool/const",
            f"properties._tool.const is {tool['const']!r} but the tool is registered as {name!r}",
        )
    if "_output" not in props:
        raise _schema_error(
            name, "_output", "/properties/_output",
            f"tool {name!r} has no _output: add properties._output with the JSON Schema of its result",
        )
    if not isinstance(props["_output"], (dict, bool)):
        raise _schema_error(name, "_output", "/properties/_output", "_output must be a JSON Schema")


def _check_meta_fields(name: str, props: dict) -> None:
    """The meta fields present: ``_outputMethod``, ``_scopes``/``_imports``, ``_outputPath``, ``_module``,
    ``_activity``."""
    if "_outputMethod" in props:
        _check_output_method(name, props["_outputMethod"])
    for field in ("_scopes", "_imports"):
        if field in props:
            _check_kind_list(name, field, props[field])
    if "_outputPath" in props:
        _check_output_path(name, props["_outputPath"])
    if "_module" in props:
        _check_const_string(name, "_module", props["_module"], allow_empty=False)
    if "_activity" in props:
        _check_const_string(name, "_activity", props["_activity"], allow_empty=True)
        activity = props["_activity"]["const"]
        if activity and not is_valid_name(activity):
            raise _schema_error(name, "const", "/properties/_activity/const",
                                f"_activity {activity!r} is not a valid activity name")
