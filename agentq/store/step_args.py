"""The named records the store's steps with many arguments take, each sent as one JSON object (ARGV[1]) that the
script decodes with cjson, its keys named as the fields here; lists of variable length (event entries, messages)
follow it as plain ARGV values, so they are not encoded twice."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from agentq.protocol.digests import dumps, now_iso

if TYPE_CHECKING:
    from agentq.protocol.records import JobRecord


@dataclass(frozen=True, slots=True)
class ClaimArgs:
    """claim.lua's record: what one attempt asks of its call.

    `job_started`: the packed job.started entry ('': none; '!': none, the caller takes the job for started);
    `log_offset`: where the log's tail is read from (-1: the log is not read); `record_sha`, `tool_sha`: the SHA-1
    of the caller's call record and of its copy of the call's tool ('': none); `tool`: the tool of the caller's
    record (trusted only when that record is the stored one); `last_call`: the caller would finalize the job in
    the call's commit if it is the job's last awaited call; `tools_at`: the `created_at` of the plan job an earlier
    claim found the caller's copy of the tool current for ('': none; `Claimed.tools_at`); `unstarted`: the member of
    the job's `@unstarted` timer, dropped if this claim starts the job (None: the timers are not passed)."""

    call_id: str
    token: str
    lease_ms: int
    now: str
    job_started: str
    log_offset: int
    record_sha: str
    tool_sha: str
    tool: str
    last_call: bool
    tools_at: str = ""
    unstarted: str | None = None

    def encode(self) -> str:
        """The record as claim.lua's ARGV[1]."""
        fields = {"call_id": self.call_id, "token": self.token, "lease_ms": self.lease_ms, "now": self.now,
                  "job_started": self.job_started, "log_offset": self.log_offset, "record_sha": self.record_sha,
                  "tool_sha": self.tool_sha, "tool": self.tool, "last_call": self.last_call}
        if self.tools_at:
            fields["tools_at"] = self.tools_at
        if self.unstarted is not None:
            fields["unstarted"] = self.unstarted
        return dumps(fields)


@dataclass(frozen=True, slots=True)
class StartCheck:
    """A job's `@unstarted` timer (`store/job_timers.py` `unstarted_check`), for the step that starts the job to drop
    in the same round trip, on a single Redis: its `keys` (the fleet's timers) go after the step's own KEYS, its
    `member` (the job's timer) in the step's record."""

    timers: str
    member: str

    @property
    def keys(self) -> tuple[str, ...]:
        return (self.timers,)


@dataclass(frozen=True, slots=True)
class EndCount:
    """The metrics' count of a job's end (`JobCounts.count_end`) for the step that ends the job to write in the same
    round trip, on a single Redis (`JobCounts.in_step`; `count_end` in _ended.lua): the job leaves the sets of
    `keys` but the last (the active jobs, the approvals, its tenant's active jobs) and is counted once in each of
    the `totals` fields of the last (the job totals)."""

    job_id: str
    keys: tuple[str, ...]
    totals: tuple[str, ...]

    def fields(self) -> dict[str, object]:
        """The record's `count`, its keys going after the step's own KEYS."""
        return {"job": self.job_id, "totals": list(self.totals)}


@dataclass(frozen=True, slots=True)
class FinalizeArgs:
    """finalize.lua's record: a job's end (`status`, its `record` JSON, `finished_at`, `event`: the packed
    job.finished entry), and its `count` on a single Redis (None: counted after the step). A commit that ends its
    job sends the same end (`EndingArgs`)."""

    status: str
    record: str
    finished_at: str
    event: str
    count: EndCount | None = None

    @classmethod
    def of(cls, record: JobRecord, event: str, count: EndCount | None = None) -> FinalizeArgs:
        """The end of the job whose final record is `record`, its job.finished entry `event` (packed)."""
        return cls(status=record.status.value, record=dumps(record.to_dict()),
                   finished_at=record.finished_at or now_iso(), event=event, count=count)

    def fields(self) -> dict[str, object]:
        fields: dict[str, object] = {"status": self.status, "record": self.record, "finished_at": self.finished_at,
                                     "event": self.event}
        if self.count is not None:
            fields["count"] = self.count.fields()
        return fields

    def encode(self) -> str:
        return dumps(self.fields())


@dataclass(frozen=True, slots=True)
class EndingArgs:
    """The job's end a commit's caller built from what its claim sent (`EndAhead`): written by commit.lua when the
    commit ends the job and the job hash (`digest`: the SHA-1 of its fields the claim sent) and the log
    (`log_length`) are as the claim read them plus this outcome. `end`: what finalize.lua would write, with its
    `count` on a single Redis (None: the caller counts it after the step)."""

    digest: str
    log_length: int
    end: FinalizeArgs

    def fields(self) -> dict[str, object]:
        return {"digest": self.digest, "log_length": self.log_length, **self.end.fields()}


@dataclass(frozen=True, slots=True)
class CommitArgs:
    """commit.lua's record: a running call's outcome. `awaited`: whether the call is awaited (the caller's copy of
    the stored record; None: the script reads the stored record); `ending`: the job's end, or None; `messages`:
    how many of the ARGV values after the record are messages (the rest are events)."""

    call_id: str
    token: str
    status: str
    awaited: bool | None
    ending: EndingArgs | None
    messages: int
    lease_ms: int = 0  # given back to another attempt that took the call over (0: LEASE_KEPT_MS)

    def encode(self) -> str:
        """The record as commit.lua's ARGV[1] (no key for a None: cjson would decode it as a value, not nil)."""
        fields: dict[str, object] = {"call_id": self.call_id, "token": self.token, "status": self.status,
                                     "messages": self.messages}
        if self.awaited is not None:
            fields["awaited"] = self.awaited
        if self.ending is not None:
            fields["ending"] = self.ending.fields()
        if self.lease_ms:
            fields["lease_ms"] = self.lease_ms
        return dumps(fields)


@dataclass(frozen=True, slots=True)
class SettleArgs:
    """settle.lua's record: a ready call's first attempt, run already. `record_sha`, `tool_sha`: the SHA-1 of the
    caller's call record and its copy of the tool `tool`; `job_started`: the packed job.started entry ('!': none,
    the caller takes the job for started); `messages`: how many of the ARGV values after the record are
    messages (the rest are events); `unstarted`: as `ClaimArgs.unstarted`."""

    call_id: str
    record_sha: str
    tool: str
    tool_sha: str
    now: str
    job_started: str
    status: str
    messages: int
    unstarted: str | None = None

    def encode(self) -> str:
        fields = {"call_id": self.call_id, "record_sha": self.record_sha, "tool": self.tool,
                  "tool_sha": self.tool_sha, "now": self.now, "job_started": self.job_started,
                  "status": self.status, "messages": self.messages}
        if self.unstarted is not None:
            fields["unstarted"] = self.unstarted
        return dumps(fields)


@dataclass(frozen=True, slots=True)
class DecideArgs:
    """decide.lua's record: a reviewer's `decision` ('approve' | 'edit' | 'reject') on a call awaiting approval.
    `record`: the edited record JSON ('' unless edit); `event`: the packed entry to publish ('': none);
    `messages`: how many of the failure's messages follow (a rejection's, committed in the same step)."""

    call_id: str
    decision: str
    record: str
    event: str
    messages: int = 0

    def encode(self) -> str:
        return dumps({"call_id": self.call_id, "decision": self.decision, "record": self.record,
                      "event": self.event, "messages": self.messages})


@dataclass(frozen=True, slots=True)
class TickBeginArgs:
    """tick_begin.lua's record: an agent tick's claim. `exchanges`: how many exchanges the tick expects to find (a
    stale task finds more); `job_started`: the packed job.started entry ('': none); `read_from`: where the tick's
    read of its inputs starts in the log and in the exchanges (None: no read); `unstarted`: the member of the job's
    `@unstarted` timer, dropped when this tick starts the job (None: the timers are not passed, on a cluster)."""

    exchanges: int
    token: str
    lease_ms: int
    now: str
    job_started: str
    read_from: tuple[int, int] | None
    unstarted: str | None = None

    def encode(self) -> str:
        fields: dict[str, object] = {"exchanges": self.exchanges, "token": self.token, "lease_ms": self.lease_ms,
                                     "now": self.now, "job_started": self.job_started}
        if self.read_from is not None:
            fields["read_from"] = {"log": self.read_from[0], "exchanges": self.read_from[1]}
        if self.unstarted is not None:
            fields["unstarted"] = self.unstarted
        return dumps(fields)


@dataclass(frozen=True, slots=True)
class TickEndArgs:
    """tick_end.lua's record: an agent tick's end. `exchange`: its exchange JSON; `counts`: the exchange counts as
    a tick (not for an answer sent back); `output`: the final output JSON (None: none); `usage`: what the tick's
    request used; `messages`: how many of the ARGV values after the record are log messages (the rest are
    events)."""

    token: str
    exchange: str
    counts: bool
    output: str | None
    usage: dict[str, int]
    messages: int

    def encode(self) -> str:
        fields: dict[str, object] = {"token": self.token, "exchange": self.exchange, "counts": self.counts,
                                     "usage": self.usage, "messages": self.messages}
        if self.output is not None:
            fields["output"] = self.output
        return dumps(fields)


@dataclass(frozen=True, slots=True)
class BudgetReserveArgs:
    """budget.lua's reserve: hold what the request `key` may spend. The limits (None: none) and the ask: its input
    tokens and their cost, the output tokens it wants (its max_tokens), the fewest worth sending it for, the cost
    of one output token (nano-dollars)."""

    key: str
    max_requests: int | None
    max_input_tokens: int | None
    max_output_tokens: int | None
    max_cost_nanousd: int | None
    input_tokens: int
    input_nanousd: int
    output_tokens: int
    min_output_tokens: int
    output_nanousd_per_token: float

    def encode(self) -> str:
        limits = {"max_requests": self.max_requests, "max_input_tokens": self.max_input_tokens,
                  "max_output_tokens": self.max_output_tokens, "max_cost_nanousd": self.max_cost_nanousd}
        return dumps({"op": "reserve", "key": self.key, **{k: v for k, v in limits.items() if v is not None},
                      "input_tokens": self.input_tokens, "input_nanousd": self.input_nanousd,
                      "output_tokens": self.output_tokens, "min_output_tokens": self.min_output_tokens,
                      "output_nanousd_per_token": self.output_nanousd_per_token})


@dataclass(frozen=True, slots=True)
class BudgetSettleArgs:
    """budget.lua's settle: what the request `key` held becomes what it spent."""

    key: str
    requests: int
    input_tokens: int
    output_tokens: int
    cost_nanousd: int

    def encode(self) -> str:
        return dumps({"op": "settle", "key": self.key, "requests": self.requests, "input_tokens": self.input_tokens,
                      "output_tokens": self.output_tokens, "cost_nanousd": self.cost_nanousd})


@dataclass(frozen=True, slots=True)
class Listing:
    """A new job's fleet-wide entries (`keys`, each with its score in `scores`): what submit.lua adds (ZADD NX) once
    it wrote job `job_id`, on a single Redis; on a cluster, the submission's pipeline after the script."""

    job_id: str
    keys: tuple[str, ...]
    scores: tuple[float, ...]


# The kinds of a model's rate-limit buckets, in the order `ModelLimits.per_minute` and `LimitAsk.amounts` give
# them (`_buckets.lua`'s KINDS): a rate-limit record names each kind's values by the kind.
BUCKET_KINDS = ("requests", "input_tokens", "output_tokens")


@dataclass(frozen=True, slots=True)
class LlmTakeArgs:
    """llm_take.lua's record: a model request's take. `place`: what names the request across its attempts (its
    ticket); `idle_ms`: the expiry of an idle bucket; per kind (`BUCKET_KINDS`), `limits`: the configured limit
    per minute (0: none), `amounts`: what the request takes. The events it starts with follow the record as plain
    ARGV values."""

    place: str
    idle_ms: int
    limits: tuple[int, ...]
    amounts: tuple[int, ...]

    def encode(self) -> str:
        kinds = {kind: {"limit": limit, "amount": amount}
                 for kind, limit, amount in zip(BUCKET_KINDS, self.limits, self.amounts, strict=True)}
        return dumps({"place": self.place, "idle_ms": self.idle_ms, **kinds})


@dataclass(frozen=True, slots=True)
class KindSettle:
    """What a model request taught about one kind of its model's buckets: the configured `limit` per minute (0:
    none), the `refund` given back (negative: taken), the limit (`seen_limit`) and the remaining capacity
    (`seen_remaining`) the API's headers gave (None: not given)."""

    limit: int
    refund: int
    seen_limit: int | None
    seen_remaining: int | None

    def fields(self) -> dict[str, int]:
        fields = {"limit": self.limit, "refund": self.refund}
        if self.seen_limit is not None:
            fields["seen_limit"] = self.seen_limit
        if self.seen_remaining is not None:
            fields["seen_remaining"] = self.seen_remaining
        return fields


@dataclass(frozen=True, slots=True)
class LlmSettleArgs:
    """llm_settle.lua's record: what a model request taught. `idle_ms`: the expiry of an idle bucket; `pause_ms`:
    how long the model is paused for the fleet (0: no pause); `kinds`: one `KindSettle` per kind, in the order of
    `BUCKET_KINDS`."""

    idle_ms: int
    pause_ms: int
    kinds: tuple[KindSettle, ...]

    def encode(self) -> str:
        kinds = {kind: settle.fields() for kind, settle in zip(BUCKET_KINDS, self.kinds, strict=True)}
        return dumps({"idle_ms": self.idle_ms, "pause_ms": self.pause_ms, **kinds})


@dataclass(frozen=True, slots=True)
class TenantAdmitArgs:
    """tenant_admit.lua's record: a limited tenant's job to admit. `expire_at_s`: the job's expiry (unix s);
    `max_active`: the tenant's cap of active jobs (0: none); `interval_ms`, `burst`: its rate of jobs (one every
    `interval_ms` after a burst of `burst`; interval 0: no rate)."""

    job_id: str
    expire_at_s: float
    max_active: int
    interval_ms: int
    burst: int

    def encode(self) -> str:
        return dumps({"job_id": self.job_id, "expire_at_s": self.expire_at_s, "max_active": self.max_active,
                      "interval_ms": self.interval_ms, "burst": self.burst})


@dataclass(frozen=True, slots=True)
class ConcurrencyArgs:
    """concurrency.lua's record. `prefix`: that of the tenant's other keys; `op`: 'admit' | 'release' | 'promote';
    `job_id`: the job ('' for promote); `keys`: admit: the job's [key, limit] pairs, promote: the keys to look at
    (None for release); `expire_at_s`: admit: the job's expiry (unix s)."""

    prefix: str
    op: str
    job_id: str = ""
    keys: list | None = None
    expire_at_s: float | None = None

    def encode(self) -> str:
        fields: dict[str, object] = {"prefix": self.prefix, "op": self.op, "job_id": self.job_id}
        if self.keys is not None:
            fields["keys"] = self.keys
        if self.expire_at_s is not None:
            fields["expire_at_s"] = self.expire_at_s
        return dumps(fields)
