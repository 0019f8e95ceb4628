"""The store's side of the admission of ready calls (SPEC §17): `AdmissionSteps`, and what it takes (`Ticket`,
`AdmissionConfig`).

A ready call of an activity queue enters its Celery queue only once admitted (`runtime/admission.py` decides what
to ask and publishes what is admitted). One Lua step, `admission.lua`, does all of it atomically: it gives back the
places of the calls that ended, admits new calls at once while their queue has room and nothing parked (the fast
path: a few commands), parks the others per queue, tenant and priority, and gives free places to parked calls
round-robin across tenants by weight. Every key shares the hash tag `{admission}`, so the step runs on one node of a
cluster (the parked lists and rings it names from the prefix it is given fall in the same slot).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from agentq.protocol.admission import AdmissionConfig, Ticket
from agentq.store.boundary import map_store_errors
from agentq.store.connection import StoreConnection

ADMISSION_PARTS = ("held", "info", "counts", "parked", "queues", "vtime")


@map_store_errors
class AdmissionSteps(StoreConnection):
    """The admission of calls (see the module docstring)."""

    def admit_calls(self, tickets: Sequence[Ticket], config: AdmissionConfig, *, ended: Sequence[str] = (),
                    fill: Sequence[str] = ()) -> list[str]:
        """One admission step: the `ended` members give their places back, the `fill` queues' free places go to
        their parked calls, each ticket is admitted or parked. Returns what to publish: `#<i>` for the i-th ticket
        (1-based) admitted at once, else the payload of a parked call admitted now."""
        keys = [self.fleet.admission(part) for part in ADMISSION_PARTS]
        args: list[str | int] = [self.fleet.admission("q"), int(time.time() * 1000), config.to_json(),
                                 len(ended), *ended, len(fill), *fill]
        for t in tickets:
            args += [t.member, t.queue, t.tenant, t.priority, t.key, t.limit, t.payload]
        reply = self.scripts.run("admission", keys, args)
        return [r.decode() if isinstance(r, bytes) else str(r) for r in reply]

    def admitted_before(self, before_ms: int, limit: int = 500) -> list[str]:
        """The members admitted before `before_ms` (their place not given back yet), oldest first."""
        return list(self.redis.zrangebyscore(self.fleet.admission("held"), "-inf", before_ms, start=0, num=limit))

    def touch_admitted(self, members: Sequence[str]) -> None:
        """Count `members` as admitted now (a sweep looked at them: the next looks again a sweep later)."""
        if members:
            now = int(time.time() * 1000)
            self.redis.zadd(self.fleet.admission("held"), dict.fromkeys(members, now), xx=True)

    def parked_queues(self) -> list[str]:
        """The queues with parked calls."""
        return sorted(self.redis.smembers(self.fleet.admission("queues")))

    def admission_counts(self) -> dict[str, int]:
        """The admitted calls per queue (`q:<queue>`), tenant (`t:<tenant>`) and concurrency key (`k:<key>`)."""
        return {k: int(v) for k, v in self.redis.hgetall(self.fleet.admission("counts")).items() if int(v)}

    def take_admission_sweep(self, holder: str, ttl_ms: int) -> bool:
        """Whether this process sweeps the admission now (one process of the fleet per `ttl_ms`)."""
        return bool(self.redis.set(self.fleet.admission("sweep"), holder, nx=True, px=ttl_ms))
