"""The store's error boundary: redis-py's connection and timeout errors become `StoreUnavailableError` (and a
Redis Cluster node answered as if it were one server, a `ConfigurationError` saying so).

Like httpx mapping httpcore's exceptions, the mapping happens once, here, for every public method of the
store (generators included), so callers above the store only ever see agentq's own hierarchy.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

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


def _connection_errors() -> tuple[type[Exception], ...]:
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


def _wrap(function: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.isgeneratorfunction(function):
        @functools.wraps(function)
        def generator(self: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
            try:
                yield from function(self, *args, **kwargs)
            except _connection_errors() as error:
                raise _unavailable(error, getattr(self, "url", None)) from error
            except _moved() as error:
                raise _a_cluster_node(getattr(self, "url", None)) from error

        return generator

    @functools.wraps(function)
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return function(self, *args, **kwargs)
        except _connection_errors() as error:
            raise _unavailable(error, getattr(self, "url", None)) from error
        except _moved() as error:
            raise _a_cluster_node(getattr(self, "url", None)) from error

    return method


def map_store_errors(cls: C) -> C:
    """Class decorator: every public method maps connection and timeout errors (see module docstring)."""
    for name, member in list(vars(cls).items()):
        if not name.startswith("_") and inspect.isfunction(member):
            setattr(cls, name, _wrap(member))
    return cls
