"""The memory store's job concurrency keys: concurrency.lua step by step on the store's clock, and
`ConcurrencySteps`' look at holders and waiters before a job waits."""

from __future__ import annotations

from dataclasses import dataclass, field

from agentq.protocol.concurrency import ConcurrencyKeys
from agentq.protocol.envelopes import Envelope
from agentq.protocol.status import JobStatus
from agentq.store.codecs import entry
from tests.runtime.memory_store.core import MemoryCore


@dataclass
class _Keys:
    """One tenant's concurrency keys."""

    jobs: dict[str, tuple[ConcurrencyKeys, float, int]] = field(default_factory=dict)  # id -> keys, expiry s, place
    holders: dict[str, dict[str, float]] = field(default_factory=dict)  # key -> {job id: expiry s}
    waiters: dict[str, dict[str, int]] = field(default_factory=dict)  # key -> {job id: place}
    seq: int = 0

    def first(self, key: str) -> str | None:
        line = self.waiters.get(key) or {}
        return min(line, key=lambda j: line[j]) if line else None


class ConcurrencySteps(MemoryCore):
    def _conc(self, tenant: str) -> _Keys:
        return self.__dict__.setdefault("_concurrency", {}).setdefault(tenant, _Keys())

    def admit_concurrency(self, tenant: str, job_id: str, keys: ConcurrencyKeys, *, expire_at_ms: int) -> list[str]:
        with self._changed:
            conc, started = self._conc(tenant), []
            if job_id in conc.jobs:
                held = job_id in conc.holders.get(conc.jobs[job_id][0][0][0], {})
                return [job_id] if held else []
            conc.seq += 1
            conc.jobs[job_id] = (tuple(keys), expire_at_ms / 1000, conc.seq)
            started = self._promote(conc, [k for k, _ in keys])
            if self._fits(conc, job_id):
                self._hold(conc, job_id)
                return [job_id, *started]
            for key, _ in keys:
                conc.waiters.setdefault(key, {})[job_id] = conc.seq
            return list(dict.fromkeys(started + self._unblock(tenant, conc, job_id, [k for k, _ in keys])))

    def sweep_concurrency(self) -> dict[str, list[str]]:
        with self._changed:
            found: dict[str, list[str]] = {}
            for tenant, conc in sorted(self.__dict__.get("_concurrency", {}).items()):
                keys = sorted({k for spec in conc.jobs.values() for k, _ in spec[0]})
                started = self._promote(conc, keys) + self._unblock(tenant, conc, "", keys)
                if started:
                    found[tenant] = list(dict.fromkeys(started))
            return found

    def release_concurrency(self, tenant: str, job_id: str) -> list[str]:
        with self._changed:
            conc = self._conc(tenant)
            if job_id not in conc.jobs:
                return []
            keys = [k for k, _ in conc.jobs[job_id][0]]
            self._drop(conc, job_id)
            return self._promote(conc, keys)

    def _unblock(self, tenant: str, conc: _Keys, job_id: str, keys: list[str]) -> list[str]:
        holders = {j for k in keys for j in conc.holders.get(k, {})}
        members = sorted((holders | {j for k in keys for j in conc.waiters.get(k, {})}) - {job_id})
        started: list[str] = []
        for member in members:
            state = self._jobs.get(member)
            status = state.job.get("status") if state is not None else None
            if status is None or JobStatus(status).is_final:
                started += self.release_concurrency(tenant, member)
            elif status == JobStatus.WAITING and member in holders:
                started.append(member)
        return started

    def _fits(self, conc: _Keys, job_id: str) -> bool:
        now = self.clock()
        for key, limit in conc.jobs[job_id][0]:
            held = conc.holders.setdefault(key, {})
            for expired in [j for j, expiry in held.items() if expiry <= now]:
                del held[expired]
            if job_id not in held and len(held) >= limit:
                return False
            first = conc.first(key)
            if first is not None and first != job_id:
                return False
        return True

    def _hold(self, conc: _Keys, job_id: str) -> None:
        keys, expiry, _ = conc.jobs[job_id]
        for key, _ in keys:
            conc.holders.setdefault(key, {})[job_id] = expiry
            conc.waiters.get(key, {}).pop(job_id, None)

    def _drop(self, conc: _Keys, job_id: str) -> None:
        keys = conc.jobs.pop(job_id, ((), 0.0, 0))[0]
        for key, _ in keys:
            conc.holders.get(key, {}).pop(job_id, None)
            conc.waiters.get(key, {}).pop(job_id, None)

    def _promote(self, conc: _Keys, keys: list[str]) -> list[str]:
        started: list[str] = []
        queue = list(keys)
        while queue:
            key = queue.pop(0)
            while (head := conc.first(key)) is not None:
                spec = conc.jobs.get(head)
                if spec is None or spec[1] <= self.clock():
                    self._drop(conc, head)
                    conc.waiters.get(key, {}).pop(head, None)
                elif self._fits(conc, head):
                    self._hold(conc, head)
                    started.append(head)
                    queue += [k for k, _ in spec[0]]
                else:
                    break
        return started

    def start_waiting(self, job_id: str, *, event: Envelope) -> bool:
        with self._changed:
            state = self._jobs.get(job_id)
            if state is None or state.job.get("status") != JobStatus.WAITING:
                return False
            state.job["status"] = state.job.get("start_status") or JobStatus.QUEUED.value
            self._xadd(state, entry(event, job_id))
            return True
