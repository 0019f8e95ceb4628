"""`Forward`: a method of the job-step facade (`state.StateStore`) that is one of its parts' methods, typed as that
method is (mypy reads the part's signature through `__get__`), with no `__getattr__`.

    class StateStore(StoreConnection):
        claim = Forward("calls", RedisCalls.claim)   # store.claim(...) is store.calls.claim(...)

`forwards(cls)` lists a class's forwards, for the test that each names a part of the method's class.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

P = ParamSpec("P")
R = TypeVar("R")


class Forward(Generic[P, R]):
    """`method` of the part at attribute `part` of the instance it is read from."""

    def __init__(self, part: str, method: Callable[Concatenate[Any, P], R]):
        self.part = part
        self.method = method
        self.name = method.__name__

    @overload
    def __get__(self, obj: None, owner: type) -> Forward[P, R]: ...

    @overload
    def __get__(self, obj: object, owner: type) -> Callable[P, R]: ...

    def __get__(self, obj: object | None, owner: type) -> Any:
        if obj is None:
            return self
        return getattr(getattr(obj, self.part), self.name)


def forwards(cls: type) -> dict[str, Forward[Any, Any]]:
    """The forwards of `cls` (and its bases), by name."""
    found: dict[str, Forward[Any, Any]] = {}
    for klass in reversed(cls.__mro__):
        found.update({name: value for name, value in vars(klass).items() if isinstance(value, Forward)})
    return found
