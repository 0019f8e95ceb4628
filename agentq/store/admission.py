"""The store's side of the admission of ready calls (SPEC §17): `AdmissionSteps`, and what it takes (`Ticket`,
`AdmissionConfig`).

A ready call of an activity queue enters its Celery queue only once admitted (`runtime/admission.py` decides what
to ask and publishes what is admitted). One Lua step, `admission.lua`, does all of it atomically: it gives back the
places of the calls that ended, admits new calls at once while their queue has room and nothing parked (the fast
path), parks the others per queue, tenant and priority, and gives free places to parked calls round-robin across
tenants by weight. Its commands grow with the queues, tenants, keys and lists a step touches, not with its calls
(each hash read once and written once). Every key shares the hash tag `{admission}`, so the step runs on one node of
a cluster (the parked lists and rings it names from the prefix it is given fall in the same slot).

The admitted calls are one hash, `info`: member -> "queue\\ttenant\\tadmitted at (ms)\\tkey" (`_admitted.lua`; the name
it had when the times were kept in a zset of their own: an entry of then, "queue\\ttenant\\tkey", gives its place
back alike and counts as admitted long ago). The sweep reads it whole (it holds no more than the windows' calls and
the ended ones not given back yet) and picks the old ones here.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from agentq.protocol.admission import AdmissionConfig, Ticket
from agentq.store.boundary import map_store_errors
from agentq.store.connection import StoreConnection

ADMISSION_PARTS = ("info", "counts", "parked", "queues", "vtime")
TOUCHED = 500  # members touched per step


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
        admitted = []
        for member, value in self.redis.hgetall(self.fleet.admission("info")).items():
            fields = value.split("\t", 3)  # queue, tenant, admitted at (ms), key (`_admitted.lua`)
            at = int(fields[2]) if len(fields) == 4 and fields[2].isdigit() else 0  # 0: by an earlier version
            if at <= before_ms:
                admitted.append((at, member))
        return [member for _, member in sorted(admitted)[:limit]]

    def touch_admitted(self, members: Sequence[str]) -> None:
        """Count `members` as admitted now (a sweep looked at them: the next looks again a sweep later)."""
        now = int(time.time() * 1000)
        for i in range(0, len(members), TOUCHED):
            self.scripts.run("admission_touch", [self.fleet.admission("info")], [now, *members[i:i + TOUCHED]])

    def parked_queues(self) -> list[str]:
        """The queues with parked calls."""
        return sorted(self.redis.smembers(self.fleet.admission("queues")))

    def admission_counts(self) -> dict[str, int]:
        """The admitted calls per queue (`q:<queue>`), tenant (`t:<tenant>`) and concurrency key (`k:<key>`)."""
        return {k: int(v) for k, v in self.redis.hgetall(self.fleet.admission("counts")).items() if int(v)}

    def take_admission_sweep(self, holder: str, ttl_ms: int) -> bool:
        """Whether this process sweeps the admission now (one process of the fleet per `ttl_ms`)."""
        return bool(self.redis.set(self.fleet.admission("sweep"), holder, nx=True, px=ttl_ms))
