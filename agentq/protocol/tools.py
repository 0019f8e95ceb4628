"""The tool registry: tool schemas by name, checked once at registration (docs/protocol.md#tools).

A tool is a JSON Schema object whose ``properties`` hold parameters and meta fields (names starting with
``_``); ``tool_schema.py`` holds the checks. :class:`ToolRegistry` validates a schema completely *before* it
changes anything, so a failed registration (or a failed :meth:`ToolRegistry.register_all` of a whole tool
folder) leaves the registry exactly as it was.

Stored schemas are deep copies made at registration. They are shared with every reader (``get``,
``snapshot``, composition) and must be treated as read-only: mutating one would silently change what every
later composition produces, and the composition cache would not notice.

Every change bumps :attr:`ToolRegistry.version`. Versions are drawn from one process-wide counter, so the
pair ``(id(registry), registry.version)`` never repeats even if a registry is garbage collected and a new one
reuses its ``id``: that pair is the composition cache key.

No I/O here: reading tool files is the shell's (``agentq/runtime/tool_files.py``), which hands the parsed
schemas to :meth:`ToolRegistry.register_all`.
"""

from __future__ import annotations

import difflib
import itertools
import json
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from agentq.errors import (
    DuplicateRegistrationError,
    RegistrationError,
    ToolSchemaError,
    UnknownMethodError,
    UnknownToolError,
)
from agentq.protocol.tool_schema import (
    KNOWN_META_FIELDS,
    OUTPUT_METHODS,
    check_tool_schema,
    is_valid_name,
    tool_name_of,
)

__all__ = [
    "KNOWN_META_FIELDS",
    "OUTPUT_METHODS",
    "Tool",
    "ToolRegistry",
    "check_tool_schema",
    "is_valid_name",
    "next_version",
    "tool_name_of",
    "unknown_name",
]

_versions = itertools.count(1)
_versions_lock = threading.Lock()


def next_version() -> int:
    """A process-wide strictly increasing integer (registry versions; unique across registries)."""
    with _versions_lock:
        return next(_versions)


def unknown_name(what: str, name: object, names: Any) -> UnknownToolError:
    """The one error for a name no registry knows (a tool or an activity), with a "did you mean" hint and
    what is registered."""
    known = sorted(names)
    close = difflib.get_close_matches(str(name), known, n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return UnknownToolError(f"unknown {what} {name!r}{hint} (registered: {', '.join(known) or 'none'})")


class ToolRegistry:
    """Tool schemas by name; every registration is fully checked before anything changes.

    Thread-safe for concurrent registration and reading. Returned schemas are shared and read-only.
    """

    def __init__(self) -> None:
        self._tools: dict[str, dict] = {}
        self._lock = threading.RLock()
        self._version = next_version()

    # ------------------------------------------------------------------ reading

    @property
    def version(self) -> int:
        """Bumped on every change (register, replace, unregister, load); unique across registries."""
        return self._version

    @property
    def names(self) -> tuple[str, ...]:
        """Registered tool names, sorted."""
        return tuple(sorted(self._tools))

    def get(self, name: str) -> dict:
        """The stored schema of ``name`` (read-only); :class:`UnknownToolError` with a hint if absent."""
        try:
            return self._tools[name]
        except (KeyError, TypeError):
            raise unknown_name("tool", name, self._tools) from None

    def snapshot(self) -> dict[str, dict]:
        """A new dict name → stored schema, sorted by name (the schemas themselves are shared, read-only)."""
        with self._lock:
            return {name: self._tools[name] for name in sorted(self._tools)}

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self._tools)

    def __repr__(self) -> str:
        return f"ToolRegistry({len(self)} tools, version={self._version})"

    # ------------------------------------------------------------------ writing

    def _check_free(self, name: str, schema: dict, replace: bool) -> bool:
        """True when ``name`` is already registered with exactly ``schema`` (an idempotent no-op)."""
        current = self._tools.get(name)
        if current is None or replace:
            return False
        if json.dumps(current) == json.dumps(schema):
            return True
        raise DuplicateRegistrationError(
            f"tool {name!r} is already registered with a different schema; "
            f"pass replace=True to replace it or unregister it first"
        )

    def register(self, name: str, schema: Mapping[str, Any], *, replace: bool = False) -> dict:
        """Check and store ``schema`` as tool ``name``; return the stored (deep-copied, read-only) schema.

        Registering the very same schema again is a no-op; a different schema under a taken name raises
        :class:`DuplicateRegistrationError` unless ``replace=True``.
        """
        copy = check_tool_schema(name, schema)
        with self._lock:
            if self._check_free(name, copy, replace):
                return self._tools[name]
            self._tools[name] = copy
            self._version = next_version()
            return copy

    def unregister(self, name: str) -> None:
        """Remove tool ``name`` (:class:`UnknownToolError` if it is not registered)."""
        with self._lock:
            self.get(name)
            del self._tools[name]
            self._version = next_version()

    # ------------------------------------------------------------------ batches

    def register_all(self, schemas: Iterable[tuple[str, Any]], *, replace: bool = False,
                     origins: Mapping[str, str] | None = None) -> list[str]:
        """Check and store several tools at once, all or nothing; return their names in the given order.

        ``schemas`` yields ``(name, schema)`` pairs, checked one after the other before anything is stored;
        an error about a tool is prefixed with its entry in ``origins`` (where it came from, e.g. its file).
        Same rules as :meth:`register` for each tool.
        """
        origins = origins or {}
        checked = [(name, self._checked(name, schema, origins)) for name, schema in schemas]
        with self._lock:
            fresh: dict[str, dict] = {}
            for name, schema in checked:
                try:
                    if self._check_free(name, schema, replace):
                        continue
                except DuplicateRegistrationError as exc:
                    raise _located(exc, origins.get(name)) from None
                fresh[name] = schema
            if fresh:
                self._tools.update(fresh)
                self._version = next_version()
        return [name for name, _ in checked]

    @staticmethod
    def _checked(name: str, schema: Any, origins: Mapping[str, str]) -> dict:
        try:
            return check_tool_schema(name, schema)
        except (ToolSchemaError, UnknownMethodError, RegistrationError) as exc:
            raise _located(exc, origins.get(name)) from None


def _located(error: Exception, origin: str | None) -> Exception:
    """``error`` again, its message prefixed with where the tool came from (when known)."""
    return error if origin is None else type(error)(f"{origin}: {error}")


#: The default tool registry (``from agentq.protocol.tools import Tool``).
Tool = ToolRegistry()
