"""The fleet in the store: live workers and their announcements, the activities they serve and the *known*
policy (docs/protocol.md#activities: an activity stays known for a while after its last announcement), the published
tool schemas, the fleet's secret for signing call tasks, and the claims of Celery node names: `RedisFleet`, a part of
its own over the store's connection (no job's script reads these keys).

All of these are fleet-wide keys (`keys.FleetKeys`), outside any job's hash slot: on a Redis Cluster they live
on many nodes, so reads of several keys go through a pipeline, never MGET.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from agentq.protocol.digests import dumps, iso_utc, now_iso
from agentq.protocol.records import WorkerAnnouncement
from agentq.store.boundary import map_store_errors
from agentq.store.part import StorePart
from agentq.store.views import WorkerBeat


@map_store_errors
class RedisFleet(StorePart):
    """Workers, activities, published tools, the signing secret and node names: the `FleetStore` and
    `NodeNameStore` contracts, a part over the store's connection (`part.py`)."""

    # -------------------------------------------------------------------------------------------- workers

    def announce_worker(self, worker_id: str, announcement: WorkerAnnouncement, ttl_s: float) -> None:
        """Announce a live worker (expires after `ttl_s`); each activity it serves is also remembered as
        *known* (docs/protocol.md#activities) with the time it was last announced."""
        now = self.clock()
        pipe = self.redis.pipeline(transaction=False)
        pipe.set(self.fleet.worker(worker_id), dumps(announcement.to_dict()), px=int(ttl_s * 1000))
        pipe.zadd(self.fleet.workers, {worker_id: now + ttl_s})
        if seen := seen_activities(announcement, now):
            pipe.hset(self.fleet.activities, mapping=seen)
        pipe.execute()

    def retire_worker(self, worker_id: str) -> None:
        pipe = self.redis.pipeline(transaction=False)
        pipe.delete(self.fleet.worker(worker_id))
        pipe.zrem(self.fleet.workers, worker_id)
        pipe.execute()

    def live_workers(self) -> list[WorkerAnnouncement]:
        """The announcements of the workers alive now, the expired ones trimmed first: two round trips (the trim
        and the listing in one pipeline, then the announcements), one when none is alive."""
        now = self.clock()
        pipe = self.redis.pipeline(transaction=False)  # one key: one slot on a cluster too
        pipe.zremrangebyscore(self.fleet.workers, 0, now)
        pipe.zrangebyscore(self.fleet.workers, now, "+inf")
        _, ids = pipe.execute()
        if not ids:
            return []
        pipe = self.redis.pipeline(transaction=False)  # not MGET: on a cluster the keys live in many slots
        for worker_id in ids:
            pipe.get(self.fleet.worker(worker_id))
        return [announcement for value in pipe.execute() if (announcement := _announcement(value)) is not None]

    def worker_beats(self) -> list[WorkerBeat]:
        """Every worker announcement the fleet's set still holds, live or expired but not yet trimmed (the
        healthcheck tells a stale worker from a missing one)."""
        entries = self.redis.zrange(self.fleet.workers, 0, -1, withscores=True)
        if not entries:
            return []
        pipe = self.redis.pipeline(transaction=False)  # not MGET: on a cluster the keys live in many slots
        for worker_id, _ in entries:
            pipe.get(self.fleet.worker(worker_id))
        values = pipe.execute()
        return [WorkerBeat(worker_id, float(expires), _announcement(value))
                for (worker_id, expires), value in zip(entries, values, strict=True)]

    # ----------------------------------------------------------------------------------------- activities

    def live_activities(self) -> dict[str, dict]:
        """Activity name -> its announcement (queue, options, and the workers serving it)."""
        return live_view(self.live_workers())

    def known_activities(self, memory_s: float) -> dict[str, dict]:
        """Every activity announced within the last `memory_s` seconds (docs/protocol.md#activities), see
        `known_view`; older ones are dropped from the store."""
        now = self.clock()
        stored = {name: json.loads(value) for name, value in self.redis.hgetall(self.fleet.activities).items()}
        stale = [name for name, entry in stored.items() if float(entry.get("last_seen", 0)) < now - memory_s]
        if stale:
            self._drop_stale_activities(stale, now - memory_s)
        return known_view(stored, self.live_activities(), memory_s=memory_s, now=now)

    def _drop_stale_activities(self, names: list[str], cutoff: float) -> None:
        """HDEL the activities still last announced before `cutoff`, in one MULTI watched against a heartbeat
        that announces one of them again meanwhile."""
        key = self.fleet.activities

        def drop(pipe: Any) -> None:
            current = pipe.hmget(key, names)
            gone = [name for name, value in zip(names, current, strict=True)
                    if value is not None and float(json.loads(value).get("last_seen", 0)) < cutoff]
            pipe.multi()
            if gone:
                pipe.hdel(key, *gone)

        self.redis.transaction(drop, key)

    def forget_activity(self, name: str) -> bool:
        """Retire a known activity at once (its tools turn latent unless a live worker announces it again);
        True when it was known. An MCP tool of that name (`x-mcp`: `agentq worker --mcp` published it with its
        activity, and it cannot run without one) is unpublished with it, unless a live worker still serves it."""
        forgotten = bool(self.redis.hdel(self.fleet.activities, name))
        schema = self.redis.hget(self.fleet.tools, name)
        if schema is None or "x-mcp" not in json.loads(schema) or name in self.live_activities():
            return forgotten
        pipe = self.redis.pipeline(transaction=False)
        pipe.hdel(self.fleet.tools, name)
        pipe.hdel(self.fleet.tool_conflicts, name)
        return bool(pipe.execute()[0]) or forgotten

    # ---------------------------------------------------------------------------------------------- tools

    def publish_tools(self, schemas: dict[str, dict], *, publisher: str) -> list[str]:
        """Publish tool schemas for submitters; returns names another process published differently."""
        if not schemas:
            return []
        existing = self.redis.hmget(self.fleet.tools, list(schemas))
        conflicts = []
        pipe = self.redis.pipeline(transaction=False)
        for (name, schema), current in zip(schemas.items(), existing, strict=True):
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

    # ------------------------------------------------------------------------------------------- signing

    def task_signing_key(self) -> bytes:
        """The fleet's secret for signing call tasks (created by the first process that asks): a worker runs
        a signed task's record before its claim (an `idempotent` activity), so a task that did not come from
        agentq must not be able to name what runs. Anyone who can read the store can sign; anyone who can only
        write to the broker cannot."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.set(self.fleet.task_key, secrets.token_hex(32), nx=True)
        pipe.get(self.fleet.task_key)
        return str(pipe.execute()[1]).encode()

    # ---------------------------------------------------------------------------------------- node names

    def claim_node_name(self, name: str, holder: str, ttl_ms: int) -> str | None:
        """Claim Celery node name `name` for `holder` (`SET NX PX`, atomic: two processes never both get it):
        None when the claim is now `holder`'s, else the holder of the claim that stands."""
        key = self.fleet.node(name)
        while True:
            if self.redis.set(key, holder, nx=True, px=ttl_ms):
                return None
            held = self.redis.get(key)
            if held is not None:
                return str(held)
            # it expired or was released between the two commands: try again

    def swap_node_name(self, name: str, expected: str, holder: str, ttl_ms: int, *, or_absent: bool = False) -> bool:
        """Replace the claim of `name` with `holder` (for `ttl_ms`) if it still holds `expected`, or nothing with
        `or_absent`; True when replaced."""
        return self.scripts.node_swap(self.fleet.node(name), expected=expected, holder=holder, ttl_ms=ttl_ms,
                                      or_absent=or_absent)

    def release_node_name(self, name: str, holder: str) -> bool:
        """Drop the claim of `name` if `holder` still holds it (compare-and-delete, as a lease is given up)."""
        return self.scripts.unlease(self.fleet.node(name), token=holder)

    def node_name_holder(self, name: str) -> str | None:
        """Who holds the claim of `name` now (None: nobody)."""
        held = self.redis.get(self.fleet.node(name))
        return None if held is None else str(held)


def _announcement(value: str | None) -> WorkerAnnouncement | None:
    return WorkerAnnouncement.from_dict(json.loads(value)) if value else None


# ---------------------------------------------------------------------------------- the known policy (pure)


def seen_activities(announcement: WorkerAnnouncement, now: float) -> dict[str, str]:
    """The remembered form of a worker's activities: name -> its announcement JSON plus `last_seen` (unix s)."""
    return {activity["name"]: dumps({**activity, "last_seen": now})
            for activity in announcement.activities if activity.get("name")}


def live_view(workers: list[WorkerAnnouncement]) -> dict[str, dict]:
    """Activity name -> its announcement and the ids of the live workers (their announcements) serving it."""
    activities: dict[str, dict] = {}
    for worker in workers:
        for activity in worker.activities:
            entry = activities.setdefault(activity["name"], {**activity, "workers": []})
            entry["workers"].append(worker.id)
    return activities


def known_view(stored: dict[str, dict], live: dict[str, dict], *, memory_s: float, now: float) -> dict[str, dict]:
    """The known activities by name (sorted): each one's announcement (name, task, queue, options), `live`,
    the ids of the live `workers` serving it ([] when none) and `last_seen` (ISO-8601 UTC).

    `stored` are the remembered announcements (`last_seen` in unix seconds), `live` those of `live_activities`:
    an activity a live worker serves is always known, with what its live workers announced (their queue is
    the one consumed)."""
    known: dict[str, dict] = {}
    for name in sorted({*stored, *live}):
        entry, current = stored.get(name), live.get(name)
        last_seen = float(entry.get("last_seen", 0)) if entry is not None else now
        if current is None and last_seen < now - memory_s:
            continue
        known[name] = {**(entry or {}), **(current or {}), "live": current is not None,
                       "workers": list(current["workers"]) if current is not None else [],
                       "last_seen": iso_utc(last_seen)}
    return known
