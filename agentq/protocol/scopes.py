"""Scopes and imports (SPEC §7, §8): which kinds of context an execution may see, and that context itself.

A tool declares `_scopes` (or `_imports`) either *provisioned*, `{"const": [kinds]}`, or *requested*,
`{"type": "array", "items": {"enum": [kinds]}}`. The kind names `text` and `error` select text and error
messages; any other name selects the data messages of that kind.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from agentq.errors import ConfigurationError, Problem, ScopeError, ToolSchemaError
from agentq.protocol.views import LogIndex, as_index


def effective_scopes(call: dict, tool_schema: dict, *, pointer: str = "") -> list[str]:
    """The kinds the call may see: its checked `_scopes`, else the tool's const, else `[]` (empty context)."""
    return _effective("_scopes", call, tool_schema, pointer)


def effective_imports(call: dict, tool_schema: dict, *, pointer: str = "") -> list[str]:
    """The parent kinds imported into a module call, checked like `effective_scopes`."""
    return _effective("_imports", call, tool_schema, pointer)


def _effective(field: str, call: dict, tool_schema: dict, pointer: str) -> list[str]:
    declared = tool_schema.get("properties", {}).get(field)
    requested = call.get(field)
    tool = tool_schema.get("properties", {}).get("_tool", {}).get("const", "?")
    where = f"{pointer}/{field}"
    if declared is None:
        if requested is None:
            return []
        raise ScopeError(f"invalid {field}", [Problem(where, f"tool {tool!r} declares no {field}")])
    if isinstance(declared.get("const"), list):
        allowed, default = declared["const"], declared["const"]
    elif isinstance(declared.get("items", {}).get("enum"), list):
        allowed, default = declared["items"]["enum"], []
    else:
        raise ToolSchemaError(
            f"tool {tool!r}: {field} must be {{const: [...]}} or {{type: array, items: {{enum: [...]}}}}")
    if requested is None:
        return list(default)
    if not isinstance(requested, list):
        raise ScopeError(f"invalid {field}", [Problem(where, f"{field} must be an array of kind names")])
    problems = [Problem(f"{where}/{i}", f"{kind!r} is not one of {allowed} allowed by tool {tool!r}")
                for i, kind in enumerate(requested) if not isinstance(kind, str) or kind not in allowed]
    if problems:
        raise ScopeError(f"invalid {field}", problems)
    return list(dict.fromkeys(requested))


def scoped_messages(
    index_or_log: LogIndex | Sequence[Any], kinds: Iterable[str], instance: str | None = None
) -> list[dict]:
    """The messages of `kinds` visible to `instance` (global ones plus its own, never another instance's),
    in log order. Over an index this costs O(result), not O(log) (`LogIndex.scoped`)."""
    kinds = tuple(kinds)
    if not kinds:
        return []
    return as_index(index_or_log).scoped(kinds, instance)


class ScopedContext:
    """The `context` an activity receives: its scoped messages and, per kind in scope, the merged view.

    `context["state"]` and `context.state` give the view of `state` for the call's instance (`MISSING` if
    nothing was written); a kind outside the scope raises `KeyError` / `AttributeError`.
    """

    def __init__(self, messages: list[dict], index_for_views: LogIndex, emit: Callable[[Any], Any] | None = None,
                 *, kinds: Iterable[str] | None = None, instance: str | None = None):
        self.messages = messages
        self.kinds = tuple(kinds) if kinds is not None else tuple(
            dict.fromkeys(m["kind"] if m["type"] == "data" else m["type"] for m in messages))
        self.instance = instance
        self._index = index_for_views
        self._emit = emit
        self._views: dict[str, Any] = {}

    @classmethod
    def build(cls, index_or_log: LogIndex | Sequence[Any], kinds: Iterable[str], instance: str | None = None,
              emit: Callable[[Any], Any] | None = None) -> ScopedContext:
        """The context for `kinds` and `instance`, with copies of the messages (the activity may mutate them).

        Over an index this costs O(1) with no kinds and O(scoped messages) otherwise, whatever the log's size;
        each view in scope is copied once, on first access.
        """
        index = as_index(index_or_log)
        kinds = tuple(kinds)
        messages = copy.deepcopy(index.scoped(kinds, instance)) if kinds else []
        return cls(messages, index, emit, kinds=kinds, instance=instance)

    def __getitem__(self, kind: str) -> Any:
        if kind not in self.kinds:
            raise KeyError(f"{kind!r} is not in this call's scope {list(self.kinds)}")
        if kind not in self._views:
            self._views[kind] = copy.deepcopy(self._index.view(kind, self.instance))  # MISSING stays MISSING
        return self._views[kind]

    def __getattr__(self, kind: str) -> Any:
        if kind.startswith("_"):
            raise AttributeError(kind)
        try:
            return self[kind]
        except KeyError as error:
            raise AttributeError(error.args[0]) from None

    def emit(self, part: Any) -> Any:
        """Send an event part (e.g. progress, a chart) to the job's stream."""
        if self._emit is None:
            raise ConfigurationError("this context has no event stream to emit to")
        return self._emit(part)

    def __iter__(self) -> Iterator[dict]:
        return iter(self.messages)

    def __len__(self) -> int:
        return len(self.messages)

    def __repr__(self) -> str:
        return f"ScopedContext(kinds={list(self.kinds)}, instance={self.instance!r}, messages={len(self.messages)})"
