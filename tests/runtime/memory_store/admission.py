"""The memory store's admission of calls: admission.lua step by step (the same order of parked calls: stride
round-robin across tenants, priorities inside one, the first few parked calls of a priority looked at for a
concurrency key with room)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from agentq.protocol.admission import AdmissionConfig, Ticket
from tests.runtime.memory_store.core import MemoryCore

LOOKED_AT = 32  # parked calls of one priority looked at for a key with room (admission.lua's LRANGE 0 31)


@dataclass
class _Admission:
    held: dict[str, float] = field(default_factory=dict)  # member -> admitted at (ms)
    info: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # member -> (queue, tenant, key)
    counts: dict[str, int] = field(default_factory=dict)
    parked: set[str] = field(default_factory=set)
    lists: dict[tuple[str, str, int], list[tuple[str, str, int, str]]] = field(default_factory=dict)
    rings: dict[str, dict[str, float]] = field(default_factory=dict)  # queue -> tenant -> pass
    vtime: dict[str, float] = field(default_factory=dict)
    sweep_until: float = 0.0


class AdmissionSteps(MemoryCore):
    @property
    def _adm(self) -> _Admission:
        return self.__dict__.setdefault("_admission", _Admission())

    def _adm_count(self, name: str) -> int:
        return self._adm.counts.get(name, 0)

    def _adm_add(self, name: str, by: int) -> None:
        self._adm.counts[name] = self._adm_count(name) + by

    def _adm_admit(self, member: str, queue: str, tenant: str, key: str) -> None:
        adm = self._adm
        adm.held[member] = self.clock() * 1000
        adm.info[member] = (queue, tenant, key)
        self._adm_add(f"q:{queue}", 1)
        self._adm_add(f"t:{tenant}", 1)
        if key:
            self._adm_add(f"k:{key}", 1)

    def _adm_room(self, config: AdmissionConfig, ticket: Ticket) -> bool:
        if self._adm_count(f"q:{ticket.queue}") >= config.windows.get(ticket.queue, config.default_window):
            return False
        most = config.maxima.get(ticket.tenant)
        if most is not None and self._adm_count(f"t:{ticket.tenant}") >= most:
            return False
        return not ticket.key or self._adm_count(f"k:{ticket.key}") < ticket.limit

    def _adm_park(self, t: Ticket) -> None:
        adm = self._adm
        if t.member in adm.parked:
            return
        adm.parked.add(t.member)
        ring = adm.rings.setdefault(t.queue, {})
        ring.setdefault(t.tenant, adm.vtime.get(t.queue, 0.0))
        adm.lists.setdefault((t.queue, t.tenant, t.priority), []).append((t.member, t.key, t.limit, t.payload))

    def _adm_withdraw(self, member: str) -> None:
        """An ended call still parked leaves its list (admission.lua drops its entry when it next reads the list),
        and its tenant the ring when nothing else of it waits there."""
        adm = self._adm
        adm.parked.discard(member)
        for (queue, tenant, _), entries in adm.lists.items():
            entries[:] = [entry for entry in entries if entry[0] != member]
            if not any(adm.lists.get((queue, tenant, p)) for p in (1, 2, 3)):
                adm.rings.get(queue, {}).pop(tenant, None)

    def _adm_take(self, queue: str, tenant: str) -> tuple[str, str, str] | None:
        for priority in (1, 2, 3):
            entries = self._adm.lists.get((queue, tenant, priority), [])
            for i, (member, key, limit, payload) in enumerate(entries[:LOOKED_AT]):
                if not key or self._adm_count(f"k:{key}") < limit:
                    del entries[i]
                    return member, key, payload
        return None

    def _adm_fill(self, queue: str, config: AdmissionConfig, out: list[str]) -> None:
        adm = self._adm
        ring = adm.rings.get(queue, {})
        blocked: set[str] = set()
        window = config.windows.get(queue, config.default_window)
        if window - self._adm_count(f"q:{queue}") < min(config.batch, window):
            return
        while self._adm_count(f"q:{queue}") < config.windows.get(queue, config.default_window) and ring:
            for tenant, passed in sorted(ring.items(), key=lambda item: (item[1], item[0])):
                most = config.maxima.get(tenant)
                if tenant in blocked or (most is not None and self._adm_count(f"t:{tenant}") >= most):
                    blocked.add(tenant)
                    continue
                taken = self._adm_take(queue, tenant)
                if taken is None:
                    blocked.add(tenant)
                    continue
                member, key, payload = taken
                adm.parked.discard(member)
                self._adm_admit(member, queue, tenant, key)
                out.append(payload)
                adm.vtime[queue] = passed
                if any(adm.lists.get((queue, tenant, p)) for p in (1, 2, 3)):
                    ring[tenant] = passed + 1 / config.weights.get(tenant, 1)
                else:
                    del ring[tenant]
                break
            else:
                return
        if not ring:
            adm.rings.pop(queue, None)

    def admit_calls(self, tickets: Sequence[Ticket], config: AdmissionConfig, *, ended: Sequence[str] = (),
                    fill: Sequence[str] = ()) -> list[str]:
        with self._changed:
            adm, out = self._adm, []
            touched = dict.fromkeys(fill)
            for member in ended:
                if adm.held.pop(member, None) is not None:
                    queue, tenant, key = adm.info.pop(member)
                    self._adm_add(f"q:{queue}", -1)
                    self._adm_add(f"t:{tenant}", -1)
                    if key:
                        self._adm_add(f"k:{key}", -1)
                    touched[queue] = None
                elif member in adm.parked:
                    self._adm_withdraw(member)
            for i, t in enumerate(tickets, start=1):
                if t.member in adm.held:
                    out.append(f"#{i}")
                elif not adm.rings.get(t.queue) and self._adm_room(config, t):
                    self._adm_admit(t.member, t.queue, t.tenant, t.key)
                    out.append(f"#{i}")
                else:
                    self._adm_park(t)
                    touched[t.queue] = None
            for queue in touched:
                self._adm_fill(queue, config, out)
            return out

    def admitted_before(self, before_ms: int, limit: int = 500) -> list[str]:
        with self._changed:
            held = sorted(self._adm.held.items(), key=lambda item: item[1])
            return [member for member, at in held if at <= before_ms][:limit]

    def touch_admitted(self, members: Sequence[str]) -> None:
        with self._changed:
            for member in members:
                if member in self._adm.held:
                    self._adm.held[member] = self.clock() * 1000

    def parked_queues(self) -> list[str]:
        with self._changed:
            return sorted(q for q, ring in self._adm.rings.items() if ring)

    def admission_counts(self) -> dict[str, int]:
        with self._changed:
            return {k: v for k, v in self._adm.counts.items() if v}

    def take_admission_sweep(self, holder: str, ttl_ms: int) -> bool:
        with self._changed:
            now = self.clock()
            if now < self._adm.sweep_until:
                return False
            self._adm.sweep_until = now + ttl_ms / 1000
            return True

