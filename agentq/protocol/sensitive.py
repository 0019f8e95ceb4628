"""Sensitive parameters (docs/monitoring.md): values a tool marks with ``x-sensitive`` are masked wherever agentq shows
a call, and still reach the activity unmasked.

A tool lists them at the top level of its schema::

    "x-sensitive": ["cvv", "/card/number"]

Each entry is a top-level parameter name (``"cvv"``) or a JSON pointer into nested object parameters
(``"/card/number"``: ``properties.card.properties.number``). Arrays are not walked: to hide a value inside an
array, mark the array parameter itself (its whole value is masked). :func:`check_sensitive` checks the list at
registration: a non-empty list of distinct strings, each naming a parameter the schema declares (never a
``_`` meta field).

A masked value is replaced, whatever its type, by :data:`REDACTED` (``"[redacted]"``): nothing of it is shown,
not even its last digits, since agentq cannot know which values tolerate a partial display.

Structured places (a ``tool_request`` part's ``arguments``, technical details' ``arguments``) are masked by
path with :func:`mask`. Free text (error messages: an activity's exception, a jsonschema message that quotes the
offending value) goes through a :class:`Redactor`, which replaces every form in which the call's sensitive
values may appear: quoted as Python or JSON quotes them, and bare when at least :data:`MIN_BARE_LENGTH`
characters long (shorter bare values would erase ordinary words and numbers). A value an activity transforms
before it writes it into its own message (reformats, slices) cannot be recognized; activities should not put
secrets in error messages.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from agentq.errors import ToolSchemaError

__all__ = [
    "MIN_BARE_LENGTH",
    "REDACTED",
    "SENSITIVE_KEYWORD",
    "Redactor",
    "check_sensitive",
    "mask",
    "redactor_for",
    "sensitive_paths",
]

SENSITIVE_KEYWORD = "x-sensitive"
REDACTED = "[redacted]"
MIN_BARE_LENGTH = 4

Path = tuple[str, ...]


def _parse_entry(entry: str) -> Path:
    """``"name"`` → ``("name",)``; ``"/a/b"`` → ``("a", "b")`` (JSON pointer escapes ``~1`` and ``~0``)."""
    if not entry.startswith("/"):
        return (entry,)
    return tuple(part.replace("~1", "/").replace("~0", "~") for part in entry[1:].split("/"))


def _error(tool: str, pointer: str, message: str) -> ToolSchemaError:
    return ToolSchemaError(f"tool {tool!r}: {message} (keyword {SENSITIVE_KEYWORD!r} at {pointer})")


def check_sensitive(tool: str, schema: Mapping[str, Any]) -> None:
    """Check a tool schema's ``x-sensitive`` (if any): a non-empty list of distinct parameter names or JSON
    pointers, each naming a parameter the schema declares. Raises :class:`ToolSchemaError` naming the entry."""
    if SENSITIVE_KEYWORD not in schema:
        return
    entries = schema[SENSITIVE_KEYWORD]
    where = "/" + SENSITIVE_KEYWORD
    if not isinstance(entries, list) or not entries:
        raise _error(tool, where, f"{SENSITIVE_KEYWORD} must be a non-empty list of parameter names or JSON "
                                  f"pointers such as \"/card/number\", got {entries!r}")
    seen: set[Path] = set()
    for i, entry in enumerate(entries):
        pointer = f"{where}/{i}"
        if not isinstance(entry, str) or not entry or entry == "/":
            raise _error(tool, pointer, f"{SENSITIVE_KEYWORD} entries must be parameter names or JSON pointers, "
                                        f"got {entry!r}")
        path = _parse_entry(entry)
        if path in seen:
            raise _error(tool, pointer, f"{entry!r} is listed twice")
        seen.add(path)
        if path[0].startswith("_"):
            raise _error(tool, pointer, f"{entry!r} is a meta field, not a parameter")
        _check_declared(tool, schema, entry, path, pointer)


def _check_declared(tool: str, schema: Mapping[str, Any], entry: str, path: Path, pointer: str) -> None:
    """Raise unless the schema declares the parameter `path` names (through nested `properties`)."""
    node: Any = schema
    for depth, key in enumerate(path):
        props = node.get("properties") if isinstance(node, Mapping) else None
        if not isinstance(props, Mapping) or key not in props:
            at = "/properties" + "".join(f"/{k}/properties" for k in path[:depth])
            raise _error(tool, pointer, f"{entry!r} names no parameter: {at} has no property {key!r}")
        node = props[key]


def sensitive_paths(tool: Mapping[str, Any] | None) -> tuple[Path, ...]:
    """The sensitive paths of a (registered or composed) tool schema; none when it marks none."""
    entries = tool.get(SENSITIVE_KEYWORD) if isinstance(tool, Mapping) else None
    if not isinstance(entries, list):
        return ()
    return tuple(_parse_entry(e) for e in entries if isinstance(e, str) and e)


def _present(value: Any, path: Path) -> bool:
    for key in path:
        if not isinstance(value, Mapping) or key not in value:
            return False
        value = value[key]
    return True


def _replaced(value: Any, path: Path) -> Any:
    if not path:
        return REDACTED
    head, rest = path[0], path[1:]
    return {**value, head: _replaced(value[head], rest)}


def mask(params: Mapping[str, Any], paths: tuple[Path, ...]) -> dict:
    """A copy of ``params`` with the value at each sensitive path that is present replaced by :data:`REDACTED`
    (copy on write: unmasked branches are shared with ``params``)."""
    masked = dict(params)
    for path in paths:
        if _present(masked, path):
            masked = _replaced(masked, path)
    return masked


def _leaves(value: Any) -> Iterator[Any]:
    if isinstance(value, Mapping):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item)
    elif isinstance(value, (str, int, float)) and not isinstance(value, bool):
        yield value


def _forms(value: Any) -> set[str]:
    """The texts a value may appear as in a message."""
    if isinstance(value, str):
        if not value:
            return set()
        forms = {repr(value), json.dumps(value), json.dumps(value, ensure_ascii=False)}
        if len(value) >= MIN_BARE_LENGTH:
            forms.add(value)
        return forms
    text = repr(value)
    return {text} if len(text) >= MIN_BARE_LENGTH else set()


class Redactor:
    """Replaces the sensitive values of one call wherever they appear in a text (see the module docstring)."""

    def __init__(self, values: list[Any] | tuple[Any, ...] = ()):
        forms: set[str] = set()
        for value in values:
            forms |= _forms(value)
        # longest first, so a quoted form goes before the bare value inside it
        ordered = sorted(forms, key=lambda f: (-len(f), f))
        self._pattern = re.compile("|".join(re.escape(f) for f in ordered)) if ordered else None

    def __bool__(self) -> bool:
        return self._pattern is not None

    def redact(self, text: str) -> str:
        if self._pattern is None or not isinstance(text, str):
            return text
        return self._pattern.sub(REDACTED, text)


_NOTHING = Redactor()


def redactor_for(call: Mapping[str, Any] | None, tool: Mapping[str, Any] | None) -> Redactor:
    """The :class:`Redactor` of a call's sensitive values (as given: resolved values or references)."""
    paths = sensitive_paths(tool)
    if not paths or not isinstance(call, Mapping):
        return _NOTHING
    values: list[Any] = []
    for path in paths:
        value: Any = call
        for key in path:
            if not isinstance(value, Mapping) or key not in value:
                break
            value = value[key]
        else:
            values.extend(_leaves(value))
    return Redactor(values) if values else _NOTHING
