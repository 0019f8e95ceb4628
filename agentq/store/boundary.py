"""The store's error boundary: redis-py's connection and timeout errors become `StoreUnavailableError` (and a
Redis Cluster node answered as if it were one server, a `ConfigurationError` saying so).

Like httpx mapping httpcore's exceptions, the mapping happens once, here, for every public method of the
store, sync or async (generators included), so callers above the store only ever see agentq's own hierarchy.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, NoReturn, TypeVar

from agentq.errors import ConfigurationError, StoreUnavailableError

C = TypeVar("C", bound=type)


def _unavailable(error: Exception, url: str | None) -> StoreUnavailableError:
    where = f" at {redact_url(url)}" if url else ""
    reason = str(error).strip() or type(error).__name__
    return StoreUnavailableError(f"cannot reach the state store{where}: {reason}")


def redact_url(url: str) -> str:
    """A Redis URL without its password, for messages (any form, Sentinel's list of hosts included)."""
    from agentq.store.connect import redact_password

    return redact_password(url)


def connection_errors() -> tuple[type[Exception], ...]:
    """What "the store cannot be reached" looks like from redis-py: connection and timeout errors (Sentinel's
    `MasterNotFoundError` is one), and a cluster that is down or has a slot nobody serves."""
    import redis
    from redis.exceptions import ClusterError, SlotNotCoveredError

    return (redis.ConnectionError, redis.TimeoutError, ClusterError, SlotNotCoveredError, ConnectionError,
            TimeoutError)


def _moved() -> type[BaseException]:
    """A plain client's answer from a Redis Cluster node for a key another node serves."""
    from redis.exceptions import MovedError

    return MovedError


def _a_cluster_node(url: str | None) -> ConfigurationError:
    where = f" {redact_url(url)}" if url else ""
    return ConfigurationError(f"the state store{where} is a Redis Cluster node: set AGENTQ_REDIS_CLUSTER=true")


def _mapped(error: Exception, url: str | None) -> Exception:
    """The table of this boundary: a redis-py error → agentq's own (or the error itself, when it is no
    connection matter)."""
    if isinstance(error, connection_errors()):
        return _unavailable(error, url)
    if isinstance(error, _moved()):
        return _a_cluster_node(url)
    return error


def _raise_mapped(self: Any, error: Exception) -> NoReturn:
    mapped = _mapped(error, getattr(self, "url", None))
    if mapped is error:
        raise error
    raise mapped from error


def _wrap(function: Callable[..., Any]) -> Callable[..., Any]:
    """`function` with its errors mapped: a plain function, a generator, a coroutine or an async generator."""
    if inspect.isasyncgenfunction(function):
        @functools.wraps(function)
        async def async_generator(self: Any, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            try:
                async with contextlib.aclosing(function(self, *args, **kwargs)) as items:  # closed with the wrapper
                    async for item in items:
                        yield item
            except Exception as error:
                _raise_mapped(self, error)

        return async_generator

    if inspect.iscoroutinefunction(function):
        @functools.wraps(function)
        async def coroutine(self: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return await function(self, *args, **kwargs)
            except Exception as error:
                _raise_mapped(self, error)

        return coroutine

    if inspect.isgeneratorfunction(function):
        @functools.wraps(function)
        def generator(self: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
            try:
                yield from function(self, *args, **kwargs)
            except Exception as error:
                _raise_mapped(self, error)

        return generator

    @functools.wraps(function)
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return function(self, *args, **kwargs)
        except Exception as error:
            _raise_mapped(self, error)

    return method


def map_store_errors(cls: C) -> C:
    """Class decorator: every public method maps connection and timeout errors (see module docstring), on the
    synchronous store and the async one alike."""
    for name, member in list(vars(cls).items()):
        if not name.startswith("_") and inspect.isfunction(member):
            setattr(cls, name, _wrap(member))
    return cls
