"""The replies of the store's atomic steps, as frozen records.

Each Lua step (`lua/*.lua`) answers with a flat array; `store/scripts.py` is the one place that reads those
arrays and turns them into the records below. A step with several outcomes answers with one of a union of records
(`Claim`, `Commit`, `Settle`, `TickClaim`, `Decision`, `CancelReply`): callers `match` on the record's type. Every
variant also names its outcome in a class-level `outcome` (an enum value), for logs and for code that only tells
outcomes apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import ClassVar, NamedTuple

from agentq.protocol.envelopes import Envelope
from agentq.protocol.records import CallRecord, JobInfo, JobKind, JobRecord
from agentq.protocol.status import CallStatus, JobStatus
from agentq.store.views import AgentInputs

# ------------------------------------------------------------------------------------------------ claim


class ClaimOutcome(StrEnum):
    CLAIMED = "claimed"  # this attempt owns the call
    FINISHED = "finished"  # the call already ended (`status`)
    LEASED = "leased"  # another attempt is running it (`lease_left_ms`)
    CANCELED = "canceled"  # its job was canceled
    NOT_READY = "not_ready"  # it still waits on other calls or on approval (`status`)
    MISSING = "missing"  # no such call
    UNSTARTED = "unstarted"  # the caller passed no job-started event but the job has not started: claim again


@dataclass(frozen=True)
class Claimed:
    """This attempt owns the call (claim.lua)."""

    outcome: ClassVar[ClaimOutcome] = ClaimOutcome.CLAIMED
    record: CallRecord  # the stored record: what runs
    attempt: int
    log_length: int | None = None  # the log's length, when the caller asked for its tail (an offset)
    log_tail: list[dict] = field(default_factory=list)  # the log's messages from the caller's offset on
    tool: dict | None = None  # the call's tool schema, None when the caller's copy is current
    tool_sha: str = ""  # SHA-1 of the stored schema `tool` was decoded from (when the reply carried it)
    announced: bool = False  # the claim published the caller's start events
    record_replaced: bool = False  # the record the task carried was not the stored one: the stored one runs
    lost: int = 0  # attempts of this call lost so far: their process died before they ended
    last: LastCall | None = None  # asked for, and the call is its plan job's one open awaited call
    # a plan job's `created_at` ('' when the caller passed it, or another kind of job): its tools never change, a
    # later claim passes it (claim.lua)
    tools_at: str = ""


@dataclass(frozen=True)
class LastCall:
    """What a claim sends when its call is the one open awaited call of an active plan job (claim.lua): what
    finalizing the job reads, and the SHA-1 of the job hash's fields it read, so the call's commit can write the
    job's end its caller builds from them (`EndAhead`) if nothing changed meanwhile."""

    inputs: FinishInputs
    digest: str


@dataclass(frozen=True)
class ClaimLeased:
    outcome: ClassVar[ClaimOutcome] = ClaimOutcome.LEASED
    lease_left_ms: int  # how long the other attempt's lease (or a restart's grace) still runs


@dataclass(frozen=True)
class ClaimFinished:
    outcome: ClassVar[ClaimOutcome] = ClaimOutcome.FINISHED
    status: CallStatus


@dataclass(frozen=True)
class ClaimNotReady:
    outcome: ClassVar[ClaimOutcome] = ClaimOutcome.NOT_READY
    status: CallStatus


@dataclass(frozen=True)
class ClaimCanceled:
    outcome: ClassVar[ClaimOutcome] = ClaimOutcome.CANCELED


@dataclass(frozen=True)
class ClaimMissing:
    outcome: ClassVar[ClaimOutcome] = ClaimOutcome.MISSING


@dataclass(frozen=True)
class ClaimUnstarted:
    outcome: ClassVar[ClaimOutcome] = ClaimOutcome.UNSTARTED


Claim = Claimed | ClaimLeased | ClaimFinished | ClaimNotReady | ClaimCanceled | ClaimMissing | ClaimUnstarted

# ----------------------------------------------------------------------------------------------- commit


class FinishInputs(NamedTuple):
    """What finalizing a job reads (`StateStore.finish_inputs`), in one round trip or in a commit's reply."""

    info: JobInfo
    log: list[dict]
    statuses: dict[str, CallStatus]


@dataclass(frozen=True)
class EndAhead:
    """A plan job's end, built from a `LastCall` and its call's outcome, for the call's commit to write (commit.lua)
    as `finalize` would: when the commit ends the job, the job hash is the one `digest` names and the log is the
    `log_length` messages the claim sent plus the commit's own."""

    digest: str
    log_length: int
    record: JobRecord
    event: Envelope


class CommitOutcome(StrEnum):
    COMMITTED = "committed"
    DUPLICATE = "duplicate"  # the call was committed already (a redelivered task)
    SUPERSEDED = "superseded"  # another attempt took the call over after this one's lease expired


@dataclass(frozen=True)
class Committed:
    """The call's outcome was written (commit.lua, settle.lua); `released` are the calls that became ready."""

    outcome: ClassVar[CommitOutcome] = CommitOutcome.COMMITTED
    open_calls: int
    job_status: JobStatus
    kind: JobKind
    released: list[CallRecord] = field(default_factory=list)
    ticking: bool = False  # an agent tick is in flight: it takes the job's next step when it ends
    finish_inputs: FinishInputs | None = None  # the last awaited call of a plan job: what finalizing it reads
    finalized: bool = False  # the commit wrote the job's end its caller built (`EndAhead`)


@dataclass(frozen=True)
class CommitDuplicate:
    outcome: ClassVar[CommitOutcome] = CommitOutcome.DUPLICATE


@dataclass(frozen=True)
class CommitSuperseded:
    outcome: ClassVar[CommitOutcome] = CommitOutcome.SUPERSEDED


Commit = Committed | CommitDuplicate | CommitSuperseded

# ----------------------------------------------------------------------------------------------- settle


class SettleOutcome(StrEnum):
    COMMITTED = "committed"  # claimed and committed: `Settled.commit` tells what the commit released
    OTHER = "other"  # not a ready call's first attempt, or not the stored record: claim and commit as usual
    STALE_TOOL = "stale_tool"  # the caller's tool is not the job's (`SettleStaleTool.tool`)
    UNSTARTED = "unstarted"  # the caller took the job for started, it is not: settle again with job.started


@dataclass(frozen=True)
class Settled:
    outcome: ClassVar[SettleOutcome] = SettleOutcome.COMMITTED
    commit: Committed


@dataclass(frozen=True)
class SettleOther:
    outcome: ClassVar[SettleOutcome] = SettleOutcome.OTHER


@dataclass(frozen=True)
class SettleStaleTool:
    outcome: ClassVar[SettleOutcome] = SettleOutcome.STALE_TOOL
    tool: dict  # the job's tool schema
    tool_sha: str  # SHA-1 of its stored JSON


@dataclass(frozen=True)
class SettleUnstarted:
    outcome: ClassVar[SettleOutcome] = SettleOutcome.UNSTARTED


Settle = Settled | SettleOther | SettleStaleTool | SettleUnstarted

# ------------------------------------------------------------------------------------------- agent ticks


class TickOutcome(StrEnum):
    CLAIMED = "claimed"  # this task makes the job's next model request
    FINISHED = "finished"  # the job ended
    STALE = "stale"  # the request this task was sent for was made already
    LEASED = "leased"  # another task is making it (`lease_left_ms`)
    BUSY = "busy"  # calls are still open: the last one's commit takes the next step
    MISSING = "missing"


@dataclass(frozen=True)
class TickClaimed:
    outcome: ClassVar[TickOutcome] = TickOutcome.CLAIMED
    attempt: int  # the attempt of this request
    # what the tick reads (`Store.agent_inputs`), read by the same step when the claim asked (`read_from`)
    inputs: AgentInputs | None = field(default=None, compare=False)


@dataclass(frozen=True)
class TickLeased:
    outcome: ClassVar[TickOutcome] = TickOutcome.LEASED
    lease_left_ms: int


@dataclass(frozen=True)
class TickFinished:
    outcome: ClassVar[TickOutcome] = TickOutcome.FINISHED
    status: JobStatus


@dataclass(frozen=True)
class TickStale:
    outcome: ClassVar[TickOutcome] = TickOutcome.STALE


@dataclass(frozen=True)
class TickBusy:
    outcome: ClassVar[TickOutcome] = TickOutcome.BUSY
    open_calls: int


@dataclass(frozen=True)
class TickMissing:
    outcome: ClassVar[TickOutcome] = TickOutcome.MISSING


TickClaim = TickClaimed | TickLeased | TickFinished | TickStale | TickBusy | TickMissing


@dataclass(frozen=True)
class TickEnded:
    """tick_end.lua's reply: the job can take its next step now when no awaited call is open."""

    open_calls: int
    ticks: int  # ticks so far
    info: JobInfo | None = field(default=None, compare=False)  # the job as the step left it (None: not read)
    finish: FinishInputs | None = field(default=None, compare=False)  # what the job's end reads (the final output)


@dataclass(frozen=True)
class CallsAdded:
    """add_calls.lua's reply: the records of the written calls that are ready now."""

    ready: list[CallRecord]


@dataclass(frozen=True)
class TickSuperseded:
    """The tick's lease is no longer the caller's (tick_end.lua, add_calls.lua)."""


@dataclass(frozen=True)
class JobEnded:
    """The job is no longer active (add_calls.lua)."""


# --------------------------------------------------------------------------------------- approvals, cancel


@dataclass(frozen=True)
class Decided:
    """The reviewer's decision was taken: `record` is the call's record after it (an edit's)."""

    record: CallRecord


@dataclass(frozen=True)
class RejectedCall:
    """The reviewer's rejection was taken and the call's failure committed in the same step: `commit` is that
    commit's reply (what it released, the job's next step)."""

    commit: Committed


@dataclass(frozen=True)
class DecisionConflict:
    """The call is not awaiting approval (or its job ended): `status` is the call's."""

    status: CallStatus


@dataclass(frozen=True)
class DecisionMissing:
    """No such call."""


Decision = Decided | RejectedCall | DecisionConflict | DecisionMissing


@dataclass(frozen=True)
class Canceled:
    """The job is canceled now: `ready` are the calls that were ready (their tasks may still be queued)."""

    ready: list[str]


@dataclass(frozen=True)
class AlreadyEnded:
    status: JobStatus  # the final status the job had already


@dataclass(frozen=True)
class CancelMissing:
    pass


CancelReply = Canceled | AlreadyEnded | CancelMissing


# ----------------------------------------------------------------------------------------------- budgets


@dataclass(frozen=True)
class BudgetGranted:
    """The request may be sent, writing at most `output_tokens` (budget.lua's reserve)."""

    output_tokens: int


@dataclass(frozen=True)
class BudgetRefused:
    """The request would cross the budget (or the budget ran out before): not sent. `message` names the limit."""

    message: str


BudgetReply = BudgetGranted | BudgetRefused



# ----------------------------------------------------------------------------------------- rate limits


@dataclass(frozen=True)
class LimitGo:
    """The request may be sent now (llm_take.lua): its share was taken, or its ticket is due; `started`: the
    events it starts with were appended to its job's stream in the same step."""

    started: bool = False


@dataclass(frozen=True)
class LimitWait:
    """The request must wait `wait_ms` before it is sent (llm_take.lua): its share is taken, its ticket holds its
    place; it is sent when it asks again with the same place."""

    wait_ms: int


LimitReply = LimitGo | LimitWait


@dataclass(frozen=True)
class TenantRefusal:
    """tenant_admit.lua refused a job: its tenant has `max_active_jobs` active (`by_active`; no step knows when one
    ends, so `wait_s` is a hint), or is over its rate of jobs (`wait_s`: until the next one is admitted)."""

    by_active: bool
    wait_s: float
