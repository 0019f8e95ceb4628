"""A job's tools as planned (`JobTools`), kept by content: jobs that list the same tools plan them once.

Planning a job's tools checks each listed schema as a registration does (`ToolRegistry.register`), composes them into
the job's solution schema (`compose`) and compiles a validator per composed tool for its calls. All of it depends
only on the tools' entries (names of known tools and their schemas, inline schemas), the job's output schema, its
kind and the known activities (which resolve `_activity`): `JobTools` holds it, cached under that content
(`tools_key`), for jobs whose tools planned without a problem. A job whose tools resolve a module upfront is planned
anew each time (the module loader may answer differently).

What is cached is shared by every plan made from it, as `compose`'s solution schemas are: read-only.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentq.protocol.cache import LRU
from agentq.protocol.tools import ToolRegistry
from agentq.protocol.validation import ToolValidator

JobToolsKey = tuple[str, str | None, bool, frozenset[str]]


@dataclass(frozen=True)
class JobTools:
    """A job's tools as planned: its registry, solution schema, composed tools by name, and their validators (each
    compiled once, by the first call of that tool planned: `call_plans.planned_calls`)."""

    registry: ToolRegistry
    solution: dict
    composed: dict[str, dict]
    validators: dict[str, ToolValidator] = field(default_factory=dict)


_PLANNED: LRU[JobToolsKey, JobTools] = LRU(256)


def tools_key(listed: Any, available: Mapping[str, Mapping[str, Any]], output: Any, *, is_plan: bool,
              live_activities: Iterable[str], resolves_modules: bool) -> JobToolsKey | None:
    """The content a job's tools are planned from: its `listed` tools (names of `available` tools or inline
    schemas), its output schema, its kind and the known activities. None: not kept (tools that are not a list of
    JSON, an unknown name, an upfront module where a loader would resolve it)."""
    if not isinstance(listed, list):
        return None
    entries: list[Any] = []
    for item in listed:
        schema = available.get(item) if isinstance(item, str) else item
        if not isinstance(schema, Mapping) or (resolves_modules and schema.get("x-module-resolution") == "upfront"):
            return None
        entries.append([item if isinstance(item, str) else "", schema])
    try:
        tools = json.dumps(entries, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        out = None if output is None else json.dumps(output, separators=(",", ":"), ensure_ascii=False,
                                                      allow_nan=False)
    except (TypeError, ValueError):
        return None
    return tools, out, is_plan, frozenset(live_activities)


def planned_tools(key: JobToolsKey | None) -> JobTools | None:
    """The tools planned for `key` before (None: none, or not kept)."""
    return _PLANNED.get(key) if key is not None else None


def keep_tools(key: JobToolsKey | None, tools: JobTools) -> JobTools:
    """Keep `tools` (planned without a problem) for later jobs of `key`; returns what is kept."""
    return _PLANNED.put(key, tools) if key is not None else tools
