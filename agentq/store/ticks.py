"""An agent job's tick steps (take the next model request, write the calls of its solution, end it), the
job's composed tools, and module relay's writes (a child job's events, as the engine shows them, copied to its
parent's stream).

The tick steps are Lua scripts like the call steps (`scripts.py`), so each is atomic and idempotent.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agentq.protocol.digests import dumps
from agentq.protocol.envelopes import Envelope
from agentq.protocol.plans import PlannedCall
from agentq.protocol.records import CallRecord, ParentLink
from agentq.store.boundary import map_store_errors
from agentq.store.codecs import agent_inputs_of
from agentq.store.connection import StoreConnection
from agentq.store.core import not_found
from agentq.store.event_codec import pack
from agentq.store.job_timers import unstarted_check
from agentq.store.part import StorePart
from agentq.store.replies import CallsAdded, TickClaim, TickEnded
from agentq.store.stats import JobCounts
from agentq.store.views import AgentInputs, RelayCursor


@map_store_errors
class RedisTicks(StorePart):
    """Agent ticks and module relay's writes (a part of `StateStore`)."""

    def __init__(self, conn: StoreConnection, counts: JobCounts):
        super().__init__(conn)
        self.counts = counts  # the metrics' bookkeeping of jobs as they end (a part it is given)

    def begin_tick(self, job_id: str, *, exchanges: int, token: str, lease_ms: int,
                   job_started: Envelope | None = None, read_from: tuple[int, int] | None = None) -> TickClaim:
        """Take the job's next model request (at most one in flight): it must still be the request number
        `exchanges`, no awaited call may be open, and no other task may hold the tick's lease. `read_from`: (log,
        exchanges) positions: a claim then brings what `agent_inputs` would read from them, in the same step. On one
        Redis, the tick that starts the job also drops its `@unstarted` timer (`runtime/job_timers.py`); on a cluster
        (the timers are in another slot) the timer fires and finds the job started."""
        unstarted = unstarted_check(job_id, timers=self.fleet.timers, cluster=self.cluster)
        return self.scripts.begin_tick(self.keys(job_id), exchanges=exchanges, token=token, lease_ms=lease_ms,
                                       job_started=job_started, read_from=read_from, unstarted=unstarted)

    def end_ticking(self, job_id: str) -> None:
        """Clear the in-flight mark of a tick that asked nothing (its job is about to end)."""
        self.redis.hset(self.keys(job_id).job, mapping={"ticking": "0", "tick_attempt": "0"})

    def release_tick(self, job_id: str, *, token: str) -> None:
        """Give up the tick's lease (its request waits for another attempt); `ticking` stays set meanwhile."""
        self.scripts.unlease(self.keys(job_id).tick_lease, token=token)

    def agent_inputs(self, job_id: str, *, log_from: int = 0, exchanges_from: int = 0) -> AgentInputs:
        """What a tick reads, in one round trip; the log and the exchanges from those positions on (what a
        process that kept the earlier ones has not seen: both lists only grow)."""
        keys = self.keys(job_id)
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(keys.job)
        pipe.lrange(keys.log, log_from, -1)
        pipe.lrange(keys.exchanges, exchanges_from, -1)
        pipe.hget(keys.spec, "registered")
        fields, log, exchanges, registered = pipe.execute()
        if not fields:
            raise not_found(job_id)
        return agent_inputs_of(fields, log, exchanges, registered)

    def job_tools(self, job_id: str) -> dict[str, dict]:
        """The job's composed tool schemas, by name."""
        return {k: json.loads(v) for k, v in self.redis.hgetall(self.keys(job_id).tools).items()}

    def set_job_tools(self, job_id: str, composed: dict[str, dict]) -> None:
        """The job's composed tool schemas as of this tick (what its calls' claims read). One round trip; two
        when this creates the hash (a job submitted with no tools): it then gets the job's expiry."""
        if not composed:
            return
        keys = self.keys(job_id)
        pipe = self.redis.pipeline(transaction=False)
        pipe.hset(keys.tools, mapping={k: dumps(v) for k, v in composed.items()})
        pipe.pttl(keys.tools)
        pipe.hget(keys.job, "expire_at_ms")
        _, ttl, expire_at_ms = pipe.execute()
        if ttl == -1:  # no expiry yet: the job's, or gone at once when the job expired meanwhile
            if expire_at_ms:
                self.redis.pexpireat(keys.tools, int(expire_at_ms))
            else:
                self.redis.delete(keys.tools)

    def add_calls(self, job_id: str, *, token: str, records: Sequence[CallRecord],
                  plans: Sequence[PlannedCall]) -> list[CallRecord] | None:
        """Write calls of a tick's solution (each once, whatever the retries); the records of those ready
        now, or None when the tick's lease is no longer `token`'s or the job ended."""
        added = self.scripts.add_calls(self.keys(job_id), token=token, records=records, plans=plans)
        if not isinstance(added, CallsAdded):
            return None
        if any(plan.approval for plan in plans):
            self.counts.may_hold_approvals(job_id)
        return added.ready

    def end_tick(self, job_id: str, *, token: str, exchange: dict, counts: bool, output: Any = None,
                 has_output: bool = False, usage: dict[str, int] | None = None, messages: Sequence[dict] = (),
                 events: Sequence[Envelope] = ()) -> TickEnded | None:
        """End the tick: (open awaited calls, ticks so far, and the job as the step left it when no awaited call is
        open), or None when its lease is not `token`'s."""
        ended = self.scripts.end_tick(self.keys(job_id), token=token, exchange=exchange, counts=counts, output=output,
                                      has_output=has_output, usage=usage or {}, messages=messages, events=events)
        return ended if isinstance(ended, TickEnded) else None

    # --------------------------------------------------------------------------------------- module relay

    def relay_cursor(self, job_id: str) -> RelayCursor | None:
        """Where the relay of a module's child job stands (None for a job that is no module's child)."""
        cursor, link = self.redis.hmget(self.keys(job_id).job, ["relayed", "parent"])
        if not link:
            return None
        return RelayCursor(cursor or "0-0", ParentLink.from_dict(json.loads(link)))

    def write_relayed(self, job_id: str, *, parent_id: str, cursor: str, to: str,
                      envelopes: Sequence[dict[str, Any]]) -> bool:
        """Append `envelopes` (a child job's events as its parent shows them) to the parent's stream, once: the
        child's relay cursor moves from `cursor` to `to` by compare-and-set first (`relay.lua`), and nothing is
        written when another relay moved it. Whether this one did."""
        if not self.scripts.relay(self.keys(job_id), cursor=cursor, to=to):
            return False
        if envelopes:
            to_events = self.keys(parent_id).events
            pipe = self.redis.pipeline(transaction=False)
            for envelope in envelopes:
                pipe.xadd(to_events, {"e": pack(envelope, parent_id)})
            pipe.execute()
        return True
