"""JSON input with a nesting limit: decoding and checking never recurse deeper than the limit allows.

Python's `json` module recurses once per nesting level, so a job nested 10,000 deep would raise
`RecursionError` deep inside it; these helpers find such input first, iteratively, and report it as a
`Problem` with the pointer of the first value past the limit.
"""

from __future__ import annotations

import json
from typing import Any

from agentq.errors import Problem


def text_depth_problem(text: str, max_depth: int) -> Problem | None:
    """A problem when JSON `text` nests deeper than `max_depth` (arrays and objects), else None.

    One pass over the text, aware of strings and escapes; it does not validate the JSON otherwise."""
    depth = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > max_depth:
                return _too_deep(max_depth, "")
        elif char in "]}":
            depth -= 1
    return None


def value_depth_problem(value: Any, max_depth: int) -> Problem | None:
    """A problem when a decoded JSON value nests deeper than `max_depth`, naming where (iterative)."""
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    while stack:
        item, pointer, depth = stack.pop()
        if isinstance(item, dict):
            children = [(v, f"{pointer}/{_escape(str(k))}") for k, v in item.items()]
        elif isinstance(item, (list, tuple)):
            children = [(v, f"{pointer}/{i}") for i, v in enumerate(item)]
        else:
            continue
        if depth + 1 > max_depth:
            return _too_deep(max_depth, pointer)
        stack.extend((child, where, depth + 1) for child, where in children)
    return None


def loads_limited(text: str | bytes, max_depth: int) -> tuple[Any, Problem | None]:
    """(decoded value, None), or (None, the problem) for text that is not UTF-8, not JSON, or too deep."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as error:
            return None, Problem("", f"not UTF-8 text (byte {error.start}: {error.reason})")
    problem = text_depth_problem(text, max_depth)
    if problem is not None:
        return None, problem
    try:
        return json.loads(text), None
    except ValueError as error:
        return None, Problem("", f"not valid JSON: {error}")


def _too_deep(max_depth: int, pointer: str) -> Problem:
    return Problem(pointer, f"nested deeper than {max_depth} levels (AGENTQ_MAX_DEPTH)")


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")
