"""The frozen records the store's plain reads return (pipelines of reads, no Lua step).

No I/O here: both stores (Redis and the tests' in-memory one) return these, and the `Store` protocol names
them, so code written against the protocol imports nothing from the Redis implementation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentq.protocol.records import CallRecord, JobInfo, JobKind, ParentLink, WorkerAnnouncement
from agentq.protocol.status import CallStatus, JobStatus
from agentq.protocol.waits import WaitSpec


@dataclass(frozen=True)
class AgentInputs:
    """What an agent tick reads, in one round trip."""

    info: JobInfo
    log: list[dict]
    exchanges: list[dict]
    registered: dict[str, dict]


@dataclass(frozen=True)
class JobHead:
    """What the restart check reads of an active job (`RedisActiveJobs.active_job_heads`)."""

    job_id: str
    status: JobStatus
    kind: JobKind
    open_calls: int  # awaited calls not ended
    ticking: bool  # an agent tick is in flight (or was, when its lease is gone)
    exchanges: int  # the job's model requests so far: the number of its next tick
    tick_leased: bool  # a process holds the tick's lease
    ready: tuple[str, ...]  # its calls whose status is `ready`


@dataclass(frozen=True)
class CallTable:
    """What the calls view (README.md#the-http-api-and-the-web-page `/calls`) reads of a job besides its events, in one
    round trip."""

    records: dict[str, CallRecord]  # call id -> record
    statuses: dict[str, CallStatus]  # call id -> status
    attempts: dict[str, int]  # call id -> attempts started (absent: none yet)
    dependents: dict[str, list[str]]  # call id -> the calls that wait on it (absent: none)


@dataclass(frozen=True)
class WorkerBeat:
    """A worker's entry in the fleet's set: its id, when its announcement expires (unix s), and the
    announcement itself (None once its key expired)."""

    worker_id: str
    expires_at: float
    announcement: WorkerAnnouncement | None


@dataclass(frozen=True)
class FleetStats:
    """What the metrics read of the jobs (`Store.fleet_stats`)."""

    jobs_active: int
    approvals_pending: int
    jobs_total: dict[str, int]  # final status -> jobs that ended with it
    jobs_by_tenant: dict[tuple[str, ...], int] = field(default_factory=dict)  # (final status, tenant) -> jobs


@dataclass(frozen=True)
class RelayCursor:
    """Where the relay of a module's child job stands: the last of its events copied to the parent's stream
    (`0-0` before the first) and the child's link to its parent."""

    cursor: str
    parent: ParentLink


@dataclass(frozen=True)
class QueuedRequest:
    """A request waiting for its batch."""

    custom_id: str
    job: str
    params: str  # the request body's JSON
    queued_ms: int


@dataclass(frozen=True)
class WaitTaken:
    """How a waiting call ends (`WaitStore.take_wait`): `outcome` is 'woken' (`ended` is `{"output": value}` or
    `{"timeout": true}`), 'early' (not due, nothing delivered), 'opening' (its call still runs: the attempt that
    wrote its timer has not opened the wait yet) or 'gone' (it does not wait); `spec` and `token` are the open
    wait's."""

    outcome: str
    spec: WaitSpec | None = None
    token: str = ""
    ended: dict | None = None


@dataclass(frozen=True)
class DeadlineEnd:
    """What ending a job at its deadline did (`StateStore.end_by_deadline`): `outcome` is 'ended' (with the calls
    it canceled that were ready, running or waiting), 'final' (the job had ended) or 'moved' (its log grew since it
    was read)."""

    outcome: str
    ready: tuple[str, ...] = ()
    running: tuple[str, ...] = ()
    waiting: tuple[str, ...] = ()


@dataclass(frozen=True)
class WatchedJob:
    """What the webhook watcher reads of a watched job (`WebhookStore.job_states`): its status (None: the job is
    not written, yet or any more), its options (the stored JSON value) and the cursor of its events it saved."""

    status: str | None
    options: Any
    cursor: str = "0-0"


@dataclass(frozen=True)
class StoredDelivery:
    """A webhook delivery as the store keeps it: its job, its id, its state (a plain JSON object whose shape is
    the webhooks plug-in's `Delivery`) and the exact body every attempt sends."""

    job_id: str
    id: str
    data: dict[str, Any]
    body: bytes = b""
