"""Webhook state in Redis, beside the job's own keys and never inside a job's scripts (docs/webhooks.md).

- `agentq:webhooks:jobs` (zset): the jobs whose webhook is watched, scored by when the watcher last looked at
  them. A job is added before it is written (so a job that exists and has a webhook is always watched) and
  removed once its `job.finished` delivery is stored.
- `agentq:{J}:webhook` (hash): `cursor`, the last entry of the job's event stream the watcher handled.
- `agentq:{J}:deliveries` (hash): delivery id -> the delivery's state (`records.Delivery` JSON) and
  `<id>:body` -> the exact body every attempt sends; kept `AGENTQ_WEBHOOK_RETRY_S` plus the job lifetime.
- `agentq:webhooks:due` (zset): `"<job> <delivery>"` -> when its next attempt is due (ms). A process takes due
  members with `store/lua/webhook_claim.lua` (loaded by the store's `ScriptRunner`, as every script is), which
  moves each one a lease ahead: a process that dies mid-attempt leaves it to be taken again when the lease ends,
  with the same id (at least once).

Every command touches one job's keys or one fleet-wide key (the cluster rule of docs/architecture.md).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agentq.store.keys import FleetKeys, JobKeys
from agentq.store.script_runner import ScriptRunner
from agentq.webhooks.records import Delivery


def _decode(value: Any) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


class DeliveryStore:
    """The webhook keys of one namespace over a store's Redis connection (`StateStore.redis`)."""

    def __init__(self, redis: Any, namespace: str = "agentq", *, keep_s: float = 8 * 24 * 3600):
        self.redis = redis
        self.namespace = namespace
        self.fleet = FleetKeys(namespace)
        self.keep_s = int(keep_s)  # how long a job's deliveries are kept after the last one was stored
        self._scripts = ScriptRunner(redis, ["webhook_claim"])

    def keys(self, job_id: str) -> JobKeys:
        return JobKeys(self.namespace, job_id)

    # ------------------------------------------------------------------------------------------- watching

    def watch(self, job_id: str, now_ms: int) -> None:
        self.keys(job_id)  # InvalidJobIdError before anything is written
        self.redis.zadd(self.fleet.webhook_jobs, {job_id: now_ms}, nx=True)

    def unwatch(self, job_id: str) -> None:
        self.redis.zrem(self.fleet.webhook_jobs, job_id)

    def watched(self, limit: int) -> list[str]:
        """The watched jobs the watcher looked at least recently."""
        return [_decode(m) or "" for m in self.redis.zrange(self.fleet.webhook_jobs, 0, limit - 1)]

    def looked_at(self, job_ids: Sequence[str], now_ms: int) -> None:
        if job_ids:
            self.redis.zadd(self.fleet.webhook_jobs, dict.fromkeys(job_ids, now_ms), xx=True)

    def take_scan(self, token: str, ms: int) -> bool:
        """Whether this process looks for new events now (one process per poll of the fleet)."""
        return bool(self.redis.set(self.fleet.webhook_scan, token, nx=True, px=max(ms, 1)))

    def job_states(self, job_ids: Sequence[str]) -> list[tuple[str | None, Any, str]]:
        """Each job's (status, options, webhook cursor); (None, None, "0-0") for a job that does not exist."""
        pipe = self.redis.pipeline(transaction=False)
        for job_id in job_ids:
            keys = self.keys(job_id)
            pipe.hmget(keys.job, "status", "options")
            pipe.hget(keys.webhook, "cursor")
        replies = pipe.execute()
        states = []
        for (status, options), cursor in zip(replies[::2], replies[1::2], strict=True):
            states.append((_decode(status), json.loads(options) if options else None, _decode(cursor) or "0-0"))
        return states

    def set_cursor(self, job_id: str, cursor: str) -> None:
        keys = self.keys(job_id)
        pipe = self.redis.pipeline(transaction=False)
        pipe.hset(keys.webhook, "cursor", cursor)
        pipe.expire(keys.webhook, self.keep_s)
        pipe.execute()

    # ----------------------------------------------------------------------------------------- deliveries

    def existing(self, job_id: str, ids: Sequence[str]) -> set[str]:
        """Which of `ids` are stored for the job already."""
        if not ids:
            return set()
        found = self.redis.hmget(self.keys(job_id).deliveries, list(ids))
        return {i for i, value in zip(ids, found, strict=True) if value is not None}

    def enqueue(self, deliveries: Sequence[tuple[Delivery, bytes]], now_ms: int) -> None:
        """Store each new delivery with its body (once: a delivery stored already is left as it is) and make it
        due now. Its due entry is written even when it existed (a process may have died between the two):
        an attempt of a delivery that ended only removes the entry."""
        pipe = self.redis.pipeline(transaction=False)
        for delivery, body in deliveries:
            keys = self.keys(delivery.job_id)
            pipe.hsetnx(keys.deliveries, f"{delivery.id}:body", body)
            pipe.hsetnx(keys.deliveries, delivery.id, delivery.to_json())
            pipe.expire(keys.deliveries, self.keep_s)
            pipe.zadd(self.fleet.webhook_due, {_member(delivery.job_id, delivery.id): now_ms}, nx=True)
        pipe.execute()

    def claim_due(self, now_ms: int, lease_ms: int, limit: int) -> list[tuple[str, str]]:
        """Due (job, delivery) pairs this process attempts now; each is moved `lease_ms` ahead."""
        members = self._scripts.run("webhook_claim", [self.fleet.webhook_due], [now_ms, lease_ms, limit])
        pairs = []
        for member in members:
            job_id, _, delivery_id = (_decode(member) or "").partition(" ")
            pairs.append((job_id, delivery_id))
        return pairs

    def read(self, job_id: str, delivery_id: str) -> tuple[Delivery, bytes] | None:
        meta, body = self.redis.hmget(self.keys(job_id).deliveries, delivery_id, f"{delivery_id}:body")
        if meta is None or body is None:
            return None
        return Delivery.from_dict(json.loads(meta)), body if isinstance(body, bytes) else body.encode()

    def save(self, delivery: Delivery, next_ms: int | None) -> None:
        """Keep an attempt's outcome; the next attempt is due at `next_ms` (None: the delivery has ended)."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.hset(self.keys(delivery.job_id).deliveries, delivery.id, delivery.to_json())
        member = _member(delivery.job_id, delivery.id)
        if next_ms is None:
            pipe.zrem(self.fleet.webhook_due, member)
        else:
            pipe.zadd(self.fleet.webhook_due, {member: next_ms})
        pipe.execute()

    def forget_due(self, job_id: str, delivery_id: str) -> None:
        self.redis.zrem(self.fleet.webhook_due, _member(job_id, delivery_id))

    def deliveries(self, job_id: str) -> list[Delivery]:
        """A job's deliveries, oldest first."""
        stored = self.redis.hgetall(self.keys(job_id).deliveries)
        found = [Delivery.from_dict(json.loads(value)) for key, value in stored.items()
                 if not (_decode(key) or "").endswith(":body")]
        return sorted(found, key=lambda d: (d.created_at, d.id))


def _member(job_id: str, delivery_id: str) -> str:
    return f"{job_id} {delivery_id}"
