"""A structural diff of two JSON values, by JSON pointer (pure).

    json_diff({"a": 1, "b": [1, 2]}, {"a": 2, "b": [1], "c": True})
    → JsonDiff(changes=(Change("/a", "changed", 1, 2), Change("/b/1", "removed", 2, None),
                        Change("/c", "added", None, True)), truncated=False)

Objects are compared key by key (keys in the order of the left value, then the right's new ones); arrays index by
index (an element past the other's end is added or removed); any other pair of values that differ, or values of
different JSON types, is one `changed` at its pointer. `1` and `1.0` are equal, `1` and `true` are not. A diff
keeps its first `limit` changes and says when it left some out (`truncated`), so a large state cannot make the
answer unbounded.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

ChangeKind = Literal["added", "removed", "changed"]
DEFAULT_LIMIT = 200  # changes kept per diff


@dataclass(frozen=True, slots=True)
class Change:
    """One difference: at `pointer`, a value only the right side has (`added`), only the left side has
    (`removed`), or both have unequal (`changed`); `a` / `b` are the left / right values (None where absent)."""

    pointer: str
    kind: ChangeKind
    a: Any = None
    b: Any = None

    def to_dict(self) -> dict[str, Any]:
        return {"pointer": self.pointer, "kind": self.kind, "a": self.a, "b": self.b}


@dataclass(frozen=True, slots=True)
class JsonDiff:
    """The differences of two JSON values (none: `same`), the first `limit` of them."""

    changes: tuple[Change, ...] = ()
    truncated: bool = False

    @property
    def same(self) -> bool:
        return not self.changes

    def to_dict(self) -> dict[str, Any]:
        return {"same": self.same, "changes": [change.to_dict() for change in self.changes],
                "truncated": self.truncated}


def json_diff(a: Any, b: Any, *, limit: int = DEFAULT_LIMIT) -> JsonDiff:
    """The differences from `a` to `b` (see the module's docstring)."""
    changes: list[Change] = []
    for change in _walk(a, b, ""):
        if len(changes) == limit:
            return JsonDiff(tuple(changes), truncated=True)
        changes.append(change)
    return JsonDiff(tuple(changes))


def pointer_token(key: str | int) -> str:
    """One reference token of a JSON pointer (RFC 6901: `~` as `~0`, `/` as `~1`)."""
    return str(key).replace("~", "~0").replace("/", "~1")


def _walk(a: Any, b: Any, at: str) -> Iterator[Change]:
    if isinstance(a, dict) and isinstance(b, dict):
        yield from _walk_objects(a, b, at)
    elif isinstance(a, list) and isinstance(b, list):
        yield from _walk_arrays(a, b, at)
    elif not _equal_scalars(a, b):
        yield Change(at, "changed", a, b)


def _walk_objects(a: dict, b: dict, at: str) -> Iterator[Change]:
    for key, value in a.items():
        where = f"{at}/{pointer_token(key)}"
        if key in b:
            yield from _walk(value, b[key], where)
        else:
            yield Change(where, "removed", value, None)
    for key, value in b.items():
        if key not in a:
            yield Change(f"{at}/{pointer_token(key)}", "added", None, value)


def _walk_arrays(a: list, b: list, at: str) -> Iterator[Change]:
    for index in range(max(len(a), len(b))):
        where = f"{at}/{index}"
        if index >= len(b):
            yield Change(where, "removed", a[index], None)
        elif index >= len(a):
            yield Change(where, "added", None, b[index])
        else:
            yield from _walk(a[index], b[index], where)


def _equal_scalars(a: Any, b: Any) -> bool:
    """Equal as JSON values: containers of different kinds, or a boolean and a number, never are."""
    if isinstance(a, (dict, list)) or isinstance(b, (dict, list)):
        return False
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)


__all__ = ["DEFAULT_LIMIT", "Change", "ChangeKind", "JsonDiff", "json_diff", "pointer_token"]
