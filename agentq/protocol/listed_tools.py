"""The tools a job lists, as the checks of their extension keywords (`x-thinking`, `x-model`) read them."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from agentq.errors import Problem


@dataclass(frozen=True, slots=True)
class ListedTool:
    """One item of a job's `tools`: a registered tool's name, or an inline schema."""

    index: int
    item: Any
    schema: Mapping[str, Any]

    @property
    def inline(self) -> bool:
        return isinstance(self.item, Mapping)

    def problem(self, keyword: str, message: str) -> Problem:
        """A problem of the tool's `keyword`: at the keyword of an inline schema, at the item naming a registered
        tool (whose schema the job does not hold), with that tool's name."""
        if self.inline:
            return Problem(f"/tools/{self.index}/{keyword}", message)
        return Problem(f"/tools/{self.index}", f"tool {self.item!r}: {message}")


def listed_tools(raw_tools: Any, available: Mapping[str, Mapping[str, Any]]) -> Iterator[ListedTool]:
    """The tools of a job's `tools` whose schema is known (inline, or a name of `available`), in order."""
    if not isinstance(raw_tools, list):
        return
    for index, item in enumerate(raw_tools):
        schema = item if isinstance(item, Mapping) else available.get(item) if isinstance(item, str) else None
        if isinstance(schema, Mapping):
            yield ListedTool(index, item, schema)
