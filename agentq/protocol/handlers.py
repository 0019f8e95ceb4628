"""How an activity's handler is called, worked out once at registration (docs/protocol.md#activities, seed 000).

An activity is a Python callable ``handler(call, tool, context)``, sync or ``async``. It may declare fewer
parameters; `activities.invoke_handler` passes what it declares:

* parameters named ``call`` / ``tool`` / ``context`` are passed by name (``def h(context, call)`` works);
* otherwise (or when it takes ``*args``) arguments are passed by position according to how many the handler takes:
  1 → ``(call)``, 2 → ``(call, context)``, 3 → ``(call, tool, context)``.

A handler that cannot be called (no parameters, four required ones, ``def h(tool, x)`` whose ``tool`` would
receive the call) is refused with :class:`RegistrationError` (`plan_invocation`), never at run time.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from agentq.errors import RegistrationError

_ARG_NAMES = ("call", "tool", "context")
_BY_COUNT = {1: ("call",), 2: ("call", "context"), 3: ("call", "tool", "context")}


def _fail(name: object, option: str, message: str) -> RegistrationError:
    return RegistrationError(f"activity {name!r}: option {option!r} {message}")


_P = inspect.Parameter
_FIXED = (_P.POSITIONAL_ONLY, _P.POSITIONAL_OR_KEYWORD, _P.KEYWORD_ONLY)
_POSITIONAL = (_P.POSITIONAL_ONLY, _P.POSITIONAL_OR_KEYWORD)


def plan_invocation(name: str, handler: object) -> tuple[str, tuple[str, ...]]:
    """How to call ``handler``: ``("named", names)`` or ``("positional", names)``; RegistrationError if impossible."""
    params = _parameters(name, handler)
    named = _by_name(params)
    if named is not None:
        return "named", named
    return _by_position(name, params)


def _parameters(name: str, handler: object) -> list[inspect.Parameter]:
    if not callable(handler):
        raise _fail(name, "handler", f"must be callable, got {type(handler).__name__}")
    try:
        return list(inspect.signature(handler).parameters.values())
    except (TypeError, ValueError):
        raise _fail(
            name, "handler", "has no inspectable signature; wrap it: def handler(call, tool, context): ..."
        ) from None


# rule 1's conditions on the parameters (no *args, nameable ones, none other required), one pass each
def _by_name(params: list[inspect.Parameter]) -> tuple[str, ...] | None:
    """Rule 1: parameters named call/tool/context, nothing else required, no ``*args``: pass those by name."""
    if any(p.kind == _P.VAR_POSITIONAL for p in params):
        return None
    fixed = [p for p in params if p.kind in _FIXED]
    by_name = [p for p in fixed if _nameable(p)]
    if by_name and all(_nameable(p) for p in fixed if p.default is _P.empty):
        return tuple(p.name for p in by_name)
    return None


def _nameable(param: inspect.Parameter) -> bool:
    return param.name in _ARG_NAMES and param.kind != _P.POSITIONAL_ONLY


# rule 2's conditions on the parameters (keyword-only, positional, *args, **kwargs), one pass each
def _by_position(name: str, params: list[inspect.Parameter]) -> tuple[str, tuple[str, ...]]:
    """Rule 2: by position, according to how many positional parameters the handler takes."""
    has_var_positional = any(p.kind == _P.VAR_POSITIONAL for p in params)
    positional = [p for p in params if p.kind in _POSITIONAL]
    stuck = [p.name for p in params if p.kind == _P.KEYWORD_ONLY and p.default is _P.empty]
    if stuck:
        raise _fail(name, "handler", f"has required keyword-only parameter(s) {stuck} the engine cannot fill")
    if not positional and not has_var_positional:
        if any(p.kind == _P.VAR_KEYWORD for p in params):
            return "named", _ARG_NAMES
        raise _fail(name, "handler", "takes no parameters; declare (call), (call, context) or (call, tool, context)")
    return "positional", _positional_order(name, positional, has_var_positional)


def _positional_order(name: str, positional: list[inspect.Parameter], has_var_positional: bool) -> tuple[str, ...]:
    """The arguments passed by position: ``(call)``, ``(call, context)`` or ``(call, tool, context)``."""
    required_positional = sum(1 for p in positional if p.default is _P.empty)
    if required_positional > 3:
        raise _fail(
            name, "handler",
            f"requires {required_positional} positional parameters; a handler takes at most 3 (call, tool, context)",
        )
    order = _BY_COUNT[3 if has_var_positional else min(len(positional), 3)]
    _check_order(name, positional, order)
    return order


def _check_order(name: str, positional: list[inspect.Parameter], order: tuple[str, ...]) -> None:
    """A positional parameter named call/tool/context must receive that argument."""
    for position, (param, given) in enumerate(zip(positional, order, strict=False), start=1):
        if param.name in _ARG_NAMES and param.name != given:  # extra positionals keep their defaults
            raise _fail(
                name, "handler",
                f"parameter {param.name!r} at position {position} would receive {given!r}; "
                f"name the parameters call/tool/context or order them (call, tool, context)",
            )


def is_async_handler(handler: Callable[..., Any]) -> bool:
    if inspect.iscoroutinefunction(handler):
        return True
    call = getattr(handler, "__call__", None)  # noqa: B004 - callable objects with `async def __call__`
    return call is not None and inspect.iscoroutinefunction(call)


__all__ = ["is_async_handler", "plan_invocation"]
