"""JSON values: the `MISSING` sentinel, paths, copy-on-write writes and the five output methods
(docs/protocol.md#output-paths).

Every function here treats its inputs as immutable: a write returns a new root that shares every untouched
subtree with the old one, so a value handed out earlier never changes later. `Fold` is the one exception, a
value built by successive writes *in place* (for a log's views): it mutates only containers it created itself
and never handed out, so it gives the same guarantee at a cost linear in the writes rather than in the value.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator, Sequence
from itertools import pairwise
from typing import Any

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
    mapping = dict(value) if isinstance(value, dict) else {}
    mapping[head] = set_in(mapping.get(head, MISSING), rest, new)
    return mapping


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
    """The new root after writing `value` at `path` of `current` with `method` (docs/protocol.md#references).

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


def check_apply(current: Any, path: Sequence[str], method: str, value: Any, *, where: str | None = None) -> None:
    """Raise what `apply_write(current, path, method, value)` would raise, without building anything."""
    check_method(method)
    if method in ("push", "concat"):
        _check_array_write(current, path, method, value, where or format_path(path))
    _check_reachable(current, path)


def _check_array_write(current: Any, path: Sequence[str], method: str, value: Any, where: str) -> None:
    """A push or a concat needs an array at `path` (or nothing yet), and a concat an array value."""
    if method == "concat" and not isinstance(value, list):
        raise WriteError(f"concat at {where} needs an array value, got {_json_type(value)}")
    old = get_in(current, path)
    if old is not MISSING and not isinstance(old, list):
        raise WriteError(f"cannot {method} onto {where}: it holds {_json_type(old)}, not an array")


def _check_reachable(current: Any, path: Sequence[str]) -> None:
    """`set_in`'s one failure: an array index past the end on the way."""
    for segment in path:
        if isinstance(current, list) and is_index(segment):
            if int(segment) > len(current):
                raise WriteError(f"cannot write at index {int(segment)} of an array of length {len(current)}")
            current = current[int(segment)] if int(segment) < len(current) else MISSING
        else:
            current = current.get(segment, MISSING) if isinstance(current, dict) else MISSING


class Fold:
    """A value built by successive writes (`apply_write` semantics), applied in place where that is safe.

    The fold *owns* the containers it created (copies and new objects) and has not handed out; it mutates
    those in place. Any other container (a message's data, or anything `share` returned) is copied on the
    first write that goes through it, and the copy is owned. Owned containers form the top of the tree (an
    owned container's parent is owned), each is in exactly one place, and a value handed out by `share` is
    never mutated afterwards. So N writes cost O(N * path length) plus one copy per container shared since
    the last write through it, instead of one copy of the whole path's containers per write.

    `copied` counts the items (keys or elements) copied so far, for tests of that cost. Not thread-safe:
    the owner serializes `write`, `peek` and `share`.
    """

    __slots__ = ("_owned", "copied", "value")

    def __init__(self, value: Any = MISSING):
        self.value = value
        self.copied = 0
        self._owned: dict[int, Any] = {}  # id → container; holding them keeps the ids unique

    def peek(self, path: Sequence[str] = ()) -> Any:
        """The value at `path` for immediate reading only: it may change with the next write."""
        return get_in(self.value, path)

    def share(self, path: Sequence[str] = ()) -> Any:
        """The value at `path`, handed out: from now on no write mutates it (writes copy it instead)."""
        if not path:
            self._owned.clear()
            return self.value
        value = get_in(self.value, path)
        self._disown(value)
        return value

    def write(self, path: Sequence[str], method: str, value: Any, *, where: str | None = None) -> None:
        """Apply one write; on `WriteError` / `UnknownMethodError` nothing changed."""
        check_apply(self.value, path, method, value, where=where)
        if not path:
            self.value = self._combine(self.value, method, value)
            return
        container = self.value = self._writable(self.value, path[0])
        for segment, following in pairwise(path):
            child = self._child(container, segment)
            writable = self._writable(child, following)
            if writable is not child:
                self._put(container, segment, writable)
            container = writable
        last = path[-1]
        old = self._child(container, last)
        new = self._combine(old, method, value)
        if new is not old:
            self._put(container, last, new)

    def _combine(self, old: Any, method: str, value: Any) -> Any:
        """`old` after the write (in place when `old` is owned); the caller checked the write applies."""
        if method == "set":
            self._disown(old)
            return value
        if method == "merge":
            return self._merge(old, value)
        if method == "assign":
            if not (isinstance(old, dict) and isinstance(value, dict)):
                self._disown(old)
                return value
            old = self._own(old)
            for key, item in value.items():
                self._disown(old.get(key))
                old[key] = item
            return old
        items = [value] if method == "push" else value
        old = self._new([]) if old is MISSING else self._own(old)
        old.extend(items)
        return old

    def _merge(self, old: Any, value: Any) -> Any:
        if not (isinstance(old, dict) and isinstance(value, dict)):
            self._disown(old)
            return value
        old = self._own(old)
        for key, item in value.items():
            if key in old:
                current = old[key]
                merged = self._merge(current, item)
                if merged is not current:
                    old[key] = merged
            else:
                old[key] = item
        return old

    def _child(self, container: Any, segment: str) -> Any:
        if isinstance(container, list):
            index = int(segment)
            return container[index] if index < len(container) else MISSING
        return container.get(segment, MISSING)

    def _put(self, container: Any, segment: str, value: Any) -> None:
        if isinstance(container, list):
            index = int(segment)
            if index == len(container):
                container.append(value)
                return
            self._disown(container[index])
            container[index] = value
        else:
            self._disown(container.get(segment))
            container[segment] = value

    def _writable(self, value: Any, segment: str) -> Any:
        """An owned container that can take `segment` (like `set_in`: else a new object replaces `value`)."""
        if isinstance(value, dict) or (isinstance(value, list) and is_index(segment)):
            return self._own(value)
        self._disown(value)
        return self._new({})

    def _own(self, container: Any) -> Any:
        """`container` if owned, else an owned shallow copy of it."""
        if id(container) in self._owned:
            return container
        self.copied += len(container)
        return self._new(list(container) if isinstance(container, list) else dict(container))

    def _new(self, container: Any) -> Any:
        self._owned[id(container)] = container
        return container

    def _disown(self, value: Any) -> None:
        """Forget `value` and every owned container under it (they are shared or dropped from now on)."""
        owned = self._owned
        if not owned or id(value) not in owned:
            return
        stack = [value]
        while stack:
            container = stack.pop()
            del owned[id(container)]
            stack.extend(child for child in _children(container) if id(child) in owned)


def _children(container: Any) -> Iterator[Any]:
    return iter(container.values() if isinstance(container, dict) else container)


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


_ATOMS = frozenset((str, int, float, bool, type(None)))


def copy_json(value: Any) -> Any:
    """A deep copy of a JSON value, a few times faster than `copy.deepcopy`, which copies anything else
    (`MISSING` stays `MISSING`)."""
    kind = type(value)
    if kind is dict:
        return {key: copy_json(item) for key, item in value.items()}
    if kind is list:
        return [copy_json(item) for item in value]
    if kind in _ATOMS:
        return value
    return copy.deepcopy(value)
