"""JSON values: the `MISSING` sentinel, paths, copy-on-write writes and the five output methods (SPEC §5).

Every function here treats its inputs as immutable: a write returns a new root that shares every untouched
subtree with the old one, so a value handed out earlier never changes later.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from agentq.errors import UnknownMethodError, WriteError

METHODS = ("set", "merge", "assign", "push", "concat")

_INDEX = re.compile(r"[0-9]+")


class _Missing:
    """Type of `MISSING`: "no value here", distinct from `None` (JSON null is a present value)."""

    __slots__ = ()
    _singleton: _Missing | None = None

    def __new__(cls) -> _Missing:
        if cls._singleton is None:
            cls._singleton = super().__new__(cls)
        return cls._singleton

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "MISSING"

    def __copy__(self) -> _Missing:
        return self

    def __deepcopy__(self, memo: dict) -> _Missing:
        return self

    def __reduce__(self) -> str:
        return "MISSING"  # pickled by reference to this module's global


MISSING: Any = _Missing()


def is_index(segment: str) -> bool:
    """True for an all-digit path segment (ASCII digits only), which indexes an array."""
    return _INDEX.fullmatch(segment) is not None


def format_path(path: Sequence[str]) -> str:
    """A path for messages: `a.b.0`, or `the root` for the empty path."""
    return ".".join(path) if path else "the root"


def pointer_join(pointer: str, key: str | int) -> str:
    """`pointer` extended by one JSON Pointer token (`~` and `/` escaped)."""
    return f"{pointer}/{str(key).replace('~', '~0').replace('/', '~1')}"


def get_in(value: Any, path: Sequence[str]) -> Any:
    """The value at `path` inside `value`, or `MISSING`.

    Objects are indexed by key (an all-digit segment is a plain key there); arrays only by all-digit segments.
    """
    for segment in path:
        if isinstance(value, dict):
            value = value.get(segment, MISSING)
        elif isinstance(value, list) and is_index(segment) and int(segment) < len(value):
            value = value[int(segment)]
        else:
            return MISSING
    return value


def set_in(value: Any, path: Sequence[str], new: Any) -> Any:
    """A copy of `value` with `new` at `path`; `value` itself is never mutated.

    Only the containers along the path are copied. A missing intermediate, or one that cannot hold the segment
    (a scalar, null, or an array addressed by a non-digit key), becomes an object. An array index equal to the
    array's length appends; a larger one is a `WriteError`.
    """
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, list) and is_index(head):
        index = int(head)
        if index > len(value):
            raise WriteError(f"cannot write at index {index} of an array of length {len(value)}")
        copy = list(value)
        if index == len(value):
            copy.append(set_in(MISSING, rest, new))
        else:
            copy[index] = set_in(copy[index], rest, new)
        return copy
    copy = dict(value) if isinstance(value, dict) else {}
    copy[head] = set_in(copy.get(head, MISSING), rest, new)
    return copy


def deep_merge(a: Any, b: Any) -> Any:
    """`b` merged into `a`: objects merge key by key, recursively; anything else is replaced by `b`."""
    if not (isinstance(a, dict) and isinstance(b, dict)):
        return b
    merged = dict(a)
    for key, value in b.items():
        merged[key] = deep_merge(a[key], value) if key in a else value
    return merged


def assign(a: Any, b: Any) -> Any:
    """`b` merged into `a` one level deep (like `Object.assign`); non-objects are replaced by `b`."""
    if isinstance(a, dict) and isinstance(b, dict):
        return {**a, **b}
    return b


def check_method(method: str) -> str:
    """`method` if it is one of `METHODS`, else `UnknownMethodError`."""
    if method not in METHODS:
        raise UnknownMethodError(f"unknown output method {method!r}; expected one of {', '.join(METHODS)}")
    return method


def apply_write(current: Any, path: Sequence[str], method: str, value: Any, *, where: str | None = None) -> Any:
    """The new root after writing `value` at `path` of `current` with `method` (SPEC §5).

    `where` names the path in error messages (e.g. `†state.log`); by default the dotted path.
    Raises `UnknownMethodError` for an unknown method and `WriteError` for `push`/`concat` onto a value that is
    not an array or `concat` of a value that is not an array.
    """
    check_method(method)
    old = get_in(current, path)
    if method == "set":
        new = value
    elif method == "merge":
        new = deep_merge(old, value)
    elif method == "assign":
        new = assign(old, value)
    else:
        items = [value] if method == "push" else value
        where = where or format_path(path)
        if not isinstance(items, list):
            raise WriteError(f"concat at {where} needs an array value, got {_json_type(value)}")
        if old is not MISSING and not isinstance(old, list):
            raise WriteError(f"cannot {method} onto {where}: it holds {_json_type(old)}, not an array")
        new = (old or []) + items
    return set_in(current, path, new)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object" if isinstance(value, dict) else type(value).__name__
