"""`StateStore`: every read and atomic write agentq makes to Redis.

Each state transition is one Lua script (see `lua/`), so it is atomic and costs one round trip; each
is idempotent so a redelivered task cannot write twice. Values are JSON.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import resources
from typing import Any, Iterator

from agentq.errors import JobNotFoundError, StoreError
from agentq.protocol.jobs import JobPlan
from agentq.store.keys import FleetKeys, JobKeys
from agentq.store.records import job_record

FINAL_JOB_STATUSES = frozenset({"succeeded", "failed", "canceled"})
_SCRIPTS = ("submit", "claim", "commit", "retry", "finalize", "cancel", "renew")


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


@dataclass
class Claim:
    """Outcome of `StateStore.claim`; `outcome == "claimed"` means this attempt owns the call."""

    outcome: str
    record: dict | None = None
    tool: dict | None = None
    attempt: int = 0
    log_length: int = 0
    log_tail: list[dict] = field(default_factory=list)
    detail: str = ""  # the status for finished/not_ready, the lease's remaining ms for leased
    tool_sha: str = ""  # SHA-1 of the stored schema `tool` was decoded from (when the reply carried it)
    announced: bool = False  # the claim published the caller's start events


@dataclass
class Commit:
    """Outcome of `StateStore.commit`; `released` are the records of calls that became ready."""

    outcome: str  # "committed" | "duplicate" | "superseded"
    open_calls: int = 0
    job_status: str = ""
    released: list[dict] = field(default_factory=list)


class StateStore:
    """The Redis state store. Thread-safe; share one per process."""

    def __init__(self, redis_url: str | None = None, *, client: Any = None, namespace: str = "agentq"):
        if client is None:
            import redis

            client = redis.Redis.from_url(redis_url or "redis://127.0.0.1:6379/0", decode_responses=True)
        self.redis = client
        self.namespace = namespace
        self.fleet = FleetKeys(namespace)
        self._scripts = {name: client.register_script(_lua(name)) for name in _SCRIPTS}

    @classmethod
    def from_settings(cls, settings: Any) -> "StateStore":
        return cls(settings.redis_url, namespace=settings.namespace)

    def keys(self, job_id: str) -> JobKeys:
        return JobKeys(self.namespace, job_id)

    def ping(self) -> None:
        try:
            self.redis.ping()
        except Exception as error:  # redis.ConnectionError and friends
            raise StoreError(f"cannot reach the state store: {error}") from error

    # ----------------------------------------------------------------------------------- submission

    def create_job(self, plan: JobPlan, *, submitted: dict, events: list[dict]) -> bool:
        """Write a planned job in one atomic step; False if a job with that id exists already."""
        keys = self.keys(plan.id)
        created = now_iso()
        payload = {
            "job": {
                "id": plan.id, "kind": plan.kind, "status": "queued", "created_at": created,
                "open": sum(1 for c in plan.calls if c.awaited), "ticks": 0,
                "options": dumps(plan.options), "output": dumps(plan.output),
                "solution": dumps(plan.solution), "submitted": dumps(submitted),
                "usage": dumps({"requests": 0, "input_tokens": 0, "output_tokens": 0}),
            },
            "log": [dumps(m) for m in plan.context],
            "calls": {c.id: dumps(c.record()) for c in plan.calls},
            "status": {c.id: ("ready" if c.waiting == 0 else "pending") for c in plan.calls},
            "waiting": {c.id: c.waiting for c in plan.calls},
            "tools": {name: dumps(schema) for name, schema in plan.tools.items()},
            "events": [dumps(e) for e in events],
        }
        expire_at_ms = int((time.time() + plan.ttl_s) * 1000)
        created_ok = bool(self._scripts["submit"](keys=list(keys.all), args=[dumps(payload), expire_at_ms]))
        if created_ok:
            pipe = self.redis.pipeline(transaction=False)
            pipe.zadd(self.fleet.jobs, {plan.id: time.time()})
            pipe.zremrangebyscore(self.fleet.jobs, 0, time.time() - 30 * 24 * 3600)
            pipe.execute()
        return created_ok

    # ------------------------------------------------------------------------------------ execution

    def claim(self, job_id: str, call_id: str, *, token: str, lease_ms: int, log_offset: int = -1,
              job_started: dict | None = None, record: dict | None = None, tool_sha: str = "",
              start_events: list[dict] = ()) -> Claim:
        """Claim a call for one attempt (and publish `job_started` if this claim starts the job).

        A caller that has the call's `record` passes it (the reply leaves it out). One that has a copy of the
        call's tool passes its `tool_sha` (SHA-1 of the schema JSON, `Claim.tool_sha` of the claim it came
        from): if the stored schema is the same, the reply leaves it out (`Claim.tool` is None), and on the
        call's first attempt the claim publishes the caller's `start_events` (`Claim.announced`); otherwise
        `Claim.tool` is the stored one.
        """
        keys = self.keys(job_id)
        reply = self._scripts["claim"](
            keys=[keys.job, keys.calls, keys.status, keys.attempts, keys.tools, keys.events, keys.log,
                  keys.lease(call_id)],
            args=[call_id, token, lease_ms, now_iso(), dumps(job_started) if job_started else "", log_offset,
                  "r" if record is not None else "", record["tool"] if record is not None and tool_sha else "",
                  tool_sha, *(dumps(e) for e in start_events)],
        )
        outcome = reply[0]
        if outcome != "claimed":
            return Claim(outcome, detail=reply[1] if len(reply) > 1 else "")
        return Claim(
            outcome,
            record=record if record is not None else json.loads(reply[1]),
            tool=json.loads(reply[2]) if reply[2] else None,
            attempt=int(reply[3]),
            log_length=int(reply[4]),
            log_tail=[json.loads(m) for m in reply[6:]],
            tool_sha=hashlib.sha1(reply[2].encode()).hexdigest() if reply[2] else "",
            announced=reply[5] == "1",
        )

    def add_events(self, job_id: str, envelopes: list[dict]) -> None:
        if not envelopes:
            return
        stream = self.keys(job_id).events
        if len(envelopes) == 1:
            self.redis.xadd(stream, {"e": dumps(envelopes[0])})
            return
        pipe = self.redis.pipeline(transaction=False)
        for envelope in envelopes:
            pipe.xadd(stream, {"e": dumps(envelope)})
        pipe.execute()

    def commit(self, job_id: str, call_id: str, *, token: str, status: str, messages: list[dict] = (), events: list[dict] = ()) -> Commit:
        keys = self.keys(job_id)
        reply = self._scripts["commit"](
            keys=[keys.job, keys.log, keys.calls, keys.status, keys.waiting, keys.events, keys.lease(call_id)],
            args=[call_id, token, status, len(messages),
                  *(dumps(m) for m in messages), *(dumps(e) for e in events)],
        )
        if reply[0] != "committed":
            return Commit(reply[0], job_status=reply[1] if len(reply) > 1 else "")
        return Commit("committed", open_calls=int(reply[1]), job_status=reply[2],
                      released=[json.loads(r) for r in reply[3:]])

    def release_for_retry(self, job_id: str, call_id: str, *, token: str, event: dict | None = None) -> bool:
        keys = self.keys(job_id)
        return bool(self._scripts["retry"](keys=[keys.status, keys.lease(call_id), keys.events],
                                           args=[call_id, token, dumps(event) if event else ""]))

    def renew_leases(self, job_id: str, leases: dict[str, str], lease_ms: int) -> int:
        """Extend the leases (call id -> token) this process holds for one job."""
        keys = self.keys(job_id)
        ids = list(leases)
        return int(self._scripts["renew"](keys=[keys.lease(i) for i in ids],
                                          args=[lease_ms, *(leases[i] for i in ids)]))

    def finalize(self, job_id: str, *, status: str, record: dict, event: dict) -> bool:
        keys = self.keys(job_id)
        return bool(self._scripts["finalize"](keys=[keys.job, keys.events, keys.done],
                                              args=[status, dumps(record), now_iso(), dumps(event)]))

    def cancel(self, job_id: str, *, event: dict) -> tuple[str, list[str]]:
        """Cancel a job; returns ("canceled", ids of calls whose tasks may be queued) or ("final", status)."""
        keys = self.keys(job_id)
        reply = self._scripts["cancel"](keys=[keys.job, keys.status, keys.events, keys.done],
                                        args=[now_iso(), dumps(event)])
        if reply[0] == "missing":
            raise _not_found(job_id)
        return reply[0], list(reply[1:])

    def record_rejection(self, job_id: str, error: dict, *, ttl_s: int) -> bool:
        """Record a job rejected at submission by task name, so its submitter can read why."""
        keys, now = self.keys(job_id), now_iso()
        key = keys.job
        if not self.redis.hsetnx(key, "id", job_id):
            return False
        fields = {"status": "failed", "kind": "plan", "created_at": now, "finished_at": now,
                  "error": dumps(error)}
        record = job_record({"id": job_id, **fields}, [])
        pipe = self.redis.pipeline()
        pipe.hset(key, mapping={**fields, "record": dumps(record)})
        pipe.expire(key, ttl_s)
        pipe.delete(keys.done)
        pipe.rpush(keys.done, "failed")
        pipe.expire(keys.done, ttl_s)
        pipe.execute()
        return True

    def save_record(self, job_id: str, record: dict) -> None:
        self.redis.hset(self.keys(job_id).job, "record", dumps(record))

    # ---------------------------------------------------------------------------------------- reads

    def job_fields(self, job_id: str) -> dict[str, str]:
        fields = self.redis.hgetall(self.keys(job_id).job)
        if not fields:
            raise _not_found(job_id)
        return fields

    def job_status(self, job_id: str) -> str:
        status = self.redis.hget(self.keys(job_id).job, "status")
        if status is None:
            raise _not_found(job_id)
        return status

    def wait_finished(self, job_id: str, timeout_s: float) -> str | None:
        """Block until the job ends (at most `timeout_s`); its final status, or None on timeout.

        Every step that ends a job (finalize, cancel, a recorded rejection) pushes the final status onto the
        job's `done` list; waiters move that one entry onto the same list, so any number of them wake up
        and it stays there for later ones. One round trip, however many events the job publishes meanwhile.
        """
        done = self.keys(job_id).done
        return self.redis.blmove(done, done, max(0.01, timeout_s), "RIGHT", "LEFT")

    def read_log(self, job_id: str, start: int = 0) -> list[dict]:
        return [json.loads(m) for m in self.redis.lrange(self.keys(job_id).log, start, -1)]

    def call_records(self, job_id: str, call_ids: list[str] | None = None) -> dict[str, dict]:
        """Call id -> record: of every call, or of `call_ids` only (those that exist)."""
        calls = self.keys(job_id).calls
        if call_ids is None:
            return {k: json.loads(v) for k, v in self.redis.hgetall(calls).items()}
        if not call_ids:
            return {}
        return {k: json.loads(v) for k, v in zip(call_ids, self.redis.hmget(calls, call_ids)) if v is not None}

    def finish_inputs(self, job_id: str) -> tuple[dict[str, str], list[dict], dict[str, str]]:
        """(job fields, log, call statuses) in one round trip: what finalizing a job reads."""
        keys = self.keys(job_id)
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(keys.job)
        pipe.lrange(keys.log, 0, -1)
        pipe.hgetall(keys.status)
        fields, log, statuses = pipe.execute()
        if not fields:
            raise _not_found(job_id)
        return fields, [json.loads(m) for m in log], statuses

    def call_statuses(self, job_id: str) -> dict[str, str]:
        return self.redis.hgetall(self.keys(job_id).status)

    def record(self, job_id: str) -> dict:
        """The job record of SPEC §12; the saved one once the job ended, else computed from the log."""
        fields = self.job_fields(job_id)
        if fields.get("record") and fields.get("status") in FINAL_JOB_STATUSES:
            return json.loads(fields["record"])
        return job_record(fields, self.read_log(job_id))

    def read_events(self, job_id: str, after: str = "0-0", *, block_ms: int | None = None,
                    count: int | None = None) -> list[tuple[str, dict]]:
        """Events after the stream id `after`; with `block_ms`, wait up to that long for the first one."""
        reply = self.redis.xread({self.keys(job_id).events: after}, count=count, block=block_ms)
        if not reply:
            return []
        return [(entry_id, json.loads(fields["e"])) for entry_id, fields in reply[0][1]]

    def iter_events(self, job_id: str, after: str = "0-0", *, follow: bool = True,
                    block_ms: int = 1000) -> Iterator[tuple[str, dict]]:
        """Yield events in order; with `follow`, keep waiting until the job's final event."""
        if follow and self.job_status(job_id) in FINAL_JOB_STATUSES:
            follow = False  # an ended job's stream is complete: read it without blocking for more
        while True:
            batch = self.read_events(job_id, after, block_ms=block_ms if follow else None, count=500)
            for entry_id, envelope in batch:
                after = entry_id
                yield entry_id, envelope
                if envelope.get("event") == "job.finished":
                    return
            if not follow and not batch:
                return
            if not batch and self.job_status(job_id) in FINAL_JOB_STATUSES:
                # the final event was read before `after`, or the job ended without one
                return

    def recent_jobs(self, limit: int = 50) -> list[str]:
        return list(self.redis.zrevrange(self.fleet.jobs, 0, limit - 1))

    # ---------------------------------------------------------------------------------------- fleet

    def announce_worker(self, worker_id: str, announcement: dict, ttl_s: float) -> None:
        pipe = self.redis.pipeline(transaction=False)
        pipe.set(self.fleet.worker(worker_id), dumps(announcement), px=int(ttl_s * 1000))
        pipe.zadd(self.fleet.workers, {worker_id: time.time() + ttl_s})
        pipe.execute()

    def retire_worker(self, worker_id: str) -> None:
        pipe = self.redis.pipeline(transaction=False)
        pipe.delete(self.fleet.worker(worker_id))
        pipe.zrem(self.fleet.workers, worker_id)
        pipe.execute()

    def live_workers(self) -> list[dict]:
        now = time.time()
        self.redis.zremrangebyscore(self.fleet.workers, 0, now)
        ids = self.redis.zrangebyscore(self.fleet.workers, now, "+inf")
        if not ids:
            return []
        values = self.redis.mget([self.fleet.worker(i) for i in ids])
        return [json.loads(v) for v in values if v]

    def live_activities(self) -> dict[str, dict]:
        """Activity name -> its announcement (queue, options, and the workers serving it)."""
        activities: dict[str, dict] = {}
        for worker in self.live_workers():
            for activity in worker.get("activities", []):
                entry = activities.setdefault(activity["name"], {**activity, "workers": []})
                entry["workers"].append(worker.get("id"))
        return activities

    def publish_tools(self, schemas: dict[str, dict], *, publisher: str) -> list[str]:
        """Publish tool schemas for submitters; returns names another process published differently."""
        if not schemas:
            return []
        existing = self.redis.hmget(self.fleet.tools, list(schemas))
        conflicts = []
        pipe = self.redis.pipeline(transaction=False)
        for (name, schema), current in zip(schemas.items(), existing):
            encoded = dumps(schema)
            if current is not None and json.loads(current) != schema:
                conflicts.append(name)
                pipe.hset(self.fleet.tool_conflicts, name,
                          dumps({"publisher": publisher, "at": now_iso(), "schema": schema}))
            pipe.hset(self.fleet.tools, name, encoded)
        pipe.execute()
        return conflicts

    def published_tools(self) -> dict[str, dict]:
        return {k: json.loads(v) for k, v in self.redis.hgetall(self.fleet.tools).items()}

    def tool_conflicts(self) -> dict[str, dict]:
        return {k: json.loads(v) for k, v in self.redis.hgetall(self.fleet.tool_conflicts).items()}


def _lua(name: str) -> str:
    return resources.files("agentq.store").joinpath("lua", f"{name}.lua").read_text(encoding="utf-8")


def _not_found(job_id: str) -> JobNotFoundError:
    return JobNotFoundError(f"no job {job_id!r} (never submitted, or expired)")
