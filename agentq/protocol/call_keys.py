"""A tool's `x-concurrency` (docs/tenants.md): at most `limit` of its calls running at once per value of `key` (pure).

`{"key": "<reference or literal>", "limit": N}`: a key that is a reference (`†input.account`) is resolved from the
job's log like a call's parameter (for the call's instance), and must resolve to a string; any other key is a
literal (every call of the tool shares it). Calls of other tools never share a key: the key counted is
`<tool>:<value>`. Checked when the tool is registered (`x_concurrency_problems`); a reference that does not
resolve to a string is a problem of the job at submission when the value comes with the job's context
(`key_problem`), else the call is admitted under `<tool>:` followed by the value as JSON (see docs/tenants.md).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentq.errors import Problem, ReferenceSyntaxError
from agentq.protocol.expressions import is_reference, parse_expression
from agentq.protocol.values import MISSING
from agentq.protocol.views import LogIndex, resolve

if TYPE_CHECKING:
    from agentq.protocol.plans import PlannedCall


@dataclass(frozen=True, slots=True)
class CallKey:
    """A tool's parsed `x-concurrency`."""

    tool: str
    key: str
    limit: int

    @property
    def is_reference(self) -> bool:
        return is_reference(self.key)

    def value(self, index: LogIndex | None, instance: str | None) -> Any:
        """The key's value for a call (MISSING when a reference has none; None index: nothing is known)."""
        if not self.is_reference:
            return self.key
        return MISSING if index is None else resolve(index, self.key, instance)

    def counted(self, value: Any) -> str:
        """The key the admission counts for a call whose key has `value`."""
        if isinstance(value, str):
            return f"{self.tool}:{value}"
        return f"{self.tool}:" + ("?" if value is MISSING else json.dumps(value, sort_keys=True))


def x_concurrency_problems(value: Any, pointer: str = "/x-concurrency") -> list[Problem]:
    """Every problem of a tool's `x-concurrency` value, each with its pointer."""
    if not isinstance(value, dict):
        return [Problem(pointer, 'expected {"key": "<reference or literal>", "limit": N}')]
    problems = [Problem(f"{pointer}/{k}", f"unknown field {k!r} (key, limit)")
                for k in value if k not in ("key", "limit")]
    key, limit = value.get("key"), value.get("limit")
    if not isinstance(key, str) or not key:
        problems.append(Problem(f"{pointer}/key", f"expected a non-empty string (a reference such as †input.account, "
                                                  f"or a literal), got {key!r}"))
    elif is_reference(key):
        try:
            parse_expression(key)
        except ReferenceSyntaxError as error:
            problems.append(Problem(f"{pointer}/key", str(error)))
    if type(limit) is not int or limit < 1:
        problems.append(Problem(f"{pointer}/limit", f"expected a whole number of 1 or more, got {limit!r}"))
    return problems


def call_key(tool_name: str, tool: dict | None) -> CallKey | None:
    """The parsed `x-concurrency` of a (registered, so valid) tool schema, or None."""
    spec = (tool or {}).get("x-concurrency")
    if not isinstance(spec, dict) or x_concurrency_problems(spec):
        return None
    return CallKey(tool=tool_name, key=spec["key"], limit=spec["limit"])


def tool_keys(tools: dict[str, dict]) -> dict[str, CallKey]:
    """The parsed `x-concurrency` of each of `tools` that has one, by tool name."""
    return {name: key for name, tool in tools.items() if (key := call_key(name, tool)) is not None}


def key_problem(key: CallKey, index: LogIndex, instance: str | None, pointer: str) -> Problem | None:
    """At submission: a reference key whose value the job's context gives, and which is not a string."""
    value = key.value(index, instance)
    if value is MISSING or isinstance(value, str):
        return None
    return Problem(pointer, f"x-concurrency of tool {key.tool!r}: its key {key.key} is "
                            f"{json.dumps(value)[:80]}, not a string")


def call_key_problems(calls: Sequence[PlannedCall], tools: dict[str, dict], context: list[dict]) -> list[Problem]:
    """At submission: each call whose tool's x-concurrency key the job's context resolves to a non-string."""
    keys = {name: key for name, key in tool_keys(tools).items() if key.is_reference}
    if not keys:
        return []
    index = LogIndex(context)
    found = (key_problem(keys[c.tool], index, c.instance, f"/calls/{c.index}") for c in calls if c.tool in keys)
    return [p for p in found if p is not None]
