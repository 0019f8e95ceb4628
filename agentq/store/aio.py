"""Async reads of the state store, for asyncio services: the HTTP API and `agentq.AsyncClient`.

Writes go through the synchronous `StateStore` (its Lua steps are short, and the job service that drives them
is shared by every shell); what an async process must never do is hold a thread per follower, so everything
that waits (a job's events, its end) is read here with `redis.asyncio`.

`EventHub` follows many event streams on one connection: it runs one blocking `XREAD` over every stream that
has a waiting follower and wakes the followers whose streams moved. A follower that joins interrupts the
hub's read (`CLIENT UNBLOCK`), so it is included at once; the hub never holds data back, it only tells a
follower that its stream moved, and each follower reads from its own position, so nothing is lost or sent
twice whatever the timing.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

from agentq.errors import JobNotFoundError
from agentq.protocol.records import JobRecord
from agentq.protocol.status import JobStatus
from agentq.store.boundary import _connection_errors, _unavailable
from agentq.store.event_codec import unpack
from agentq.store.keys import FleetKeys, JobKeys
from agentq.store.records import build_job_record
from agentq.store.state import decode_job

log = logging.getLogger("agentq.store")

F = TypeVar("F", bound=Callable[..., Any])


def _mapped(function: F) -> F:
    """Map redis-py's connection and timeout errors to `StoreUnavailableError` (as `store/boundary.py` does
    for the synchronous store), for coroutines and async generators."""
    if inspect.isasyncgenfunction(function):
        @functools.wraps(function)
        async def generator(self: Any, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            try:
                async for item in function(self, *args, **kwargs):
                    yield item
            except _connection_errors() as error:
                raise _unavailable(error, self.url) from error

        return generator  # type: ignore[return-value]

    @functools.wraps(function)
    async def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return await function(self, *args, **kwargs)
        except _connection_errors() as error:
            raise _unavailable(error, self.url) from error

    return method  # type: ignore[return-value]


class AsyncStateStore:
    """Read-only async view of the state store (same keys and decoding as `StateStore`)."""

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
            self._hub = EventHub(self)
        return self._hub

    @_mapped
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

    @_mapped
    async def job_status(self, job_id: str) -> JobStatus:
        status = await self.redis.hget(self.keys(job_id).job, "status")
        if status is None:
            raise _not_found(job_id)
        return JobStatus(status)

    @_mapped
    async def record(self, job_id: str) -> JobRecord:
        """The job record of SPEC §12 (as `StateStore.record`)."""
        keys = self.keys(job_id)
        fields = await self.redis.hgetall(keys.job)
        if not fields:
            raise _not_found(job_id)
        info = decode_job(fields)
        if info.record is not None and info.status.is_final and info.status is not JobStatus.CANCELED:
            return info.record  # (a canceled job's calls that were running may still write: read its log)
        log_entries = await self.redis.lrange(keys.log, 0, -1)
        return build_job_record(info, [json.loads(m) for m in log_entries])

    @_mapped
    async def records(self, job_ids: list[str]) -> list[JobRecord]:
        """The records of several jobs (those that still exist), in the given order."""
        found = []
        for job_id in job_ids:
            try:
                found.append(await self.record(job_id))
            except JobNotFoundError:
                continue  # expired since it was listed
        return found

    @_mapped
    async def recent_jobs(self, limit: int, *, offset: int = 0) -> list[str]:
        """Job ids, newest first."""
        return list(await self.redis.zrevrange(self.fleet.jobs, offset, offset + limit - 1))

    @_mapped
    async def read_events(self, job_id: str, after: str = "0-0", *, count: int | None = None,
                          block_ms: int | None = None) -> list[tuple[str, dict]]:
        """Events after the stream id `after` as (id, stored JSON form), as `StateStore.read_events`."""
        reply = await self.redis.xread({self.keys(job_id).events: after}, count=count, block=block_ms)
        if not reply:
            return []
        return [(entry_id, unpack(fields["e"], job_id)) for entry_id, fields in reply[0][1]]

    @_mapped
    async def event(self, job_id: str, entry_id: str) -> dict | None:
        """One event by its stream id, or None."""
        reply = await self.redis.xrange(self.keys(job_id).events, entry_id, entry_id, count=1)
        return unpack(reply[0][1]["e"], job_id) if reply else None

    @_mapped
    async def wait_finished(self, job_id: str, timeout_s: float) -> JobStatus | None:
        """Wait until the job ends (at most `timeout_s`, capped at 2 s: the connection's read timeout is
        longer): its final status, or None (see `StateStore.wait_finished`)."""
        done = self.keys(job_id).done
        status = await self.redis.blmove(done, done, min(2.0, max(0.01, timeout_s)), "RIGHT", "LEFT")
        return None if status is None else JobStatus(status)

    async def follow(self, job_id: str, after: str = "0-0", *, batch: int = 500) -> AsyncIterator[tuple[str, dict]]:
        """A job's events in order from `after` until its `job.finished` event (or, for a job that ended
        without one, until the stream has nothing more). Waiting happens on the shared `EventHub`, which
        usually hands over the new entries it read itself."""
        if self.cluster:  # one stream per hash slot: no read can span the followed streams
            async for entry in self._follow_alone(job_id, after, batch):
                yield entry
            return
        async with self.hub.subscribe(self.keys(job_id).events) as follower:
            entries = await self.read_events(job_id, after, count=batch)
            while True:
                for entry_id, envelope in entries:
                    after = entry_id
                    yield entry_id, envelope
                    if envelope.get("event") == "job.finished":
                        return
                if len(entries) >= batch:
                    entries = await self.read_events(job_id, after, count=batch)
                    continue
                if not entries and (await self.job_status(job_id)).is_final:
                    return  # ended before `after`, or without a final event
                handed = await follower.wait(after)
                entries = handed if handed else await self.read_events(job_id, after, count=batch)


    async def _follow_alone(self, job_id: str, after: str, batch: int) -> AsyncIterator[tuple[str, dict]]:
        """`follow` on a Redis Cluster: this follower's own blocking reads (a connection each while it waits)."""
        while True:
            entries = await self.read_events(job_id, after, count=batch, block_ms=2000)
            for entry_id, envelope in entries:
                after = entry_id
                yield entry_id, envelope
                if envelope.get("event") == "job.finished":
                    return
            if not entries and (await self.job_status(job_id)).is_final:
                return


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


class Follower:
    """One follower of a stream: waits at its position; the hub wakes it, with the entries that follow that
    position when the hub read exactly those."""

    def __init__(self, hub: EventHub, key: str):
        self._hub = hub
        self.key = key
        self._event = asyncio.Event()
        self.position = "0-0"
        self.waiting = False
        self._handed: list[tuple[str, dict]] = []

    async def wait(self, position: str, timeout_s: float = 15.0) -> list[tuple[str, dict]]:
        """Wait for entries after `position`: returns them when the hub read them, else [] (the stream moved,
        or `timeout_s` passed: the caller reads the stream itself, and re-checks its job when it is empty)."""
        self.position = position
        self._event.clear()
        self.waiting = True
        try:
            self._hub.waiting(self)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._event.wait(), timeout_s)
        finally:
            self.waiting = False
        handed, self._handed = self._handed, []
        return handed

    def wake(self, entries: list[tuple[str, dict]] | None = None) -> None:
        if entries:
            self._handed = entries
        self._event.set()


class EventHub:
    """One blocking `XREAD` for every followed stream of this process (see the module docstring).

    For each stream the hub keeps the newest entry id it has read (`_seen`) and reads on from there, so one new
    entry is read from Redis once, however many followers the stream has: the followers waiting exactly at
    the hub's position get the entries handed over; one waiting further back is only woken and reads for
    itself. A follower of a stream the hub does not follow yet interrupts the blocked read (`CLIENT UNBLOCK`)
    so the stream joins it. Reads are at least `_period()` apart, so a busy process reads many streams'
    entries per round trip instead of one."""

    BLOCK_MS = 10_000
    COUNT = 100

    def __init__(self, store: AsyncStateStore):
        self._store = store
        self._followers: dict[str, set[Follower]] = {}
        self._seen: dict[str, str] = {}
        self._task: asyncio.Task | None = None
        self._reader_id: int | None = None

    @contextlib.asynccontextmanager
    async def subscribe(self, key: str) -> AsyncIterator[Follower]:
        follower = Follower(self, key)
        try:
            yield follower
        finally:
            followers = self._followers.get(key)
            if followers is not None:
                followers.discard(follower)
                if not followers:
                    del self._followers[key]
                    self._seen.pop(key, None)

    @property
    def followed(self) -> int:
        """How many streams the hub is following now."""
        return len(self._followers)

    def waiting(self, follower: Follower) -> None:
        """`follower` waits for entries after `follower.position`."""
        key = follower.key
        self._followers.setdefault(key, set()).add(follower)
        seen = self._seen.get(key)
        if seen is not None:
            if _stream_id(follower.position) < _stream_id(seen):
                follower.wake()  # the hub read newer entries already: the follower reads them itself
            return
        self._seen[key] = follower.position
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="agentq-event-hub")
        elif self._reader_id is not None:
            asyncio.get_running_loop().create_task(self._unblock(self._reader_id))

    def _period(self) -> float:
        """The least time between two reads: none for a few streams, up to 20 ms for thousands."""
        return min(0.02, 0.005 * len(self._followers) / 250)

    async def _unblock(self, reader_id: int) -> None:
        with contextlib.suppress(Exception):
            await self._store.redis.client_unblock(reader_id)

    async def _run(self) -> None:
        from agentq.store.connect import connect_redis

        # its own connection, whose read timeout outlasts the blocked read (the shared pool's is redis-py's 5 s)
        reader = connect_redis(self._store.url, asynchronous=True, single_connection_client=True,
                               socket_timeout=self.BLOCK_MS / 1000 + 10)
        backoff = 0.1
        try:
            while self._followers:
                started = time.monotonic()
                try:
                    if self._reader_id is None:
                        self._reader_id = int(await reader.client_id())
                    streams: dict[Any, Any] = dict(self._seen)
                    reply: Any = await reader.xread(streams, count=self.COUNT, block=self.BLOCK_MS)
                    backoff = 0.1
                except _connection_errors() as error:
                    log.warning("event hub: the state store is unreachable (%s); retrying in %.1f s", error, backoff)
                    self._reader_id = None
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 5.0)
                    continue
                for key, entries in reply or ():
                    if entries:
                        self._hand_over(key, streams[key], entries)
                rest = self._period() - (time.monotonic() - started)
                if reply and rest > 0:
                    await asyncio.sleep(rest)
        finally:
            self._reader_id = None
            with contextlib.suppress(Exception):
                await reader.aclose()

    def _hand_over(self, key: str, read_from: str, raw: list) -> None:
        """Entries of `key` read after `read_from`: hand them to the followers waiting exactly there, wake the
        ones waiting further back."""
        followers = self._followers.get(key)
        if not followers:
            return
        newest = raw[-1][0]
        if self._seen.get(key) == read_from:
            self._seen[key] = newest
        entries: list[tuple[str, dict]] | None = None
        for follower in list(followers):
            if not follower.waiting or _stream_id(follower.position) >= _stream_id(newest):
                continue
            if follower.position == read_from:
                if entries is None:
                    job_id = JobKeys.job_of(key)
                    entries = [(entry_id, unpack(fields["e"], job_id)) for entry_id, fields in raw]
                follower.wake(entries)
            else:
                follower.wake()

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def _stream_id(entry_id: str) -> tuple[int, int]:
    milliseconds, _, sequence = entry_id.partition("-")
    return int(milliseconds or 0), int(sequence or 0)


def _not_found(job_id: str) -> JobNotFoundError:
    return JobNotFoundError(f"no job {job_id!r} (never submitted, or expired)")
