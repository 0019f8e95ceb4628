"""The contracts of the store's fleet-wide parts: the concerns that have no step in a job's scripts, each a class of
its own over the store's connection (`part.py`), built once by the composition root — the fleet and its node names,
the models' rate limits, the tenants' job limits, the metrics' figures, the batch lane, webhooks. `contracts.py`
holds those of a job's state machine and names these too, so a part imports its contracts from one place.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from agentq.protocol.envelopes import Envelope
from agentq.protocol.limits import LimitAsk, ModelLimits, Observed
from agentq.protocol.records import WorkerAnnouncement
from agentq.protocol.tenants import TenantLimits
from agentq.store.replies import LimitReply, TenantRefusal
from agentq.store.views import FleetStats, QueuedRequest, StoredDelivery, WatchedJob, WorkerBeat


class TenantLimitStore(Protocol):
    """A tenant's job limits (a part of its own: `store/tenants.py`): a job admitted before it is written, or its
    admission taken back."""

    def admit_job(self, tenant: str, job_id: str, limits: TenantLimits, *,
                  expire_at_ms: int) -> TenantRefusal | None: ...

    def release_job(self, tenant: str, job_id: str) -> None: ...


class LimitStore(Protocol):
    """The fleet's model rate limits: a request's take, and what the API said settled; the context windows
    refusals taught (a part of its own: `store/limits.py`)."""

    def take_model_request(self, model: str, place: str, limits: ModelLimits, ask: LimitAsk, *,
                           started: tuple[str, Sequence[Envelope]] | None = None) -> LimitReply: ...

    def settle_model_request(self, model: str, limits: ModelLimits, observed: Observed) -> None: ...

    def learn_context_window(self, model: str, tokens: int) -> None: ...

    def context_windows(self) -> dict[str, int]: ...


class FleetStore(Protocol):
    """What the fleet announces and publishes: live workers and their heartbeats, known activities, tools, and
    the key that signs call tasks (a part of its own: `store/fleet.py`)."""

    def announce_worker(self, worker_id: str, announcement: WorkerAnnouncement, ttl_s: float) -> None: ...

    def retire_worker(self, worker_id: str) -> None: ...

    def live_workers(self) -> list[WorkerAnnouncement]: ...

    def worker_beats(self) -> list[WorkerBeat]: ...

    def live_activities(self) -> dict[str, dict]: ...

    def known_activities(self, memory_s: float) -> dict[str, dict]: ...

    def forget_activity(self, name: str) -> bool: ...

    def publish_tools(self, schemas: dict[str, dict], *, publisher: str) -> list[str]: ...

    def published_tools(self) -> dict[str, dict]: ...

    def tool_conflicts(self) -> dict[str, dict]: ...

    def task_signing_key(self) -> bytes: ...


class StatsStore(Protocol):
    """The fleet's figures for the metrics, read at scrape time (a part of its own: `store/fleet_stats.py`)."""

    def fleet_stats(self, *, sample: int = 256) -> FleetStats: ...


class NodeNameStore(Protocol):
    """Celery node names held by one process at a time (the fleet part's)."""

    def claim_node_name(self, name: str, holder: str, ttl_ms: int) -> str | None: ...

    def swap_node_name(self, name: str, expected: str, holder: str, ttl_ms: int, *,
                       or_absent: bool = False) -> bool: ...

    def release_node_name(self, name: str, holder: str) -> bool: ...

    def node_name_holder(self, name: str) -> str | None: ...


class FleetPart(FleetStore, NodeNameStore, Protocol):
    """The fleet part (`store/fleet.py`'s `RedisFleet`): what the fleet announces and the node names."""


class BatchStore(Protocol):
    """The batch lane (`store/batches.py`): requests waiting for a batch, the batches sent and not ended yet, their
    results, and the lane's round (one dispatcher at a time)."""

    def request(self, custom_id: str) -> dict[str, str]: ...

    def enqueue(self, custom_id: str, *, place: str, job: str, params: str, tries: int) -> bool: ...

    def forget(self, custom_id: str) -> None: ...

    def store_result(self, custom_id: str, result: str) -> bool: ...

    def waiting(self, limit: int) -> list[tuple[str, int]]: ...

    def queued(self, custom_ids: Iterable[str]) -> list[QueuedRequest]: ...

    def drop(self, custom_ids: Iterable[str]) -> None: ...

    def sent(self, batch_id: str, custom_ids: list[str]) -> None: ...

    def open_batches(self) -> list[str]: ...

    def members(self, batch_id: str) -> list[str]: ...

    def close(self, batch_id: str) -> None: ...

    def jobs_of(self, custom_ids: Iterable[str]) -> dict[str, str | None]: ...

    def active_jobs(self, job_ids: Iterable[str]) -> set[str]: ...

    def lock(self, token: str, ttl_ms: int) -> bool: ...


class WebhookWatch(Protocol):
    """The jobs whose webhook is watched (docs/webhooks.md), and what the watcher reads of them; a job is watched
    before it is written and unwatched once its last delivery is stored."""

    def watch(self, job_id: str, now_ms: int) -> None:
        """Watch job `job_id` from `now_ms` on (raises `InvalidJobIdError` before anything is written)."""
        ...

    def unwatch(self, job_id: str) -> None: ...

    def watched(self, limit: int) -> list[str]:
        """The watched jobs the watcher looked at least recently, at most `limit`."""
        ...

    def watched_since(self, job_id: str) -> float | None:
        """When the watcher last looked at `job_id` (ms; when it was watched, before the first look); None: not
        watched."""
        ...

    def looked_at(self, job_ids: Sequence[str], now_ms: int) -> None:
        """The watcher looked at the watched `job_ids` at `now_ms` (a job no longer watched stays unwatched)."""
        ...

    def take_scan(self, token: str, ms: int) -> bool:
        """Whether the process `token` looks for new events now (one process of the fleet per `ms`)."""
        ...

    def job_states(self, job_ids: Sequence[str]) -> list[WatchedJob]:
        """Each job's status, options and saved cursor, in the order of `job_ids`, in one round trip."""
        ...

    def set_cursor(self, job_id: str, cursor: str) -> None:
        """The last entry of the job's event stream the watcher handled."""
        ...

    def awaiting_approval(self, job_id: str) -> list[str]:
        """The job's calls held for a reviewer now."""
        ...


class WebhookDeliveries(Protocol):
    """Webhook deliveries (docs/webhooks.md): stored once per event, attempted under a lease when due, their
    outcomes kept; the store keeps each delivery's state as a plain JSON object and its body as bytes."""

    def existing(self, job_id: str, ids: Sequence[str]) -> set[str]:
        """Which of `ids` are stored for the job already."""
        ...

    def enqueue(self, deliveries: Sequence[StoredDelivery], now_ms: int) -> None:
        """Store each new delivery with its body (a delivery stored already is left as it is) and make it due at
        `now_ms`. Its due entry is written even when it existed (a process may have died between the two): an
        attempt of a delivery that ended only removes the entry."""
        ...

    def claim_due(self, now_ms: int, lease_ms: int, limit: int) -> list[tuple[str, str]]:
        """Up to `limit` due (job, delivery) pairs for this process to attempt; each is moved `lease_ms` ahead."""
        ...

    def read_delivery(self, job_id: str, delivery_id: str) -> StoredDelivery | None:
        """A stored delivery with its body; None: not stored (or expired with its job)."""
        ...

    def save_delivery(self, job_id: str, delivery_id: str, data: dict[str, Any], next_ms: int | None) -> None:
        """Keep an attempt's outcome `data`; the next attempt is due at `next_ms` (None: the delivery ended)."""
        ...

    def forget_due(self, job_id: str, delivery_id: str) -> None:
        """No attempt of the delivery is due any more."""
        ...

    def deliveries(self, job_id: str) -> list[dict[str, Any]]:
        """The stored states of the job's deliveries, in no particular order."""
        ...


class WebhookStore(WebhookWatch, WebhookDeliveries, Protocol):
    """The webhook keys (`store/webhooks.py`): watched jobs and their deliveries."""
