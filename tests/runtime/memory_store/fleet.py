"""Fleet-wide state of the memory store: worker announcements, known activities, published tools, node names."""

from __future__ import annotations

import json
from collections import Counter

from agentq.protocol.digests import dumps, now_iso
from agentq.protocol.records import WorkerAnnouncement
from agentq.protocol.status import JobStatus
from agentq.store.fleet import known_view, live_view, seen_activities
from agentq.store.views import FleetStats, WorkerBeat
from tests.runtime.memory_store.core import MemoryCore


class Fleet(MemoryCore):
    _workers: dict[str, tuple[str, float]]  # id -> (announcement JSON, expiry)
    _activities: dict[str, str]  # name -> last announcement JSON with `last_seen` (FleetKeys.activities)
    _tools: dict[str, str]
    _tool_conflicts: dict[str, str]
    _node_names: dict[str, tuple[str, float]]  # node name -> (holder, expiry): FleetKeys.node with its TTL

    def announce_worker(self, worker_id: str, announcement: WorkerAnnouncement, ttl_s: float) -> None:
        with self._changed:
            now = self.clock()
            self._workers[worker_id] = (dumps(announcement.to_dict()), now + ttl_s)
            self._activities.update(seen_activities(announcement, now))

    def retire_worker(self, worker_id: str) -> None:
        with self._changed:
            self._workers.pop(worker_id, None)

    def live_workers(self) -> list[WorkerAnnouncement]:
        now = self.clock()
        with self._changed:
            for worker_id in [w for w, (_, expiry) in self._workers.items() if expiry <= now]:
                del self._workers[worker_id]
            live = sorted(self._workers.items(), key=lambda item: (item[1][1], item[0]))
        return [WorkerAnnouncement.from_dict(json.loads(value)) for _, (value, _) in live]

    def worker_beats(self) -> list[WorkerBeat]:
        """Every announcement kept, live or expired (its announcement None then), as the healthcheck reads them."""
        now = self.clock()
        with self._changed:
            entries = sorted(self._workers.items(), key=lambda item: (item[1][1], item[0]))
        return [WorkerBeat(worker_id, expiry, WorkerAnnouncement.from_dict(json.loads(value)) if expiry > now else None)
                for worker_id, (value, expiry) in entries]

    def live_activities(self) -> dict[str, dict]:
        return live_view(self.live_workers())

    def known_activities(self, memory_s: float) -> dict[str, dict]:
        live = self.live_activities()
        now = self.clock()
        with self._changed:
            stored = {name: json.loads(value) for name, value in self._activities.items()}
            for name in [n for n, entry in stored.items() if float(entry.get("last_seen", 0)) < now - memory_s]:
                del self._activities[name]
        return known_view(stored, live, memory_s=memory_s, now=now)

    def forget_activity(self, name: str) -> bool:
        with self._changed:
            return self._activities.pop(name, None) is not None

    def publish_tools(self, schemas: dict[str, dict], *, publisher: str) -> list[str]:
        conflicts = []
        with self._changed:
            for name, schema in schemas.items():
                current = self._tools.get(name)
                if current is not None and json.loads(current) != schema:
                    conflicts.append(name)
                    self._tool_conflicts[name] = dumps({"publisher": publisher, "at": now_iso(), "schema": schema})
                self._tools[name] = dumps(schema)
        return conflicts

    def published_tools(self) -> dict[str, dict]:
        with self._changed:
            return {k: json.loads(v) for k, v in self._tools.items()}

    def tool_conflicts(self) -> dict[str, dict]:
        with self._changed:
            return {k: json.loads(v) for k, v in self._tool_conflicts.items()}

    def fleet_stats(self, *, sample: int = 256) -> FleetStats:
        """`StatsSteps.fleet_stats` read off the jobs kept (`sample` has no use here: nothing is left behind):
        jobs active, their calls awaiting approval, and the jobs ended by final status (and tenant)."""
        active = awaiting = 0
        totals: Counter[tuple[str, ...]] = Counter()
        with self._changed:
            for job_id in list(self._jobs):
                state = self._get(job_id)
                if state is None or not state.job.get("status"):
                    continue
                status = JobStatus(state.job["status"])
                if status.is_active and not state.done:
                    active += 1
                    awaiting += int(state.job.get("awaiting") or 0)
                elif status.is_final:
                    totals[(status.value, state.job.get("tenant", "default"))] += 1
        by_status: Counter[str] = Counter()
        for (status_value, _), count in totals.items():
            by_status[status_value] += count
        return FleetStats(jobs_active=active, approvals_pending=awaiting, jobs_total=dict(by_status),
                          jobs_by_tenant=dict(totals))

    # ------------------------------------------------------------------------ node names (store/fleet.py)

    def _node_claim(self, name: str) -> str | None:
        """The holder of `name`'s claim, dropping it when it expired. Call with the lock held."""
        held = self._node_names.get(name)
        if held is not None and held[1] <= self.clock():
            del self._node_names[name]
            return None
        return None if held is None else held[0]

    def claim_node_name(self, name: str, holder: str, ttl_ms: int) -> str | None:
        with self._changed:
            held = self._node_claim(name)
            if held is not None:
                return held
            self._node_names[name] = (holder, self.clock() + ttl_ms / 1000)
            return None

    def swap_node_name(self, name: str, expected: str, holder: str, ttl_ms: int, *, or_absent: bool = False) -> bool:
        """node_swap.lua."""
        with self._changed:
            held = self._node_claim(name)
            if held != expected and not (held is None and or_absent):
                return False
            self._node_names[name] = (holder, self.clock() + ttl_ms / 1000)
            return True

    def release_node_name(self, name: str, holder: str) -> bool:
        with self._changed:
            if self._node_claim(name) != holder:
                return False
            del self._node_names[name]
            return True

    def node_name_holder(self, name: str) -> str | None:
        with self._changed:
            return self._node_claim(name)
