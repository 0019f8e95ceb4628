"""The store's reads without I/O: what the sync store (`store/sync_reads.py`, over redis-py) and the async one
(`store/aio.py`, over `redis.asyncio`) share, as httpx's `Client` and `AsyncClient` share `BaseClient`.

A read is a *step*: a generator that yields the Redis commands it needs as a `Batch` (one batch is one round
trip: a single command, or a pipeline of several) and receives their replies, then returns the decoded value.
The key layout, the commands and the decoding of their replies are written once, here; a shell only sends a
batch and hands back the replies (`run` in the sync shell, `arun` in the async one):

    status = run(redis, job_status(keys))               # sync
    status = await arun(redis, job_status(keys))        # async

Following a job's event stream until its `job.finished` is the state machine `Follow`: it says what to read
next (`Read`, `Wait`, `CheckStatus`) and takes what was read; each shell performs those needs its own way (a
blocking `XREAD` in a thread, or the async event hub).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from agentq.errors import JobNotFoundError, JobTimeoutError
from agentq.protocol.envelopes import JobFinished, JobResumed
from agentq.protocol.job_record import build_job_record
from agentq.protocol.records import JobRecord
from agentq.protocol.status import JobStatus
from agentq.protocol.tenants import DEFAULT_TENANT
from agentq.store.codecs import decode_job, saved_record, standing_record
from agentq.store.event_codec import unpack
from agentq.store.keys import JobKeys

T = TypeVar("T")

Entry = tuple[str, dict]  # (stream entry id, the envelope's JSON form)


@dataclass(frozen=True)
class Command:
    """One Redis command, named as the redis-py client method that sends it (the same on both clients)."""

    name: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


def command(name: str, *args: Any, **kwargs: Any) -> Command:
    return Command(name, args, kwargs)


Batch = tuple[Command, ...]  # sent in one round trip; the step receives one reply per command, in order
Step = Generator[Batch, list[Any], T]


def not_found(job_id: str) -> JobNotFoundError:
    return JobNotFoundError(f"no job {job_id!r} (never submitted, or expired)")


# ------------------------------------------------------------------------------------------------ reads


def job_status(keys: JobKeys) -> Step[JobStatus]:
    (status,) = yield (command("hget", keys.job, "status"),)
    if status is None:
        raise not_found(keys.job_id)
    return JobStatus(status)


def job_tenant(keys: JobKeys) -> Step[str]:
    """The tenant of a job (docs/tenants.md); raises `JobNotFoundError` when there is no such job."""
    ((status, tenant),) = yield (command("hmget", keys.job, "status", "tenant"),)
    if status is None:
        raise not_found(keys.job_id)
    return tenant or DEFAULT_TENANT


def read_events(keys: JobKeys, after: str = "0-0", *, count: int | None = None,
                block_ms: int | None = None) -> Step[list[Entry]]:
    """Events after the stream id `after` (with `block_ms`, waiting that long for the first one)."""
    (reply,) = yield (command("xread", {keys.events: after}, count=count, block=block_ms),)
    return decode_entries(reply[0][1], keys.job_id) if reply else []


def decode_entries(raw: list, job_id: str) -> list[Entry]:
    """Stream entries as read (id, fields) → (id, envelope JSON form): stored entries are packed
    (`store/event_codec.py`)."""
    return [(entry_id, unpack(fields["e"], job_id)) for entry_id, fields in raw]


def event(keys: JobKeys, entry_id: str) -> Step[dict | None]:
    """One event by its stream id, or None."""
    (reply,) = yield (command("xrange", keys.events, entry_id, entry_id, count=1),)
    return unpack(reply[0][1]["e"], keys.job_id) if reply else None


def record(keys: JobKeys) -> Step[JobRecord]:
    """The job record: the one saved when the job ended (with its usage as it stands, from the job's fields),
    else computed from the job's fields and its log, read together. A canceled job's is always computed: a call
    that was running at the cancel may still write its outcome. One round trip for an ended job, else two."""
    (head,) = yield (command("hgetall", keys.job),)
    if not head:
        raise not_found(keys.job_id)
    stood = saved_record(head)
    if stood is not None:
        return stood
    fields, log = yield (command("hgetall", keys.job), command("lrange", keys.log, 0, -1))
    if not fields:
        raise not_found(keys.job_id)
    return record_of(fields, log)


def records(jobs: Sequence[JobKeys]) -> Step[list[JobRecord]]:
    """The records of several jobs (those that still exist), in the given order, as `record` reads one: the saved
    records in one pipeline, the fields and logs of the jobs still running in a second."""
    if not jobs:
        return []
    heads = yield tuple(command("hgetall", keys.job) for keys in jobs)
    found, running = _saved_records(heads)
    if running:
        replies = yield tuple(each for n in running
                              for each in (command("hgetall", jobs[n].job), command("lrange", jobs[n].log, 0, -1)))
        for n, fields, log in zip(running, replies[::2], replies[1::2], strict=True):
            if fields:
                found[n] = record_of(fields, log)
    return [found[n] for n in sorted(found)]


def _saved_records(heads: list[dict[str, str]]) -> tuple[dict[int, JobRecord], list[int]]:
    """Of the jobs' hash fields, by position: the saved records that stand, and the jobs whose record is computed
    (a job that expired since it was listed is neither)."""
    found: dict[int, JobRecord] = {}
    running: list[int] = []
    for n, head in enumerate(heads):
        stood = saved_record(head)
        if stood is not None:
            found[n] = stood
        elif head:
            running.append(n)
    return found, running


def submitted(keys: JobKeys) -> Step[Any]:
    """The job as it was submitted (its decoded JSON), or None for no such job (or one rejected at submission).
    It is in the job's spec; a job written before the spec key existed has it in its job hash (read in the same
    round trip)."""
    spec, old = yield (command("hget", keys.spec, "submitted"), command("hget", keys.job, "submitted"))
    value = spec if spec is not None else old
    return None if value is None else json.loads(value)


def record_of(fields: dict[str, str], log: list[str]) -> JobRecord:
    """The record of a job from its stored hash fields and log entries."""
    info = decode_job(fields)
    stood = standing_record(info)
    if stood is not None:
        return stood
    return build_job_record(info, [json.loads(message) for message in log])


def _blmove(keys: JobKeys, timeout_s: float) -> Command:
    """Wait on the job's `done` list: every step that ends a job pushes its final status there; a waiter moves
    that one entry onto the same list, so any number of waiters wake up and it stays for later ones."""
    return command("blmove", keys.done, keys.done, max(0.01, timeout_s), "RIGHT", "LEFT")


def wait_finished(keys: JobKeys, timeout_s: float) -> Step[JobStatus | None]:
    """Wait until the job ends (at most `timeout_s`): its final status, or None."""
    (status,) = yield (_blmove(keys, timeout_s),)
    return None if status is None else JobStatus(status)


def wait_record(keys: JobKeys, timeout_s: float, *, cluster: bool) -> Step[JobRecord | None]:
    """`wait_finished`, then the job's record (None on timeout). The wait and the read of the saved record go in
    one pipeline (Redis runs the read as soon as the wait returns): one round trip; on a Redis Cluster, whose
    pipelines do not carry blocking commands, two."""
    if cluster:
        if (yield from wait_finished(keys, timeout_s)) is None:
            return None
        return (yield from record(keys))
    ended, head = yield (_blmove(keys, timeout_s), command("hgetall", keys.job))
    if ended is None:
        return None
    return saved_record(head) or (yield from record(keys))


def result(keys: JobKeys, timeout: float | None, *, cluster: bool,
           clock: Callable[[], float] = time.monotonic) -> Step[JobRecord]:
    """Wait until the job ends (at most `timeout` seconds) and return its record; `JobTimeoutError` after that.

    It blocks on the job's end signal rather than on its event stream: one wake-up per job, not per event (and
    one round trip for a job that has ended). The status is read after each second without the signal, so a
    job that ended without it is seen too."""
    deadline = None if timeout is None else clock() + timeout
    while True:
        remaining = None if deadline is None else deadline - clock()
        wait = 1.0 if remaining is None else max(0.0, min(1.0, remaining))
        found = yield from wait_record(keys, wait, cluster=cluster)
        if found is not None:
            return found
        status = yield from job_status(keys)
        if status.is_final:
            return (yield from record(keys))
        if deadline is not None and deadline - clock() <= 0:
            raise JobTimeoutError(f"job {keys.job_id} did not finish within {timeout} s (status: {status.value})")


# ------------------------------------------------------------------------------------ following a stream


@dataclass(frozen=True)
class Read:
    """Read the entries after `after` (at most `count`), without waiting."""

    after: str
    count: int


@dataclass(frozen=True)
class Wait:
    """Wait for entries after `after` (a blocking read, or the event hub's wake-up), then read them."""

    after: str
    count: int


@dataclass(frozen=True)
class CheckStatus:
    """Nothing came: read the job's status (a job that ended has nothing more to wait for)."""


Need = Read | Wait | CheckStatus

_FINAL_EVENT = JobFinished.name
_RESUMED_EVENT = JobResumed.name


def _end_of(entries: list[Entry]) -> int | None:
    """The place of the `job.finished` that ends the job among `entries` (one a `job.resumed` follows ended a run,
    not the job); None when there is none."""
    resumed = False
    for n in range(len(entries) - 1, -1, -1):
        event = entries[n][1].get("event")
        if event == _RESUMED_EVENT:
            resumed = True
        elif event == _FINAL_EVENT and not resumed:
            return n
    return None


class Follow:
    """A job's events from `after` until its `job.finished` (or, for a job that ended before `after` or without
    one, until its stream has nothing more); with `follow=False`, the events stored now.

    `need()` is what to do next (None: done); `entries()` takes the entries a `Read` or `Wait` gave and returns
    the ones to hand on (up to the final event); `status()` takes the answer to `CheckStatus`."""

    def __init__(self, after: str = "0-0", *, follow: bool = True, batch: int = 500):
        self.after = after
        self.follow = follow
        self.batch = batch
        self._need: Need | None = Read(after, batch)
        self._ended = False  # the job's status was final: what is stored now is all there will be
        self._closing = False  # a `job.finished` ended a full batch: the next read looks for a `job.resumed`

    def need(self) -> Need | None:
        return self._need

    def entries(self, entries: list[Entry]) -> list[Entry]:
        if self._closing and not self._resumed(entries):
            return []
        end = _end_of(entries)
        if end is not None:
            entry_id = entries[end][0]
            self.after, self._need = entry_id, None
            if end + 1 == len(entries) >= self.batch:  # the last of a full batch: does a resume follow it? (a
                self._closing, self._need = True, Read(entry_id, self.batch)  # short batch was all there was)
            return entries[:end + 1]
        if entries:
            self.after = entries[-1][0]
        if len(entries) >= self.batch:
            self._need = Read(self.after, self.batch)  # more is stored: read on
        elif not self.follow or self._ended:
            self._need = None  # all that is stored now
        elif entries:
            self._need = Wait(self.after, self.batch)
        else:
            self._need = CheckStatus()
        return entries

    def _resumed(self, entries: list[Entry]) -> bool:
        """What was read after a `job.finished`: the job was resumed (docs/resume.md), else that was its end."""
        self._closing = False
        if any(envelope.get("event") == _RESUMED_EVENT for _, envelope in entries):
            return True
        self._need = None
        return False

    def status(self, status: JobStatus) -> None:
        # An ended job's final event may have been stored after the wait that came back empty (the status and the
        # event are written in one step): read once more, then stop.
        self._ended = status.is_final
        self._need = Read(self.after, self.batch) if self._ended else Wait(self.after, self.batch)
