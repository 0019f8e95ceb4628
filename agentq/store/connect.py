"""Connections to the state store's Redis, made in one place: one server, Sentinel, or Redis Cluster.

`connect_redis(url, cluster=...)` is the only code that creates a redis-py client for the store (the
`StateStore` of every client, worker, dispatcher and embedded run goes through it):

- `redis://` / `rediss://` / `unix://`: one server (`redis.Redis`);
- `redis+sentinel://[[user]:password@]host:port[,host:port...]/<master>[/<db>]`: the master of the Sentinel
  group `<master>`, found through the sentinels listed, and found again after a failover. The URL's password
  is the master's; `?sentinel_password=...` authenticates to the sentinels;
- `cluster=True` (`AGENTQ_REDIS_CLUSTER`): a Redis Cluster reached through any node the URL names
  (`redis.cluster.RedisCluster`); a job's keys share one hash slot (`store/keys.py`), so every Lua step runs
  on one node.

A synchronous client's connections come from a bounded, blocking pool (`max_connections`, per node of a cluster):
a thread that finds every connection in use waits for one (up to `POOL_WAIT_S`) instead of failing with redis-py's
"Too many connections", so any number of threads may share one client (a dispatcher's engine threads, a program
waiting on hundreds of jobs); each holds a connection only for one command or pipeline, or a blocking wait of at
most a second (`store/core.py`). Except on a cluster, the first threads (a quarter of `max_connections`, at most
64) keep one of those connections as their own, which saves the pool's locked queue around every command
(`store/pinned.py`): a Celery worker's pool process, which runs its calls on one thread, never queues.

The Celery broker is kombu's business (`runtime/broker.py`); it reads the same Sentinel URL form through
`parse_sentinel_url`.
"""

from __future__ import annotations

import functools
import inspect
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, unquote

from agentq.errors import ConfigurationError
from agentq.store.pinned import pinned_pool

SENTINEL_SCHEMES = ("redis+sentinel",)
DEFAULT_SENTINEL_PORT = 26379
# what every store connection gets: a bounded connect, and a PING before reusing a connection idle this long
CONNECTION_OPTIONS: dict[str, Any] = {"socket_connect_timeout": 5, "health_check_interval": 30}
DEFAULT_MAX_CONNECTIONS = 128
POOL_WAIT_S = 60.0  # how long a command waits for a free connection before it fails (StoreUnavailableError)
SENTINEL_FORM = "redis+sentinel://[[user]:password@]host:port[,host:port...]/<master name>[/<db>]"


@dataclass(frozen=True)
class SentinelUrl:
    """A parsed `redis+sentinel://` URL."""

    sentinels: tuple[tuple[str, int], ...]
    master: str
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_password: str | None = None


def scheme_of(url: str) -> str:
    return url.split("://", 1)[0].lower() if "://" in url else ""


def is_sentinel_url(url: str) -> bool:
    return scheme_of(url) in SENTINEL_SCHEMES


def parse_sentinel_url(url: str) -> SentinelUrl:
    """The sentinels, master name, db and credentials of a `redis+sentinel://` URL; a `ConfigurationError`
    naming every problem (and the form) otherwise."""
    _, _, rest = url.partition("://")
    rest, _, query = rest.partition("?")
    netloc, _, path = rest.partition("/")
    userinfo, _, hosts = netloc.rpartition("@")
    problems: list[str] = []
    sentinels = _sentinels(hosts, problems)
    master, db = _master_and_db(path, problems)
    options = _options(query, problems)
    if problems:
        raise ConfigurationError(f"invalid Sentinel URL {redact_password(url)!r}: {'; '.join(problems)} "
                                 f"(form: {SENTINEL_FORM})")
    username, has_password, password = userinfo.partition(":")
    return SentinelUrl(sentinels=sentinels, master=master, db=db, username=unquote(username) or None,
                       password=unquote(password) if has_password and password else None,
                       sentinel_password=options.get("sentinel_password") or None)


_HOST_PORT = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[^:\[\]]+)(?::(\d{1,5}))?")


def _sentinels(hosts: str, problems: list[str]) -> tuple[tuple[str, int], ...]:
    """The `host:port` list of the URL (the port defaults to Sentinel's)."""
    sentinels: list[tuple[str, int]] = []
    for item in filter(None, (h.strip() for h in hosts.split(","))):
        match = _HOST_PORT.fullmatch(item)
        port = int(match.group(2) or DEFAULT_SENTINEL_PORT) if match is not None else 0
        if match is None or not 0 < port < 65536:
            problems.append(f"{item!r} is not host:port")
        else:
            sentinels.append((match.group(1).strip("[]"), port))
    if not hosts.strip():
        problems.append("it names no sentinel (host:port)")
    return tuple(sentinels)


def _master_and_db(path: str, problems: list[str]) -> tuple[str, int]:
    """The master name (the path's first segment) and the database number (its optional second one)."""
    segments = [s for s in path.split("/") if s]
    master = unquote(segments[0]) if segments else ""
    if not master:
        problems.append("it names no master (the path's first segment)")
    if len(segments) <= 1:
        return master, 0
    if segments[1].isdigit() and len(segments) == 2:
        return master, int(segments[1])
    problems.append(f"{'/'.join(segments[1:])!r} is not a database number")
    return master, 0


def _options(query: str, problems: list[str]) -> dict[str, str]:
    options = dict(parse_qsl(query, keep_blank_values=True))
    unknown = sorted(set(options) - {"sentinel_password"})
    if unknown:
        problems.append(f"unknown parameter(s) {', '.join(unknown)} (only sentinel_password)")
    return options


def redact_password(url: str) -> str:
    """A URL without its password (and without a `sentinel_password` parameter), for messages."""
    url = re.sub(r"(://[^:/@]*):[^@/]*@", r"\1:***@", url)
    return re.sub(r"(sentinel_password=)[^&]*", r"\1***", url)


def connect_redis(url: str, *, cluster: bool = False, asynchronous: bool = False,
                  max_connections: int = DEFAULT_MAX_CONNECTIONS, **options: Any) -> Any:
    """A redis-py client for the state store at `url` (see the module docstring), with `decode_responses` and
    the store's connection options; `options` add to them. `asynchronous` gives the `redis.asyncio` client
    of the same kind; a synchronous one takes its connections from a blocking pool of `max_connections`. Nothing
    connects yet, except that a synchronous cluster client reads the slot map from the node at once
    (`StoreUnavailableError` when it cannot; `ConfigurationError` when it is no cluster node)."""
    options = {"decode_responses": True, **CONNECTION_OPTIONS, **options}
    if not asynchronous:
        options.update(_blocking_pool(url, cluster=cluster, max_connections=max_connections))
    if is_sentinel_url(url):
        if cluster:
            raise ConfigurationError("AGENTQ_REDIS_CLUSTER=true needs a cluster node's URL (redis://host:port), "
                                     "not a Sentinel URL: a Redis Cluster fails over on its own")
        return _sentinel_master(parse_sentinel_url(url), asynchronous=asynchronous, **options)
    if cluster:
        return _cluster(url, asynchronous=asynchronous, **options)
    if asynchronous:
        import redis.asyncio

        return redis.asyncio.Redis.from_url(url, **options)
    import redis

    pool = options.pop("connection_pool_class").from_url(url, **options)
    return redis.Redis.from_pool(pool)  # the client owns its pool: closing it closes the connections


def _blocking_pool(url: str, *, cluster: bool, max_connections: int) -> dict[str, Any]:
    """The options that give a synchronous client of `url` a blocking pool of `max_connections` (a thread waits up
    to `POOL_WAIT_S` for a free connection)."""
    from redis import BlockingConnectionPool

    if cluster:  # a pool per node: pinning a connection per thread on each would multiply them; none is pinned
        pool_class: type = BlockingConnectionPool
    elif is_sentinel_url(url):  # not pinned: a pinned connection's reconnect during a failover found no master
        pool_class = _blocking_sentinel_pool()  # (test_sentinel's master-dies test failed 1 run in 4), the queue's did
    else:
        pool_class = pinned_pool(BlockingConnectionPool)
    return {"connection_pool_class": pool_class, "max_connections": max_connections, "timeout": POOL_WAIT_S}


@functools.cache
def _blocking_sentinel_pool() -> type:
    """A Sentinel master's pool that waits for a free connection, as `BlockingConnectionPool` does."""
    from redis import BlockingConnectionPool
    from redis.sentinel import SentinelConnectionPool

    takes_inuse = "inuse_connections" in inspect.signature(BlockingConnectionPool.disconnect).parameters

    class BlockingSentinelPool(SentinelConnectionPool, BlockingConnectionPool):
        """`SentinelConnectionPool` (the master found through the sentinels) over `BlockingConnectionPool`."""

        def disconnect(self, inuse_connections: bool = True) -> None:
            # On a failover the sentinel connection asks for the idle connections only; redis-py before 7 has no such
            # argument on the blocking pool, whose idle connections are the ones in its queue.
            if takes_inuse:
                super().disconnect(inuse_connections=inuse_connections)
            elif inuse_connections:
                super().disconnect()
            else:
                for connection in list(self.pool.queue):
                    if connection is not None:
                        connection.disconnect()

    return BlockingSentinelPool


def _sentinel_master(parsed: SentinelUrl, *, asynchronous: bool, **options: Any) -> Any:
    if asynchronous:
        from redis.asyncio.sentinel import Sentinel as AsyncSentinel

        sentinel_class: Any = AsyncSentinel
    else:
        from redis.sentinel import Sentinel

        sentinel_class = Sentinel
    sentinel_options = {key: options[key] for key in ("socket_connect_timeout",) if key in options}
    if parsed.sentinel_password:
        sentinel_options["password"] = parsed.sentinel_password
    sentinel = sentinel_class(list(parsed.sentinels), sentinel_kwargs=sentinel_options)
    return sentinel.master_for(parsed.master, db=parsed.db, username=parsed.username, password=parsed.password,
                               **options)


def _cluster(url: str, *, asynchronous: bool, **options: Any) -> Any:
    if scheme_of(url) not in ("redis", "rediss"):
        raise ConfigurationError(f"AGENTQ_REDIS_CLUSTER=true needs a cluster node's URL (redis://host:port), "
                                 f"not {redact_password(url)!r}")
    match = re.search(r"/(\d+)/?(?:\?|$)", url.split("://", 1)[1])
    if match and int(match.group(1)) != 0:
        raise ConfigurationError(f"a Redis Cluster has database 0 only; {redact_password(url)!r} names "
                                 f"database {match.group(1)}")
    if asynchronous:
        from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

        return AsyncRedisCluster.from_url(url, **options)
    from redis.cluster import RedisCluster
    from redis.exceptions import RedisClusterException

    try:
        return RedisCluster.from_url(url, **options)  # reads the cluster's slot map at once
    except RedisClusterException as error:
        if "cluster mode is not enabled" in str(error).lower():
            raise ConfigurationError(f"AGENTQ_REDIS_CLUSTER=true, but {redact_password(url)!r} is no Redis Cluster "
                                     f"node (cluster mode is not enabled on it)") from error
        from agentq.errors import StoreUnavailableError

        raise StoreUnavailableError(f"cannot reach the state store at {redact_password(url)!r}: {error}") from error
