"""`StoreConnection`: what every concern of the Redis store shares — the connection, the key layout and the Lua
steps.

Every concern of the store is a part over one instance of this class (`part.StorePart`), none inheriting
another; `state.StateStore` is this connection holding the job-step parts, and the fleet-wide parts are built
over it by the composition root.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from agentq.protocol.cache import LRU
from agentq.store.boundary import map_store_errors
from agentq.store.connect import DEFAULT_MAX_CONNECTIONS, connect_redis, is_sentinel_url
from agentq.store.keys import FleetKeys, JobKeys
from agentq.store.scripts import Scripts

KEPT_JOB_KEYS = 4096  # the jobs whose key names one store keeps (a few hundred bytes each)


@map_store_errors
class StoreConnection:
    """The connection and key layout of the Redis state store (see `state.StateStore`)."""

    def __init__(self, redis_url: str, *, cluster: bool = False, client: Any = None, namespace: str = "agentq",
                 max_connections: int = DEFAULT_MAX_CONNECTIONS, clock: Callable[[], float] = time.time):
        """The store at `redis_url`: one server, a Sentinel group (`redis+sentinel://`), or with `cluster` a
        Redis Cluster through any of its nodes (`store/connect.py` makes the connection, with at most
        `max_connections` per server: a thread that finds them all in use waits for one). `clock` (Unix seconds)
        is the time the store's Python side reads: job expiry, the fleet's heartbeats, the metrics' sets, the
        admission's timestamps (a test drives it; Lua steps that keep their own time read Redis's `TIME`)."""
        self.redis = client if client is not None else connect_redis(redis_url, cluster=cluster,
                                                                      max_connections=max_connections)
        self.cluster = cluster
        self.url = redis_url
        self.namespace = namespace
        self.clock = clock
        self.fleet = FleetKeys(namespace)
        self.scripts = Scripts(self.redis)
        self._keys: LRU[str, JobKeys] = LRU(KEPT_JOB_KEYS)

    def keys(self, job_id: str) -> JobKeys:
        """The keys of job `job_id` (raises `InvalidJobIdError`); those of the jobs this process works on are kept,
        so a call's steps do not build and check them again."""
        keys = self._keys.get(job_id)
        if keys is None:
            keys = self._keys.put(job_id, JobKeys(self.namespace, job_id))
        return keys

    def ping(self) -> None:
        self.redis.ping()

    def close(self) -> None:
        self.redis.close()

    def single_server(self, url: str) -> bool:
        return not self.cluster and url == self.url and not is_sentinel_url(url)

