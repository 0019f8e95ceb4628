"""Webhook state in Redis, beside a job's own keys and never inside a job's scripts (docs/webhooks.md):
`WebhookKeys`, the `WebhookStore` contract's Redis implementation.

- `agentq:webhooks:jobs` (zset): the jobs whose webhook is watched, scored by when the watcher last looked at
  them. A job is added before it is written (so a job that exists and has a webhook is always watched) and
  removed once its `job.finished` delivery is stored.
- `agentq:{J}:webhook` (hash): `cursor`, the last entry of the job's event stream the watcher handled.
- `agentq:{J}:deliveries` (hash): delivery id -> the delivery's stored JSON (`webhooks/records.py`'s `Delivery`)
  and `<id>:body` -> the exact body every attempt sends; kept `keep_s` after the last write.
- `agentq:webhooks:due` (zset): `"<job> <delivery>"` -> when its next attempt is due (ms). A process takes due
  members with `lua/webhook_claim.lua`, which moves each one a lease ahead: a process that dies mid-attempt leaves
  it to be taken again when the lease ends, with the same id (at least once).

Every command touches one job's keys or one fleet-wide key (the cluster rule of docs/architecture.md). The store
keeps deliveries as plain JSON values; their shape is the webhooks plug-in's.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agentq.protocol.digests import dumps
from agentq.protocol.status import CallStatus
from agentq.store.boundary import map_store_errors
from agentq.store.connection import StoreConnection
from agentq.store.script_runner import ScriptRunner
from agentq.store.views import StoredDelivery, WatchedJob

DEFAULT_KEEP_S = 8 * 24 * 3600


def _text(value: Any) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


@map_store_errors
class WebhookKeys:
    """The webhook keys over the store's connection (`StoreConnection`); thread-safe."""

    def __init__(self, conn: StoreConnection, *, keep_s: float = DEFAULT_KEEP_S):
        self._conn = conn
        self._redis = conn.redis
        self._fleet = conn.fleet
        self.url = conn.url  # for the error boundary's messages
        self.keep_s = int(keep_s)  # how long a job's deliveries are kept after the last one was stored
        self._scripts = ScriptRunner(conn.redis, ["webhook_claim"])

    # ------------------------------------------------------------------------------------------- watching

    def watch(self, job_id: str, now_ms: int) -> None:
        self._conn.keys(job_id)  # InvalidJobIdError before anything is written
        self._redis.zadd(self._fleet.webhook_jobs, {job_id: now_ms}, nx=True)

    def unwatch(self, job_id: str) -> None:
        self._redis.zrem(self._fleet.webhook_jobs, job_id)

    def watched(self, limit: int) -> list[str]:
        return [_text(m) or "" for m in self._redis.zrange(self._fleet.webhook_jobs, 0, limit - 1)]

    def watched_since(self, job_id: str) -> float | None:
        score = self._redis.zscore(self._fleet.webhook_jobs, job_id)
        return None if score is None else float(score)

    def looked_at(self, job_ids: Sequence[str], now_ms: int) -> None:
        if job_ids:
            self._redis.zadd(self._fleet.webhook_jobs, dict.fromkeys(job_ids, now_ms), xx=True)

    def take_scan(self, token: str, ms: int) -> bool:
        return bool(self._redis.set(self._fleet.webhook_scan, token, nx=True, px=max(ms, 1)))

    def job_states(self, job_ids: Sequence[str]) -> list[WatchedJob]:
        pipe = self._redis.pipeline(transaction=False)
        for job_id in job_ids:
            keys = self._conn.keys(job_id)
            pipe.hmget(keys.job, "status", "options")
            pipe.hget(keys.webhook, "cursor")
        replies = pipe.execute()
        return [WatchedJob(status=_text(status), options=json.loads(options) if options else None,
                           cursor=_text(cursor) or "0-0")
                for (status, options), cursor in zip(replies[::2], replies[1::2], strict=True)]

    def set_cursor(self, job_id: str, cursor: str) -> None:
        keys = self._conn.keys(job_id)
        pipe = self._redis.pipeline(transaction=False)
        pipe.hset(keys.webhook, "cursor", cursor)
        pipe.expire(keys.webhook, self.keep_s)
        pipe.execute()

    def awaiting_approval(self, job_id: str) -> list[str]:
        keys = self._conn.keys(job_id)
        held = [_text(c) or "" for c in self._redis.hkeys(keys.approval)]
        if not held:
            return []
        statuses = self._redis.hmget(keys.status, held)
        return [c for c, s in zip(held, statuses, strict=True) if _text(s) == CallStatus.AWAITING_APPROVAL.value]

    # ----------------------------------------------------------------------------------------- deliveries

    def existing(self, job_id: str, ids: Sequence[str]) -> set[str]:
        if not ids:
            return set()
        found = self._redis.hmget(self._conn.keys(job_id).deliveries, list(ids))
        return {i for i, value in zip(ids, found, strict=True) if value is not None}

    def enqueue(self, deliveries: Sequence[StoredDelivery], now_ms: int) -> None:
        pipe = self._redis.pipeline(transaction=False)
        for delivery in deliveries:
            keys = self._conn.keys(delivery.job_id)
            pipe.hsetnx(keys.deliveries, f"{delivery.id}:body", delivery.body)
            pipe.hsetnx(keys.deliveries, delivery.id, dumps(delivery.data))
            pipe.expire(keys.deliveries, self.keep_s)
            pipe.zadd(self._fleet.webhook_due, {_member(delivery.job_id, delivery.id): now_ms}, nx=True)
        pipe.execute()

    def claim_due(self, now_ms: int, lease_ms: int, limit: int) -> list[tuple[str, str]]:
        members = self._scripts.run("webhook_claim", [self._fleet.webhook_due], [now_ms, lease_ms, limit])
        pairs = []
        for member in members:
            job_id, _, delivery_id = (_text(member) or "").partition(" ")
            pairs.append((job_id, delivery_id))
        return pairs

    def read_delivery(self, job_id: str, delivery_id: str) -> StoredDelivery | None:
        meta, body = self._redis.hmget(self._conn.keys(job_id).deliveries, delivery_id, f"{delivery_id}:body")
        if meta is None or body is None:
            return None
        return StoredDelivery(job_id=job_id, id=delivery_id, data=json.loads(meta),
                              body=body if isinstance(body, bytes) else body.encode())

    def save_delivery(self, job_id: str, delivery_id: str, data: dict[str, Any], next_ms: int | None) -> None:
        pipe = self._redis.pipeline(transaction=False)
        pipe.hset(self._conn.keys(job_id).deliveries, delivery_id, dumps(data))
        member = _member(job_id, delivery_id)
        if next_ms is None:
            pipe.zrem(self._fleet.webhook_due, member)
        else:
            pipe.zadd(self._fleet.webhook_due, {member: next_ms})
        pipe.execute()

    def forget_due(self, job_id: str, delivery_id: str) -> None:
        self._redis.zrem(self._fleet.webhook_due, _member(job_id, delivery_id))

    def deliveries(self, job_id: str) -> list[dict[str, Any]]:
        stored = self._redis.hgetall(self._conn.keys(job_id).deliveries)
        return [json.loads(value) for key, value in stored.items() if not (_text(key) or "").endswith(":body")]


def _member(job_id: str, delivery_id: str) -> str:
    return f"{job_id} {delivery_id}"
