"""What an object lets its holder reach: the objects found by following references from it (`gc.get_referents`).

The walk follows everything an activity could follow from the object it holds: attributes, slots, containers,
bound methods' `__self__` and `__func__`, functions' closures, defaults and `__dict__`. It stops at modules,
classes and functions' globals and code: those lead to the process's modules, which any code can import anyway.
"""

from __future__ import annotations

import gc
import types
from collections.abc import Iterator
from typing import Any

_STOPS = (types.ModuleType, type, types.CodeType)


def _next(obj: Any) -> list[Any]:
    if isinstance(obj, types.FunctionType):  # not its globals: the module it was defined in
        cells = [cell.cell_contents for cell in obj.__closure__ or () if _filled(cell)]
        return [*cells, obj.__defaults__, obj.__kwdefaults__, obj.__dict__]
    return gc.get_referents(obj)


def _filled(cell: types.CellType) -> bool:
    try:
        cell.cell_contents  # noqa: B018
    except ValueError:  # an empty cell
        return False
    return True


def reachable(root: Any, limit: int = 100_000) -> Iterator[Any]:
    """Every object reachable from `root` (itself included), each once; raises past `limit` objects."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or (obj is not root and isinstance(obj, _STOPS)):
            continue
        seen.add(id(obj))
        if len(seen) > limit:
            raise AssertionError(f"more than {limit} objects reachable: the walk is not bounded by the context")
        yield obj
        stack.extend(_next(obj))


def strings_reachable(root: Any) -> list[str]:
    """The strings (and decoded bytes) reachable from `root`: where any value it can read would show."""
    found = []
    for obj in reachable(root):
        if isinstance(obj, str):
            found.append(obj)
        elif isinstance(obj, bytes | bytearray):
            found.append(bytes(obj).decode("utf-8", "replace"))
    return found


def leaks(root: Any, needles: list[str]) -> list[str]:
    """The needles found in some string reachable from `root`."""
    strings = strings_reachable(root)
    return [needle for needle in needles if any(needle in s for s in strings)]


def types_reachable(root: Any) -> set[str]:
    """The qualified names of the classes of the objects reachable from `root`."""
    return {f"{type(obj).__module__}.{type(obj).__qualname__}" for obj in reachable(root)}
