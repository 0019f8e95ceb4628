"""The synchronous I/O shell of the store's reads (`store/core.py`): `run` sends a step's batches with a redis-py
client, `SyncReads` offers the reads a client of the store makes, and `iter_events` drives the `Follow` state
machine over any `Store` (the Redis one or the memory stand-in of the unit tests)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol, TypeVar, cast

from agentq.protocol.records import JobRecord
from agentq.protocol.status import JobStatus
from agentq.store import core
from agentq.store.boundary import map_store_errors
from agentq.store.core import CheckStatus, Entry, Follow, Read, Step
from agentq.store.keys import JobKeys

T = TypeVar("T")


def run(redis: Any, step: Step[T]) -> T:
    """Drive `step` on the redis-py client `redis`: each batch is one round trip."""
    try:
        batch = next(step)
        while True:
            batch = step.send(_send(redis, batch))
    except StopIteration as done:
        return cast(T, done.value)


def _send(redis: Any, batch: core.Batch) -> list[Any]:
    if len(batch) == 1:
        (one,) = batch
        return [getattr(redis, one.name)(*one.args, **one.kwargs)]
    pipe = redis.pipeline(transaction=False)
    for each in batch:
        getattr(pipe, each.name)(*each.args, **each.kwargs)
    return list(pipe.execute())


@map_store_errors
class SyncReads:
    """A job's reads over a redis-py client: status, record, events, waiting for the end. Errors map through
    `store/boundary.py`, as on every store."""

    def __init__(self, redis: Any, *, url: str, namespace: str = "agentq", cluster: bool = False):
        self.redis = redis
        self.url = url
        self.namespace = namespace
        self.cluster = cluster

    def keys(self, job_id: str) -> JobKeys:
        return JobKeys(self.namespace, job_id)

    def job_status(self, job_id: str) -> JobStatus:
        return run(self.redis, core.job_status(self.keys(job_id)))

    def record(self, job_id: str) -> JobRecord:
        return run(self.redis, core.record(self.keys(job_id)))

    def result(self, job_id: str, timeout: float | None) -> JobRecord:
        """Wait until the job ends (at most `timeout` s): its record (see `core.result`)."""
        return run(self.redis, core.result(self.keys(job_id), timeout, cluster=self.cluster))

    def read_events(self, job_id: str, after: str = "0-0", *, block_ms: int | None = None,
                    count: int | None = None) -> list[Entry]:
        return run(self.redis, core.read_events(self.keys(job_id), after, count=count, block_ms=block_ms))

    def events(self, job_id: str, after: str = "0-0", *, follow: bool = True) -> Iterator[Entry]:
        """A job's events from `after`; with `follow`, until its final event (see `core.Follow`)."""
        return iter_events(self, job_id, after, follow=follow)


class Reader(Protocol):
    """What following a stream needs of a store (every `Store` has it)."""

    def job_status(self, job_id: str) -> JobStatus: ...

    def read_events(self, job_id: str, after: str = "0-0", *, block_ms: int | None = None,
                    count: int | None = None) -> list[Entry]: ...


def iter_events(store: Reader, job_id: str, after: str = "0-0", *, follow: bool = True,
                block_ms: int = 1000) -> Iterator[Entry]:
    """A job's events in order from `after`; with `follow`, keep waiting (blocking reads of `block_ms`) until
    the job's final event."""
    machine = Follow(after, follow=follow)
    while (need := machine.need()) is not None:
        if isinstance(need, CheckStatus):
            machine.status(store.job_status(job_id))
            continue
        wait = None if isinstance(need, Read) else block_ms
        yield from machine.entries(store.read_events(job_id, need.after, count=need.count, block_ms=wait))
