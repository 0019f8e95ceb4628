"""Waits in Redis (docs/waits.md): `RedisWaits`, the store's side of `engine/waits.py`.

A wait call's state lives in its job's keys (one Cluster slot): `waits` (call id -> the open wait, and
`<call>:woken` -> what ended it, decided once) and `signals:<name>` (signals no wait took yet). Its due time lives in
the fleet's `{timers}:due` sorted set (`<job> <call>` -> unix ms), and a waitForEvent's match in its tenant's
`{waits:<tenant>}` sets (by the shape and digest of its match, `protocol/waits.py`), so an event finds its waits
without scanning jobs or waits. Those two are other slots:
they are written before the job's step (a crash between leaves an entry that finds its call not waiting, and is
dropped) and the job's step decides.
"""

from __future__ import annotations

import json
import math
from typing import Any

from agentq.protocol.envelopes import Envelope
from agentq.protocol.waits import WAIT_FOR_SIGNAL, WaitSpec, event_digests, wait_digest
from agentq.store.boundary import map_store_errors
from agentq.store.part import StorePart
from agentq.store.script_runner import ScriptRunner
from agentq.store.views import WaitTaken

WAIT_SCRIPTS = ("wait_open", "wait_take", "wait_wake", "signal", "timers_take")
EVENT_ID_TTL_S = 86_400  # how long a sent event's id is remembered (a re-sent event within it is ignored)


def timer_member(job_id: str, call_id: str) -> str:
    return f"{job_id} {call_id}"


@map_store_errors
class RedisWaits(StorePart):
    """Open, wake, decide and time waits; keep and deliver signals; find the waits an event matches."""

    _wait_scripts: ScriptRunner | None = None

    @property
    def _waits(self) -> ScriptRunner:
        runner = self._wait_scripts
        if runner is None:
            runner = self._wait_scripts = ScriptRunner(self.redis, WAIT_SCRIPTS)
        return runner

    def open_wait(self, job_id: str, call_id: str, *, token: str, spec: WaitSpec, opened_ms: int, tenant: str,
                  event: Envelope) -> str:
        """Write a running wait call `waiting` (wait_open.lua), its due time and, for a waitForEvent, its match
        in its tenant's index first. Returns 'open', 'woken' (a kept signal was taken: fire it now) or 'gone'."""
        keys = self.keys(job_id)
        member = timer_member(job_id, call_id)
        if spec.kind == "waitForEvent":
            shape, digest = wait_digest(spec.match)
            pipe = self.redis.pipeline(transaction=False)
            pipe.sadd(self.fleet.event_shapes(tenant, spec.name), shape)
            pipe.sadd(self.fleet.event_waits(tenant, spec.name, digest), member)
            pipe.execute()
        self.redis.zadd(self.fleet.timers, {member: self._due_score(job_id, spec.due_ms)})
        step_keys = [keys.job, keys.status, keys.lease(call_id), keys.waits, keys.events]
        if spec.kind == WAIT_FOR_SIGNAL:
            step_keys.append(keys.signals(spec.name))
        reply = self._waits.run("wait_open", step_keys, [call_id, token, spec.to_json(token, opened_ms),
                                                         json.dumps(event.to_dict(), ensure_ascii=False)])
        return _text(reply[0])

    def take_wait(self, job_id: str, call_id: str, *, now_ms: int, sleep_output: Any) -> WaitTaken:
        """Decide how a waiting call ends, once (wait_take.lua)."""
        keys = self.keys(job_id)
        reply = self._waits.run("wait_take", [keys.status, keys.waits],
                                [call_id, now_ms, json.dumps(sleep_output)])
        outcome = _text(reply[0])
        if outcome in ("gone", "opening"):
            return WaitTaken(outcome)
        spec, token = WaitSpec.from_json(_text(reply[1]))
        ended = json.loads(_text(reply[2])) if outcome == "woken" else None
        return WaitTaken(outcome, spec=spec, token=token, ended=ended)

    def wake_wait(self, job_id: str, call_id: str, *, event_name: str, event: dict) -> bool:
        """Deliver an event to one waitForEvent call (wait_wake.lua), and bring its timer due now; False when it
        no longer waits."""
        keys = self.keys(job_id)
        reply = self._waits.run("wait_wake", [keys.status, keys.waits],
                                [call_id, event_name, json.dumps(event, ensure_ascii=False)])
        if _text(reply[0]) != "woken":
            return False
        self.redis.zadd(self.fleet.timers, {timer_member(job_id, call_id): 0}, xx=True)
        return True

    def send_signal(self, job_id: str, name: str, signal: dict) -> tuple[str, str | None]:
        """signal.lua: ('woken', the call that took it) — its timer brought due now —, ('kept', None),
        ('missing', None) or ('ended', the job's status)."""
        keys = self.keys(job_id)
        reply = self._waits.run("signal", [keys.job, keys.status, keys.waits, keys.signals(name)],
                                [name, json.dumps(signal, ensure_ascii=False)])
        outcome = _text(reply[0])
        detail = _text(reply[1]) if len(reply) > 1 else None
        if outcome == "woken" and detail is not None:
            self.redis.zadd(self.fleet.timers, {timer_member(job_id, detail): 0}, xx=True)
        return outcome, detail

    def event_waiters(self, tenant: str, event_name: str, data: Any) -> list[tuple[str, str]]:
        """(digest, `<job> <call>`) of the open waitForEvent calls of `tenant` for `event_name` whose match `data`
        fits: one read of the shapes, then one of each digest the data gives (one pipeline)."""
        shapes = sorted(_text(s) for s in self.redis.smembers(self.fleet.event_shapes(tenant, event_name)))
        digests = event_digests(shapes, data)
        if not digests:
            return []
        pipe = self.redis.pipeline(transaction=False)
        for digest in digests:
            pipe.smembers(self.fleet.event_waits(tenant, event_name, digest))
        return [(digest, _text(m)) for digest, members in zip(digests, pipe.execute(), strict=True)
                for m in sorted(members)]

    def first_sight(self, tenant: str, event_id: str) -> bool:
        """Whether an event id of `tenant` is seen for the first time within a day (then remembered)."""
        return bool(self.redis.set(self.fleet.event_seen(tenant, event_id), 1, nx=True, ex=EVENT_ID_TTL_S))

    def take_due_timers(self, *, now_ms: int, limit: int, claim_ms: int) -> list[tuple[str, str]]:
        """(job, call) of up to `limit` due timers, each claimed for `claim_ms` (timers_take.lua)."""
        members = self._waits.run("timers_take", [self.fleet.timers], [now_ms, limit, claim_ms])
        return [tuple(_text(m).split(" ", 1)) for m in members]  # type: ignore[misc]

    def retime_wait(self, job_id: str, call_id: str, due_ms: float) -> None:
        """Put a taken timer back at its due time (it was not due: its claim ran ahead of it)."""
        self.redis.zadd(self.fleet.timers, {timer_member(job_id, call_id): self._due_score(job_id, due_ms)}, xx=True)

    def _due_score(self, job_id: str, due_ms: float) -> int | str:
        """A timer's score: its due time; a wait without one comes due when its job's keys expire (then its fire
        finds it gone and drops it, so no entry outlives its job)."""
        if due_ms != math.inf:
            return int(due_ms)
        expire_at = self.redis.hget(self.keys(job_id).job, "expire_at_ms")
        return int(expire_at) + 1000 if expire_at is not None else "+inf"

    def close_wait(self, job_id: str, call_id: str, *, tenant: str | None, spec: WaitSpec | None) -> None:
        """Forget an ended wait: its timer, its entry in its tenant's event index, its state in the job's keys."""
        member = timer_member(job_id, call_id)
        pipe = self.redis.pipeline(transaction=False)  # three slots on a cluster: one pipeline still
        if spec is not None and spec.kind == "waitForEvent" and tenant is not None:
            pipe.srem(self.fleet.event_waits(tenant, spec.name, wait_digest(spec.match)[1]), member)
        pipe.hdel(self.keys(job_id).waits, call_id, f"{call_id}:woken")
        pipe.zrem(self.fleet.timers, member)
        pipe.execute()

    def drop_event_wait(self, tenant: str, event_name: str, digest: str, member: str) -> None:
        """Drop an entry of a tenant's event index whose call no longer waits."""
        self.redis.srem(self.fleet.event_waits(tenant, event_name, digest), member)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
