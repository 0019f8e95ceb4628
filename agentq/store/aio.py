"""Async reads of the state store, for asyncio services: the HTTP API and `agentq.AsyncClient`.

The async I/O shell of `store/core.py`: the same steps as the synchronous shell (`store/sync_reads.py`), sent
with `redis.asyncio` (`arun`), and the same `Follow` state machine, whose waits go to the process's one
`EventHub` (`store/hub.py`). Writes go through the synchronous `StateStore` (its Lua steps are short, and the
job service that drives them is shared by every shell); what an async process must never do is hold a thread
per follower, so everything that waits (a job's events, its end) is read here.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar, cast

from agentq.protocol.records import JobRecord
from agentq.protocol.status import JobStatus
from agentq.protocol.tenants import DEFAULT_TENANT
from agentq.settings import Settings
from agentq.store import core
from agentq.store.boundary import map_store_errors
from agentq.store.core import CheckStatus, Entry, Follow, Read, Step, Wait
from agentq.store.hub import EventHub
from agentq.store.keys import FleetKeys, JobKeys

T = TypeVar("T")

_CLUSTER_BLOCK_MS = 2000  # a follower's own blocking read on a Redis Cluster


async def arun(redis: Any, step: Step[T]) -> T:
    """Drive `step` on the `redis.asyncio` client `redis`: each batch is one round trip."""
    try:
        batch = next(step)
        while True:
            batch = step.send(await _send(redis, batch))
    except StopIteration as done:
        return cast(T, done.value)


async def _send(redis: Any, batch: core.Batch) -> list[Any]:
    if len(batch) == 1:
        (one,) = batch
        return [await getattr(redis, one.name)(*one.args, **one.kwargs)]
    pipe = redis.pipeline(transaction=False)
    for each in batch:
        getattr(pipe, each.name)(*each.args, **each.kwargs)
    return list(await pipe.execute())


def open_async_store(settings: Settings) -> AsyncStateStore:
    """The async view of the store `settings` name (the API's and `AsyncClient`'s)."""
    return AsyncStateStore(settings.redis_url, namespace=settings.namespace, cluster=settings.redis_cluster)


@map_store_errors
class AsyncStateStore:
    """Read-only async view of the state store (the keys, commands and decoding of `store/core.py`). Every public
    method maps Redis errors through `store/boundary.py`, as the synchronous store does."""

    MAX_CONNECTIONS = 64

    def __init__(self, redis_url: str, *, namespace: str = "agentq", cluster: bool = False, client: Any = None):
        self._owns_pool = client is None  # a client passed in is closed by its owner
        if client is None:
            client = _connect(redis_url, cluster=cluster, max_connections=self.MAX_CONNECTIONS)
        self.redis = client
        self.url = redis_url
        self.cluster = cluster
        self.namespace = namespace
        self.fleet = FleetKeys(namespace)
        self._hub: EventHub | None = None

    def keys(self, job_id: str) -> JobKeys:
        return JobKeys(self.namespace, job_id)

    @property
    def hub(self) -> EventHub:
        """The process's one follower of event streams (created on first use)."""
        if self._hub is None:
            self._hub = EventHub(self.redis, self.url)
        return self._hub

    async def ping(self) -> None:
        await self.redis.ping()

    async def close(self) -> None:
        if self._hub is not None:
            await self._hub.close()
        if self._owns_pool:
            await self.redis.aclose()
            pool = getattr(self.redis, "connection_pool", None)  # a cluster client has one per node, closed above
            if pool is not None:
                await pool.disconnect()

    # ---------------------------------------------------------------------------------------- reads

    async def job_status(self, job_id: str) -> JobStatus:
        return await arun(self.redis, core.job_status(self.keys(job_id)))

    async def job_tenant(self, job_id: str) -> str:
        return await arun(self.redis, core.job_tenant(self.keys(job_id)))

    async def record(self, job_id: str) -> JobRecord:
        """The job record (docs/protocol.md#the-job-record; see `core.record`)."""
        return await arun(self.redis, core.record(self.keys(job_id)))

    async def records(self, job_ids: list[str]) -> list[JobRecord]:
        """The records of several jobs (those that still exist), in the given order (see `core.records`)."""
        return await arun(self.redis, core.records([self.keys(job_id) for job_id in job_ids]))

    async def submitted(self, job_id: str) -> Any:
        """The job as it was submitted, or None for no such job."""
        return await arun(self.redis, core.submitted(self.keys(job_id)))

    async def recent_jobs(self, limit: int, *, offset: int = 0, tenant: str | None = None) -> list[str]:
        """Job ids, newest first: every tenant's, or those of `tenant` when it is a named one (the default tenant's
        are among every tenant's: see `StateStore._queue_listing`)."""
        listing = self.fleet.jobs if tenant in (None, DEFAULT_TENANT) else self.fleet.tenant_jobs(tenant)
        return list(await self.redis.zrevrange(listing, offset, offset + limit - 1))

    async def read_events(self, job_id: str, after: str = "0-0", *, count: int | None = None,
                          block_ms: int | None = None) -> list[Entry]:
        """Events after the stream id `after` as (id, envelope JSON form), as `StateStore.read_events`."""
        return await arun(self.redis, core.read_events(self.keys(job_id), after, count=count, block_ms=block_ms))

    async def event(self, job_id: str, entry_id: str) -> dict | None:
        """One event by its stream id, or None."""
        return await arun(self.redis, core.event(self.keys(job_id), entry_id))

    async def wait_finished(self, job_id: str, timeout_s: float) -> JobStatus | None:
        """Wait until the job ends (at most `timeout_s`, capped at 2 s: a shared connection is held meanwhile):
        its final status, or None."""
        return await arun(self.redis, core.wait_finished(self.keys(job_id), min(2.0, timeout_s)))

    async def result(self, job_id: str, timeout: float | None) -> JobRecord:
        """Wait until the job ends (at most `timeout` s): its record (see `core.result`: one pipeline per
        second of waiting, and one for a job that has ended)."""
        return await arun(self.redis, core.result(self.keys(job_id), timeout, cluster=self.cluster))

    async def events(self, job_id: str, after: str = "0-0", *, follow: bool = True,
                     batch: int = 500) -> AsyncIterator[Entry]:
        """A job's events in order from `after`; with `follow`, until its `job.finished` event (or, for a job
        that ended without one, until the stream has nothing more). `core.Follow` decides what to read; waiting
        happens on the shared `EventHub`, which usually hands over the new entries it read itself (on a Redis
        Cluster, whose streams no one read can span, in this follower's own blocking reads)."""
        machine = Follow(after, follow=follow, batch=batch)
        async with self._waiter(job_id) as wait:
            while (need := machine.need()) is not None:
                if isinstance(need, CheckStatus):
                    machine.status(await self.job_status(job_id))
                    continue
                entries = await (self.read_events(job_id, need.after, count=need.count) if isinstance(need, Read)
                                 else wait(need))
                for entry in machine.entries(entries):
                    yield entry

    @contextlib.asynccontextmanager
    async def _waiter(self, job_id: str) -> AsyncIterator[Callable[[Wait], Awaitable[list[Entry]]]]:
        """How this process waits for a stream's next entries: the hub's wake-up (with the entries it read,
        or a read of this follower's own), or on a cluster a blocking read."""
        if self.cluster:
            async def read_blocking(need: Wait) -> list[Entry]:
                return await self.read_events(job_id, need.after, count=need.count, block_ms=_CLUSTER_BLOCK_MS)

            yield read_blocking
            return
        async with self.hub.subscribe(self.keys(job_id).events) as follower:
            async def woken(need: Wait) -> list[Entry]:
                handed = await follower.wait(need.after)
                return handed or await self.read_events(job_id, need.after, count=need.count)

            yield woken


def _connect(url: str, *, cluster: bool, max_connections: int, **options: Any) -> Any:
    """The async client of the store at `url`: on one server, a bounded pool that makes a request wait for a free
    connection instead of failing (hundreds of streams share a few dozen connections, each held only for a
    short read); a Sentinel group or a cluster through `store/connect.py`."""
    from agentq.store.connect import CONNECTION_OPTIONS, connect_redis, is_sentinel_url

    if cluster or is_sentinel_url(url):
        return connect_redis(url, cluster=cluster, asynchronous=True, **options)
    import redis.asyncio

    pool = redis.asyncio.BlockingConnectionPool.from_url(
        url, decode_responses=True, **{**CONNECTION_OPTIONS, **options}, max_connections=max_connections, timeout=20)
    return redis.asyncio.Redis(connection_pool=pool)
