"""Scopes and imports (docs/protocol.md#scopes, docs/protocol.md#modules): which kinds of context an execution may see,
and that context itself.

A tool declares `_scopes` (or `_imports`) either *provisioned*, `{"const": [kinds]}`, or *requested*,
`{"type": "array", "items": {"enum": [kinds]}}`. The kind names `text` and `error` select text and error
messages; any other name selects the data messages of that kind.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from agentq.errors import ConfigurationError, Problem, ScopeError, ToolSchemaError
from agentq.protocol.values import copy_json
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
    allowed, default = _declared_kinds(field, declared, tool)
    if requested is None:
        return list(default)
    if not isinstance(requested, list):
        raise ScopeError(f"invalid {field}", [Problem(where, f"{field} must be an array of kind names")])
    problems = [Problem(f"{where}/{i}", f"{kind!r} is not one of {allowed} allowed by tool {tool!r}")
                for i, kind in enumerate(requested) if not isinstance(kind, str) or kind not in allowed]
    if problems:
        raise ScopeError(f"invalid {field}", problems)
    return list(dict.fromkeys(requested))


def _declared_kinds(field: str, declared: dict, tool: str) -> tuple[list, list]:
    """The kinds a tool's `_scopes`/`_imports` declaration allows, and those a call gets when it asks for none:
    all of a provisioned (`const`) list, none of a requested (`items.enum`) one."""
    if isinstance(declared.get("const"), list):
        return declared["const"], declared["const"]
    if isinstance(declared.get("items", {}).get("enum"), list):
        return declared["items"]["enum"], []
    raise ToolSchemaError(
        f"tool {tool!r}: {field} must be {{const: [...]}} or {{type: array, items: {{enum: [...]}}}}")


def scoped_messages(
    index_or_log: LogIndex | Sequence[Any], kinds: Iterable[str], instance: str | None = None
) -> list[dict]:
    """The messages of `kinds` visible to `instance` (global ones plus its own, never another instance's),
    in log order. Over an index this costs O(result), not O(log) (`LogIndex.scoped`)."""
    kinds = tuple(kinds)
    if not kinds:
        return []
    return as_index(index_or_log).scoped(kinds, instance)


class Emitter:
    """`context.emit` of one running call: it hands a part to the call's event sink while the call runs.

    It holds the job and call ids and a key, nothing from which the job's data can be reached: the sink (which
    reaches the runtime and its store) stays in this module's registry, looked up by key on each emit and
    dropped by `close()` when the call ends; an emit after that raises `ConfigurationError`.
    """

    __slots__ = ("_key", "call_id", "job_id")

    def __init__(self, job_id: str, call_id: str, sink: Callable[[Any], Any]):
        self.job_id, self.call_id = job_id, call_id
        self._key = next(_emitter_keys)
        _sinks[self._key] = sink

    def __call__(self, part: Any) -> Any:
        sink = _sinks.get(self._key)
        if sink is None:
            raise ConfigurationError(f"call {self.call_id} has ended: its context can no longer emit")
        return sink(part)

    def close(self) -> None:
        _sinks.pop(self._key, None)

    def __repr__(self) -> str:
        return f"Emitter(job_id={self.job_id!r}, call_id={self.call_id!r})"


_sinks: dict[int, Callable[[Any], Any]] = {}  # Emitter key → the sink of a running call
_emitter_keys = itertools.count()


class ScopedContext:
    """The `context` an activity receives: its scoped messages and, per kind in scope, the merged view.

    `context["state"]` and `context.state` give the view of `state` for the call's instance (`MISSING` if
    nothing was written); a kind outside the scope raises `KeyError` / `AttributeError`.

    Least privilege holds for everything reachable from the object: it keeps its own copies of the scoped
    messages and views (built when it is made) and its `emit` callable, never the job's log, index or store.
    An activity runs in the worker's process, so this is no sandbox against code that imports the runtime.
    """

    __slots__ = ("_emit", "_views", "instance", "kinds", "messages")

    def __init__(self, messages: list[dict], index_for_views: LogIndex, emit: Callable[[Any], Any] | None = None,
                 *, kinds: Iterable[str] | None = None, instance: str | None = None):
        """`messages` as given (`build` copies them); the views of `kinds` are copied out of
        `index_for_views` now, and the index is not kept."""
        self.messages = messages
        self.kinds = tuple(kinds) if kinds is not None else tuple(
            dict.fromkeys(m["kind"] if m["type"] == "data" else m["type"] for m in messages))
        self.instance = instance
        self._views = _copied_views(index_for_views, self.kinds, instance) if self.kinds else {}
        self._emit = emit

    @classmethod
    def build(cls, index_or_log: LogIndex | Sequence[Any], kinds: Iterable[str], instance: str | None = None,
              emit: Callable[[Any], Any] | None = None) -> ScopedContext:
        """The context for `kinds` and `instance`, with copies of the messages and views (the activity may
        mutate them). `emit` should hold nothing of the job either (see `Emitter`).

        Over an index this costs O(1) with no kinds and O(scoped messages + views in scope) otherwise, whatever
        the log's size.
        """
        index = as_index(index_or_log)
        kinds = tuple(kinds)
        if not kinds:
            return cls([], index, emit, kinds=kinds, instance=instance)
        return cls(copy_json(index.scoped(kinds, instance)), index, emit, kinds=kinds, instance=instance)

    def __getitem__(self, kind: str) -> Any:
        if kind not in self.kinds:
            raise KeyError(f"{kind!r} is not in this call's scope {list(self.kinds)}")
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


def _copied_views(index: LogIndex, kinds: tuple[str, ...], instance: str | None) -> dict[str, Any]:
    """A copy of the view of each kind (`MISSING` for a kind with no data, a text or error kind)."""
    return {kind: copy_json(index.view(kind, instance)) for kind in kinds}
