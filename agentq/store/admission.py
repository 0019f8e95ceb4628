"""The store's side of the admission of ready calls (docs/tenants.md): `RedisAdmission`, and what it takes (`Ticket`,
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

After a restart of the store, `admission_runs` tells the sweep so (the run id it looked at last, `run`, differs
from the server's), and `broker_holds` reads which tasks a Redis broker on this server still holds
(`runtime/restarts.py`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agentq.protocol.admission import AdmissionConfig, AdmissionRequest, Ticket
from agentq.store.boundary import map_store_errors
from agentq.store.part import StorePart

ADMISSION_PARTS = ("info", "counts", "parked", "queues", "vtime")
TOUCHED = 500  # members touched per step
COUNTED = ("q:", "t:", "k:")  # the counts' fields of admitted calls, per queue, tenant and concurrency key
# (the others: "w:", parked entries withdrawn and not dropped yet; "v:<queue>", the queue's virtual time)


@map_store_errors
class RedisAdmission(StorePart):
    """The admission of calls (see the module docstring)."""

    def admit_calls(self, tickets: Sequence[Ticket], config: AdmissionConfig, *, ended: Sequence[str] = (),
                    fill: Sequence[str] = ()) -> list[str]:
        """One admission step: the `ended` members give their places back, the `fill` queues' free places go to
        their parked calls, each ticket is admitted or parked. Returns what to publish: `#<i>` for the i-th ticket
        (1-based) admitted at once, else the payload of a parked call admitted now."""
        keys, args = admission_step(self, tickets, config, ended, fill)
        return _answer(self.scripts.run("admission", keys, args))

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
        now = int(self.clock() * 1000)
        for i in range(0, len(members), TOUCHED):
            self.scripts.run("admission_touch", [self.fleet.admission("info")], [now, *members[i:i + TOUCHED]])

    def parked_queues(self) -> list[str]:
        """The queues with parked calls."""
        return sorted(self.redis.smembers(self.fleet.admission("queues")))

    def admission_counts(self) -> dict[str, int]:
        """The admitted calls per queue (`q:<queue>`), tenant (`t:<tenant>`) and concurrency key (`k:<key>`)."""
        counts = self.redis.hgetall(self.fleet.admission("counts"))
        return {k: int(v) for k, v in counts.items() if k[:2] in COUNTED and int(v)}

    def take_admission_sweep(self, holder: str, ttl_ms: int) -> bool:
        """Whether this process sweeps the admission now (one process of the fleet per `ttl_ms`)."""
        return bool(self.redis.set(self.fleet.admission("sweep"), holder, nx=True, px=ttl_ms))

    def swap_fleet_seen(self, seen: str) -> str | None:
        """The fleet's live processes as the last sweep saw them (None: no sweep yet), replaced by `seen` (one
        round trip)."""
        before = self.redis.set(self.fleet.admission("live"), seen, get=True)
        return None if before is None else str(before)

    def admission_runs(self) -> tuple[str, str | None, int]:
        """The server's run id, the one the sweep last looked at the queues for (`note_admission_run`; None:
        never) and how long the server has run (ms, whole seconds): a restart changes the run id, and the key
        that keeps the one looked at comes back from the append-only file as it was."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.info("server")
        pipe.get(self.fleet.admission("run"))
        info, seen = pipe.execute()
        return str(info["run_id"]), seen, int(info["uptime_in_seconds"]) * 1000

    def admission_members(self, members: Sequence[str]) -> set[str]:
        """Of `members`, those admitted or parked now (fields of the `info` or `parked` hash): one round trip, reading
        only those fields, not the whole hashes."""
        if not members:
            return set()
        pipe = self.redis.pipeline(transaction=False)
        pipe.hmget(self.fleet.admission("info"), list(members))
        pipe.hmget(self.fleet.admission("parked"), list(members))
        admitted, parked = pipe.execute()
        return {m for m, a, p in zip(members, admitted, parked, strict=True) if a is not None or p is not None}

    def leases_lapsed(self, calls: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        """Of (job id, call id) pairs of running calls, those whose lease is gone: no live process runs them (its
        holder renews it, and makes it again should it lapse in an outage, `renew.lua`). One round trip."""
        pipe = self.redis.pipeline(transaction=False)
        for job_id, call_id in calls:
            pipe.exists(self.keys(job_id).lease(call_id))
        return {pair for pair, held in zip(calls, pipe.execute(), strict=True) if not held}

    def note_admission_run(self, run: str) -> None:
        """The sweep looked at the queues for the server's run `run`."""
        self.redis.set(self.fleet.admission("run"), run)

    def broker_holds(self, lists: Sequence[str], unacked: str) -> set[str]:
        """The ids of the tasks a Redis broker on this server holds: on `lists` (queues), or taken and not
        acknowledged yet (the hash `unacked`); read at once, so a task moving from one to the other is seen."""
        pipe = self.redis.pipeline(transaction=True)
        for key in lists:
            pipe.lrange(key, 0, -1)
        pipe.hvals(unacked)
        *queued, taken = pipe.execute()
        held = {_task_id(message) for messages in queued for message in messages}
        held.update(_task_id(entry, unacked=True) for entry in taken)
        return held - {""}


def admission_step(store: StorePart, tickets: Sequence[Ticket], config: AdmissionConfig,
                   ended: Sequence[str] = (), fill: Sequence[str] = ()) -> tuple[list[str], list[str | int]]:
    """The KEYS and ARGV of an `admission.lua` step."""
    keys = [store.fleet.admission(part) for part in ADMISSION_PARTS]
    args: list[str | int] = [store.fleet.admission("q"), int(store.clock() * 1000), config.to_json(),
                             len(ended), *ended, len(fill), *fill]
    for t in tickets:
        args += [t.member, t.queue, t.tenant, t.priority, t.key, t.limit, t.payload]
    return keys, args


def queue_admission(store: StorePart, pipe: Any, request: AdmissionRequest | None, job_key: str) -> bool:
    """Add `request`'s step to a new job's write pipeline, after the job's script, on a single Redis (not on a
    cluster: the job's keys are in another slot); whether it was added. The step runs only if the job's hash
    `job_key` exists then (`admission.lua`'s KEYS[6]). `took_admission` reads its reply."""
    if request is None or store.cluster:
        return False
    keys, args = admission_step(store, request.tickets, request.config)
    pipe.evalsha(store.scripts.registered["admission"].sha, len(keys) + 1, *keys, job_key, *args)
    return True


def took_admission(request: AdmissionRequest | None, replies: list[Any], queued: bool) -> list[Any]:
    """The pipeline's `replies` without the step's (the last, when `queued`), which goes to `request.reply`: None
    when the step did not run (the job was not written) or failed (a Redis that lost its script: the step is
    then made on its own)."""
    if not queued or request is None:
        return replies
    reply = replies[-1]
    request.reply = None if reply is None or isinstance(reply, Exception) else _answer(reply)
    return replies[:-1]


def _task_id(raw: str, *, unacked: bool = False) -> str:
    """The task id of a kombu message as its Redis transport keeps it (an unacknowledged one: `[message,
    exchange, routing key]`); "" for anything else."""
    try:
        message = json.loads(raw)
        return str((message[0] if unacked else message)["headers"]["id"])
    except (ValueError, TypeError, KeyError, IndexError):
        return ""


def _answer(reply: Any) -> list[str]:
    return [r.decode() if isinstance(r, bytes) else str(r) for r in reply]
