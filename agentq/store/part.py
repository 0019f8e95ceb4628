"""`StorePart`: the base of every part of the Redis store: the job-step parts `StateStore` holds (`RedisJobs`,
`RedisCalls`, ...: `state.py`) and the fleet-wide ones, the concerns that have no step in a job's scripts (the
fleet, the models' rate limits, the tenants' job limits, the metrics' scrape-time reads, webhooks).

A part is no mixin: it takes the store's one connection (`StoreConnection`: the Redis client, the key layout, the
loaded Lua steps, the clock), and a part that needs another concern is given that part. The fleet-wide ones are
built once by the composition root (`runtime/root.py`), which hands each part to the runtime and engine parts that
use it, typed by its contract (`contracts.py`). Its public methods map connection errors as the store's do
(`boundary.map_store_errors` on each part's class).
"""

from __future__ import annotations

from agentq.store.connection import StoreConnection
from agentq.store.keys import JobKeys


class StorePart:
    """A part over the store's shared connection `conn`."""

    def __init__(self, conn: StoreConnection):
        self.conn = conn
        self.redis = conn.redis
        self.fleet = conn.fleet  # the fleet-wide key names
        self.scripts = conn.scripts
        self.url = conn.url  # named in the error boundary's messages
        self.cluster = conn.cluster

    def clock(self) -> float:
        """The store's clock (Unix seconds), as the connection reads it now (a test may drive it)."""
        return self.conn.clock()

    def keys(self, job_id: str) -> JobKeys:
        return self.conn.keys(job_id)
