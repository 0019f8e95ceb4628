"""The batch lane's state in Redis (`engine/batch.py`): requests waiting for a batch, the batches sent, their results.

Everything lives under the `{batch}` hash tag (`FleetKeys.batch_*`), so a pipeline stays in one Redis Cluster slot
and a dispatcher that restarts finds every pending request, every open batch and the custom_id → request mapping
where it left them. A request's hash (`batch_request(custom_id)`) holds:

`place` (the request across its attempts: `<job>/tick/<n>`, `<job>/<call>`), `job` (the job it is for), `params`
(the Messages API body, JSON), `bytes`, `tries` (sends so far), `batch` (the batch it went in, once sent), `result`
(the batch result's JSON, once the batch ended). It expires after `REQUEST_TTL_S` (a batch ends within 24 hours).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from agentq.protocol.status import JOB_ACTIVE
from agentq.store.keys import FleetKeys, JobKeys
from agentq.store.views import QueuedRequest

REQUEST_TTL_S = 3 * 24 * 3600


class BatchQueue:
    """The lane's Redis steps; thread-safe (each step is one command or pipeline)."""

    def __init__(self, redis: Any, fleet: FleetKeys):
        self.redis = redis
        self.fleet = fleet

    # ------------------------------------------------------------------------------- one request

    def request(self, custom_id: str) -> dict[str, str]:
        """The request's hash ({} when there is none: never queued, or consumed)."""
        return _text(self.redis.hgetall(self.fleet.batch_request(custom_id)))

    def enqueue(self, custom_id: str, *, place: str, job: str, params: str, tries: int) -> bool:
        """Queue a request for the next batch; False when the request is queued (or sent) already."""
        key = self.fleet.batch_request(custom_id)
        if not self.redis.hsetnx(key, "place", place):
            return False
        now_ms = int(time.time() * 1000)
        pipe = self.redis.pipeline(transaction=False)
        pipe.hset(key, mapping={"job": job, "params": params, "bytes": len(params.encode()), "tries": tries})
        pipe.expire(key, REQUEST_TTL_S)
        pipe.zadd(self.fleet.batch_queue, {custom_id: now_ms})
        pipe.execute()
        return True

    def forget(self, custom_id: str) -> None:
        """The request is consumed (or given up): it leaves the queue and the lane."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.zrem(self.fleet.batch_queue, custom_id)
        pipe.delete(self.fleet.batch_request(custom_id))
        pipe.execute()

    def store_result(self, custom_id: str, result: str) -> bool:
        """Keep a batch result for its request; False when the request is gone (consumed, or its job's)."""
        key = self.fleet.batch_request(custom_id)
        if not self.redis.exists(key):
            return False
        self.redis.hset(key, "result", result)
        return True

    # ------------------------------------------------------------------------------- the queue

    def waiting(self, limit: int) -> list[tuple[str, int]]:
        """The oldest `limit` queued requests: (custom_id, queued at, ms)."""
        return [(_str(cid), int(score)) for cid, score in
                self.redis.zrange(self.fleet.batch_queue, 0, limit - 1, withscores=True)]

    def queued(self, custom_ids: Iterable[str]) -> list[QueuedRequest]:
        """The queued requests of `custom_ids`, in that order (those gone since are left out)."""
        ids = list(custom_ids)
        pipe = self.redis.pipeline(transaction=False)
        for cid in ids:
            pipe.hmget(self.fleet.batch_request(cid), "job", "params")
            pipe.zscore(self.fleet.batch_queue, cid)
        replies = pipe.execute()
        found = []
        for i, cid in enumerate(ids):
            (job, params), score = replies[2 * i], replies[2 * i + 1]
            if job is not None and params is not None and score is not None:
                found.append(QueuedRequest(cid, _str(job), _str(params), int(score)))
        return found

    def drop(self, custom_ids: Iterable[str]) -> None:
        """Requests that will never be sent (their jobs ended): out of the queue and the lane."""
        for cid in custom_ids:
            self.forget(cid)

    def sent(self, batch_id: str, custom_ids: list[str]) -> None:
        """Requests went out as batch `batch_id`: out of the queue, into the open batch."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.zrem(self.fleet.batch_queue, *custom_ids)
        for cid in custom_ids:
            pipe.hset(self.fleet.batch_request(cid), "batch", batch_id)
            pipe.hincrby(self.fleet.batch_request(cid), "tries", 1)
        pipe.sadd(self.fleet.batch_members(batch_id), *custom_ids)
        pipe.expire(self.fleet.batch_members(batch_id), REQUEST_TTL_S)
        pipe.sadd(self.fleet.batch_open, batch_id)
        pipe.execute()

    # ------------------------------------------------------------------------------- open batches

    def open_batches(self) -> list[str]:
        return sorted(_str(b) for b in self.redis.smembers(self.fleet.batch_open))

    def members(self, batch_id: str) -> list[str]:
        return sorted(_str(c) for c in self.redis.smembers(self.fleet.batch_members(batch_id)))

    def close(self, batch_id: str) -> None:
        """The batch ended and its results are kept: it is polled no more."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.srem(self.fleet.batch_open, batch_id)
        pipe.delete(self.fleet.batch_members(batch_id))
        pipe.execute()

    def jobs_of(self, custom_ids: Iterable[str]) -> dict[str, str | None]:
        """custom_id -> the job its request is for (None: the request is gone)."""
        ids = list(custom_ids)
        pipe = self.redis.pipeline(transaction=False)
        for cid in ids:
            pipe.hget(self.fleet.batch_request(cid), "job")
        return {cid: _str(job) if job is not None else None for cid, job in zip(ids, pipe.execute(), strict=True)}

    def active_jobs(self, job_ids: Iterable[str]) -> set[str]:
        """Which of `job_ids` are still active (a canceled or ended job's requests are not worth answering)."""
        ids = sorted(set(job_ids))
        pipe = self.redis.pipeline(transaction=False)
        for job_id in ids:
            pipe.hget(JobKeys(self.fleet.namespace, job_id).job, "status")
        return {job_id for job_id, status in zip(ids, pipe.execute(), strict=True)
                if status is not None and _str(status) in JOB_ACTIVE}

    # ------------------------------------------------------------------------------- the round's lock

    def lock(self, token: str, ttl_ms: int) -> bool:
        """Take the lane's round for `ttl_ms` (one dispatcher at a time flushes and polls), or renew it."""
        key = self.fleet.batch_lock
        if self.redis.set(key, token, nx=True, px=ttl_ms):
            return True
        if _str(self.redis.get(key) or b"") == token:
            self.redis.pexpire(key, ttl_ms)
            return True
        return False


def _str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _text(mapping: Mapping[Any, Any]) -> dict[str, str]:
    return {_str(k): _str(v) for k, v in (mapping or {}).items()}


__all__ = ["REQUEST_TTL_S", "BatchQueue", "QueuedRequest"]
