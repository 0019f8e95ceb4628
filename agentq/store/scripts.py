"""The store's Lua steps: one typed method per step.

Each step in `lua/` opens with its key layout (KEYS) and its arguments (ARGV). `Scripts` is the one place that
lays out a step's KEYS and encodes its ARGV, and the one place that reads a step's flat reply array: every
method returns a frozen record of `store/replies.py`, so no offset arithmetic happens anywhere else. Its bases:
`script_runner.py` (loading the scripts, EVALSHA) and `call_scripts.py` (the steps of one call).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agentq.protocol.budgets import Budget, BudgetAsk, Spend
from agentq.protocol.digests import dumps, now_iso
from agentq.protocol.envelopes import Envelope
from agentq.protocol.plans import PlannedCall
from agentq.protocol.records import CallRecord, JobRecord
from agentq.protocol.status import JobStatus
from agentq.store.call_scripts import CallScripts, finish_inputs_of, pairs
from agentq.store.codecs import agent_inputs_of, decode_job, entry
from agentq.store.keys import JobKeys
from agentq.store.replies import (
    AlreadyEnded,
    BudgetGranted,
    BudgetRefused,
    BudgetReply,
    CallsAdded,
    Canceled,
    CancelMissing,
    CancelReply,
    JobEnded,
    TickBusy,
    TickClaim,
    TickClaimed,
    TickEnded,
    TickFinished,
    TickLeased,
    TickMissing,
    TickStale,
    TickSuperseded,
)
from agentq.store.step_args import (
    BudgetReserveArgs,
    BudgetSettleArgs,
    EndCount,
    FinalizeArgs,
    Listing,
    StartCheck,
    TickBeginArgs,
    TickEndArgs,
)

SCRIPT_NAMES = ("submit", "claim", "commit", "retry", "finalize", "cancel", "renew", "tick_begin", "add_calls",
                "tick_end", "decide", "unlease", "relay", "settle", "node_swap", "budget", "llm_take", "llm_settle",
                "llm_window", "tenant_admit", "concurrency", "admission", "admission_touch", "trace_context", "unclaim")


class Scripts(CallScripts):
    """The Lua steps registered on one Redis client (a script is loaded on first use, again after a flush)."""

    def __init__(self, redis: Any):
        super().__init__(redis, SCRIPT_NAMES)

    # ----------------------------------------------------------------------------------- submission

    def submit(self, keys: JobKeys, payload: str, expire_at_ms: int, listing: Listing | None = None) -> bool:
        """submit.lua: write a whole job (`payload`, its JSON) and its fleet-wide entries (`listing`, on a single
        Redis only: they are not in the job's slot), or nothing when the id is taken."""
        return bool(self._run("submit", *_submit_args(keys, payload, expire_at_ms, listing)))

    def queue_submit(self, pipe: Any, keys: JobKeys, payload: str, expire_at_ms: int, listing: Listing) -> None:
        """Add submit.lua to a pipeline by its SHA (`submitted` reads its reply there)."""
        job_keys, args = _submit_args(keys, payload, expire_at_ms, listing)
        pipe.evalsha(self._scripts["submit"].sha, len(job_keys), *job_keys, *args)

    def submitted(self, reply: Any, keys: JobKeys, payload: str, expire_at_ms: int,
                  listing: Listing) -> bool | Exception:
        """The reply of a queued submit.lua: whether it wrote the job, or the error it failed with. A Redis that
        lost its scripts (a restart, SCRIPT FLUSH) runs it again, loading it."""
        from redis.exceptions import NoScriptError

        if isinstance(reply, NoScriptError):
            return self.submit(keys, payload, expire_at_ms, listing)
        return reply if isinstance(reply, Exception) else bool(reply)

    # -------------------------------------------------------------------------------------- job steps

    def finalize(self, keys: JobKeys, *, record: JobRecord, event: Envelope, count: EndCount | None = None) -> bool:
        """finalize.lua: give an active job its final status and record (and, with `count`, count its end for the
        metrics); False when it had ended already (nothing written)."""
        return bool(self._run("finalize", [keys.job, keys.events, keys.done, *(count.keys if count else ())],
                              [FinalizeArgs.of(record, entry(event, keys.job_id), count).encode()]))

    def cancel(self, keys: JobKeys, *, event: Envelope) -> CancelReply:
        """cancel.lua: cancel a job."""
        reply = self._run("cancel", [keys.job, keys.status, keys.events, keys.done],
                          [now_iso(), entry(event, keys.job_id)])
        match reply[0]:
            case "canceled":
                return Canceled(ready=list(reply[1:]))
            case "final":
                return AlreadyEnded(status=JobStatus(reply[1]))
            case "missing":
                return CancelMissing()
        raise ValueError(f"cancel.lua replied {reply[0]!r}")

    def relay(self, keys: JobKeys, *, cursor: str, to: str) -> bool:
        """relay.lua: move a child job's relay cursor from `cursor` to `to`, unless another relay moved it."""
        return bool(self._run("relay", [keys.job], [cursor, to]))

    # ------------------------------------------------------------------------------------- agent ticks

    def begin_tick(self, keys: JobKeys, *, exchanges: int, token: str, lease_ms: int,
                   job_started: Envelope | None, read_from: tuple[int, int] | None = None,
                   unstarted: StartCheck | None = None) -> TickClaim:
        """tick_begin.lua: take the job's next model request; with `read_from` (where the log and the exchanges
        are read from), the claim brings the tick's inputs; with `unstarted` (one Redis only), the tick that starts
        the job drops its `@unstarted` timer."""
        reply = self._run("tick_begin", [keys.job, keys.tick_lease, keys.exchanges, keys.events, keys.log,
                                         keys.spec, *(unstarted.keys if unstarted else ())],
                          [TickBeginArgs(exchanges=exchanges, token=token, lease_ms=lease_ms, now=now_iso(),
                                         job_started=entry(job_started, keys.job_id) if job_started else "",
                                         read_from=read_from,
                                         unstarted=unstarted.member if unstarted else None).encode()])
        match reply[0]:
            case "claimed":
                return _claimed(reply)
            case "leased":
                return TickLeased(lease_left_ms=int(reply[1]))
            case "finished":
                return TickFinished(status=JobStatus(reply[1]))
            case "busy":
                return TickBusy(open_calls=int(reply[1]))
            case "stale":
                return TickStale()
            case "missing":
                return TickMissing()
        raise ValueError(f"tick_begin.lua replied {reply[0]!r}")

    def add_calls(self, keys: JobKeys, *, token: str, records: Sequence[CallRecord],
                  plans: Sequence[PlannedCall]) -> CallsAdded | TickSuperseded | JobEnded:
        """add_calls.lua: write calls of a tick's solution, each once."""
        args: list[Any] = [token]
        for record, plan in zip(records, plans, strict=True):
            flags = ("a" if plan.approval else "") + ("w" if record.awaited else "")
            held = entry(plan.held_event(keys.job_id), keys.job_id) if plan.approval else ""
            args += [record.id, dumps(record.to_dict()), dumps(plan.depends_on), flags or "-", held]
        reply = self._run("add_calls", [keys.job, keys.calls, keys.status, keys.waiting, keys.dependents,
                                        keys.approval, keys.tick_lease, keys.events], args)
        match reply[0]:
            case "ok":
                return CallsAdded(ready=[CallRecord.from_dict(json.loads(r)) for r in reply[1:]])
            case "superseded":
                return TickSuperseded()
            case "finished":
                return JobEnded()
        raise ValueError(f"add_calls.lua replied {reply[0]!r}")

    def end_tick(self, keys: JobKeys, *, token: str, exchange: dict, counts: bool, output: Any, has_output: bool,
                 usage: dict[str, int], messages: Sequence[dict],
                 events: Sequence[Envelope]) -> TickEnded | TickSuperseded:
        """tick_end.lua: keep the tick's exchange, usage and messages, and give up its lease."""
        reply = self._run(
            "tick_end", [keys.job, keys.tick_lease, keys.exchanges, keys.log, keys.events, keys.status],
            [TickEndArgs(token=token, exchange=dumps(exchange), counts=counts,
                         output=dumps(output) if has_output else None, usage=dict(usage),
                         messages=len(messages)).encode(),
             *(dumps(m) for m in messages), *(entry(e, keys.job_id) for e in events)])
        if reply[0] == "ended":
            return _tick_ended(reply)
        if reply[0] == "superseded":
            return TickSuperseded()
        raise ValueError(f"tick_end.lua replied {reply[0]!r}")

    def trace_context(self, keys: JobKeys, traceparent: str) -> str | None:
        """trace_context.lua: the job's stored traceparent, `traceparent` first if it had none; None: no job."""
        stored = self._run("trace_context", [keys.job], [traceparent])
        return stored if isinstance(stored, str) else None

    def unlease(self, lease_key: str, *, token: str) -> bool:
        """unlease.lua: delete a lease that `token` holds, and nothing else's."""
        return bool(self._run("unlease", [lease_key], [token]))

    # ----------------------------------------------------------------------------------------- budgets

    def reserve_budget(self, keys: JobKeys, key: str, *, budget: Budget, ask: BudgetAsk) -> BudgetReply:
        """budget.lua's reserve: hold what a request may spend against the (root) job's budget, or refuse it."""
        reply = self._run("budget", [keys.job, keys.budget], [BudgetReserveArgs(
            key=key, max_requests=budget.max_requests, max_input_tokens=budget.max_input_tokens,
            max_output_tokens=budget.max_output_tokens, max_cost_nanousd=budget.max_cost_nanousd,
            input_tokens=ask.input_tokens, input_nanousd=ask.input_nanousd, output_tokens=ask.output_tokens,
            min_output_tokens=ask.min_output_tokens, output_nanousd_per_token=float(ask.output_nanousd_per_token),
        ).encode()])
        if reply[0] == "granted":
            return BudgetGranted(output_tokens=int(reply[1]))
        return BudgetRefused(message=str(reply[1]))

    def settle_budget(self, keys: JobKeys, key: str, spend: Spend) -> bool:
        """budget.lua's settle: what the request `key` held becomes what it spent (once)."""
        return bool(self._run("budget", [keys.job, keys.budget], [BudgetSettleArgs(
            key=key, requests=spend.requests, input_tokens=spend.input_tokens, output_tokens=spend.output_tokens,
            cost_nanousd=spend.cost_nanousd).encode()]))

    # -------------------------------------------------------------------------------------- node names

    def node_swap(self, node_key: str, *, expected: str, holder: str, ttl_ms: int, or_absent: bool) -> bool:
        """node_swap.lua: set the claim to `holder` if it still holds `expected` (or nothing, with `or_absent`)."""
        return bool(self._run("node_swap", [node_key], [expected, holder, ttl_ms, int(or_absent)]))


def _claimed(reply: list) -> TickClaimed:
    """tick_begin.lua's claim, with the tick's inputs when it read them."""
    inputs = None if len(reply) < 6 else agent_inputs_of(pairs(reply[2]), reply[3], reply[4], reply[5] or None)
    return TickClaimed(attempt=int(reply[1]), inputs=inputs)


def _tick_ended(reply: list) -> TickEnded:
    """tick_end.lua's end of a tick, with the job when no awaited call is open (and what its end reads, when the tick
    gave the final output)."""
    info = decode_job(pairs(reply[3])) if len(reply) > 3 else None
    finish = None if info is None or len(reply) < 6 else finish_inputs_of(info, reply[4], reply[5])
    return TickEnded(open_calls=int(reply[1]), ticks=int(reply[2]), info=info, finish=finish)


def _submit_args(keys: JobKeys, payload: str, expire_at_ms: int,
                 listing: Listing | None) -> tuple[list[str], list[Any]]:
    """submit.lua's KEYS and ARGV: the job's keys, then its listing's (see the script)."""
    if listing is None or not listing.keys:
        return list(keys.all), [payload, expire_at_ms]
    return [*keys.all, *listing.keys], [payload, expire_at_ms, listing.job_id, *listing.scores]
