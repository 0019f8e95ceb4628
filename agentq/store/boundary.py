"""The store's error boundary: redis-py's connection and timeout errors become `StoreUnavailableError`.

Like httpx mapping httpcore's exceptions, the mapping happens once, here, for every public method of the
store (generators included), so callers above the store only ever see agentq's own hierarchy.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from agentq.errors import StoreUnavailableError

C = TypeVar("C", bound=type)


def _unavailable(error: Exception, url: str | None) -> StoreUnavailableError:
    where = f" at {redact_url(url)}" if url else ""
    reason = str(error).strip() or type(error).__name__
    return StoreUnavailableError(f"cannot reach the state store{where}: {reason}")


def redact_url(url: str) -> str:
    """A Redis URL without its password, for messages."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def _connection_errors() -> tuple[type[Exception], ...]:
    import redis

    return (redis.ConnectionError, redis.TimeoutError, ConnectionError, TimeoutError)


def _wrap(function: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.isgeneratorfunction(function):
        @functools.wraps(function)
        def generator(self: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
            try:
                yield from function(self, *args, **kwargs)
            except _connection_errors() as error:
                raise _unavailable(error, getattr(self, "url", None)) from error

        return generator

    @functools.wraps(function)
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return function(self, *args, **kwargs)
        except _connection_errors() as error:
            raise _unavailable(error, getattr(self, "url", None)) from error

    return method


def map_store_errors(cls: C) -> C:
    """Class decorator: every public method maps connection and timeout errors (see module docstring)."""
    for name, member in list(vars(cls).items()):
        if not name.startswith("_") and inspect.isfunction(member):
            setattr(cls, name, _wrap(member))
    return cls
