"""`EventHub`: the event streams followed in one asyncio process, on one connection.

The hub runs one blocking `XREAD` over every stream that has a waiting follower and wakes the followers whose
streams moved. A follower that joins interrupts the hub's read (`CLIENT UNBLOCK`), so it is included at once;
the hub never holds data back, it only tells a follower that its stream moved, and each follower reads from its
own position, so nothing is lost or sent twice whatever the timing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from agentq.store.boundary import connection_errors
from agentq.store.core import Entry, decode_entries
from agentq.store.keys import JobKeys

log = logging.getLogger("agentq.store")


class Follower:
    """One follower of a stream: waits at its position; the hub wakes it, with the entries that follow that
    position when the hub read exactly those."""

    def __init__(self, hub: EventHub, key: str):
        self._hub = hub
        self.key = key
        self._event = asyncio.Event()
        self.position = "0-0"
        self.waiting = False
        self._handed: list[Entry] = []

    async def wait(self, position: str, timeout_s: float = 15.0) -> list[Entry]:
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

    def wake(self, entries: list[Entry] | None = None) -> None:
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

    def __init__(self, redis: Any, url: str):
        self._redis = redis  # the shared pool (CLIENT UNBLOCK)
        self._url = url  # the hub reads on its own connection
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
            await self._redis.client_unblock(reader_id)

    async def _run(self) -> None:
        from agentq.store.connect import connect_redis

        # its own connection, whose read timeout outlasts the blocked read (the shared pool's is redis-py's 5 s)
        reader = connect_redis(self._url, asynchronous=True, single_connection_client=True,
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
                except connection_errors() as error:
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
        entries: list[Entry] | None = None
        for follower in list(followers):
            if not follower.waiting or _stream_id(follower.position) >= _stream_id(newest):
                continue
            if follower.position == read_from:
                if entries is None:
                    entries = decode_entries(raw, JobKeys.job_of(key))
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

