"""The state store's contracts: one small protocol per concern, each part of agentq typed against those it uses.

`Store` (`base.py`) is those of a job's state machine at once, what the composition root builds (`StateStore`,
Redis); the contracts of the fleet-wide parts (`FleetStore`, `LimitStore`, `WebhookStore`, ...) live in
`fleet_contracts.py` and are named here too, so callers import every contract from this module. An engine part
names the concerns it touches (the lease keeper a `LeaseStore`, the budget gate a `BudgetStore`, the agent loop
its `AgentStore` of ticks, events, budgets, calls and reads), so what a part may do to a job's state reads from its
signature. The replies of the atomic steps (`Claim`, `Commit`, `Settle`, `Decision`, ...: unions of frozen
records) live in `replies.py`, the records of plain reads in `views.py`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from agentq.errors import JobNotFoundError
from agentq.protocol.admission import AdmissionConfig, AdmissionRequest, Ticket
from agentq.protocol.budgets import Budget, BudgetAsk, Spend
from agentq.protocol.concurrency import ConcurrencyKeys
from agentq.protocol.continuation import CopySource, Seed
from agentq.protocol.envelopes import Envelope
from agentq.protocol.jobs import JobPlan, PlannedCall
from agentq.protocol.records import CallRecord, ErrorInfo, JobInfo, JobRecord
from agentq.protocol.status import CallStatus, JobStatus
from agentq.protocol.tenants import DEFAULT_TENANT
from agentq.protocol.waits import WaitSpec
from agentq.store.fleet_contracts import (
    BatchStore,
    FleetPart,
    FleetStore,
    LimitStore,
    NodeNameStore,
    StatsStore,
    TenantLimitStore,
    WebhookDeliveries,
    WebhookStore,
    WebhookWatch,
)
from agentq.store.replies import (
    BudgetReply,
    Claim,
    Commit,
    Decision,
    EndAhead,
    FinishInputs,
    Settle,
    TickClaim,
    TickEnded,
)
from agentq.store.views import (
    AgentInputs,
    CallTable,
    DeadlineEnd,
    JobHead,
    RelayCursor,
    WaitTaken,
)


class JobStore(Protocol):
    """A job's life as a whole: written at submission (or its rejection recorded), a reviewer's decision, its
    cancellation, its end (`finalize`, the record saved), and what its trace continues."""

    def create_job(self, plan: JobPlan, records: Sequence[CallRecord], *, submitted: Any,
                   events: Sequence[Envelope], parent: dict | None = None, traceparent: str | None = None,
                   tenant: str = DEFAULT_TENANT, admission: AdmissionRequest | None = None,
                   seed: Seed | None = None, start_check_ms: int | None = None) -> bool: ...

    def record_rejection(self, job_id: str, error: ErrorInfo, *, ttl_s: int, tenant: str = DEFAULT_TENANT) -> bool: ...

    def job_tools(self, job_id: str) -> dict[str, dict]: ...

    def adopt_traceparent(self, job_id: str, traceparent: str) -> str | None: ...

    def decide(self, job_id: str, call_id: str, *, decision: str, record: CallRecord | None = None,
               event: Envelope | None = None, messages: Sequence[dict] = (),
               events: Sequence[Envelope] = ()) -> Decision: ...

    def cancel(self, job_id: str, *, event: Envelope) -> tuple[JobStatus, list[str]]: ...

    def finalize(self, job_id: str, *, record: JobRecord, event: Envelope) -> bool: ...

    def save_record(self, job_id: str, record: JobRecord) -> None: ...


class JobReader(Protocol):
    """Reads of a job: its hot fields, status, log, record, the inputs of its end, waiting for its end, listings."""

    def job_info(self, job_id: str) -> JobInfo: ...

    def job_status(self, job_id: str) -> JobStatus: ...

    def read_log(self, job_id: str, start: int = 0) -> list[dict]: ...

    def record(self, job_id: str) -> JobRecord: ...

    def finish_inputs(self, job_id: str) -> FinishInputs: ...

    def wait_finished(self, job_id: str, timeout_s: float) -> JobStatus | None: ...

    def wait_record(self, job_id: str, timeout_s: float) -> JobRecord | None: ...

    def recent_jobs(self, limit: int = 50, *, tenant: str | None = None) -> list[str]: ...

    def missing(self, job_id: str) -> JobNotFoundError: ...


class CopyStore(Protocol):
    """Continuing and forking a job (docs/continue-and-fork.md): its source read whole, threads and forks listed."""

    def copy_source(self, job_id: str) -> CopySource: ...

    def list_copy(self, job_id: str, *, thread: str | None = None, forked_from: str | None = None,
                  expire_at_ms: int) -> None: ...

    def submitted_job(self, job_id: str) -> Any: ...

    def thread_jobs(self, thread: str) -> list[str]: ...

    def forks_of(self, job_id: str) -> list[str]: ...


class CallStore(Protocol):
    """A call's steps (claim, commit, the settle of a call run before its claim, release for a retry) and reads
    of a job's calls."""

    def claim(self, job_id: str, call_id: str, *, token: str, lease_ms: int, log_offset: int = -1,
              job_started: Envelope | None = None, record: CallRecord | None = None, record_sha: str = "",
              tool_sha: str = "", start_events: Sequence[Envelope] = (), expect_started: bool = False,
              last_call: bool = False, tools_at: str = "") -> Claim: ...

    def commit(self, job_id: str, call_id: str, *, token: str, status: CallStatus, messages: Sequence[dict] = (),
               events: Sequence[Envelope] = (), awaited: bool | None = None,
               ahead: EndAhead | None = None, lease_ms: int = 0) -> Commit: ...

    def settle(self, job_id: str, call_id: str, *, record_sha: str, tool: str, tool_sha: str,
               job_started: Envelope | None, status: CallStatus, messages: Sequence[dict] = (),
               events: Sequence[Envelope] = ()) -> Settle: ...

    def release_for_retry(self, job_id: str, call_id: str, *, token: str,
                          event: Envelope | None = None) -> bool: ...

    def unclaim(self, job_id: str, call_id: str, *, token: str) -> bool: ...

    def call_records(self, job_id: str, call_ids: Sequence[str] | None = None) -> dict[str, CallRecord]: ...

    def call_statuses(self, job_id: str, call_ids: Sequence[str] | None = None) -> dict[str, CallStatus]:
        """Every call's status, or only those of `call_ids` (an unknown one is left out)."""
        ...

    def dependents(self, job_id: str, call_id: str) -> list[str]: ...

    def call_table(self, job_id: str) -> CallTable: ...


class LeaseStore(Protocol):
    """The leases of running attempts: renewed while a process holds them, held by a module call."""

    def renew_leases(self, job_id: str, leases: dict[str, str], lease_ms: int) -> int: ...

    def renew_all(self, held: Mapping[str, Mapping[str, str]], lease_ms: int) -> int: ...

    def hold_lease(self, job_id: str, call_id: str, *, token: str) -> None: ...


class TickStore(Protocol):
    """An agent job's ticks: begun under a lease, their calls added as they stream, ended with the exchange."""

    def begin_tick(self, job_id: str, *, exchanges: int, token: str, lease_ms: int,
                   job_started: Envelope | None = None, read_from: tuple[int, int] | None = None) -> TickClaim: ...

    def end_ticking(self, job_id: str) -> None: ...

    def release_tick(self, job_id: str, *, token: str) -> None: ...

    def agent_inputs(self, job_id: str, *, log_from: int = 0, exchanges_from: int = 0) -> AgentInputs: ...

    def set_job_tools(self, job_id: str, composed: dict[str, dict]) -> None: ...

    def add_calls(self, job_id: str, *, token: str, records: Sequence[CallRecord],
                  plans: Sequence[PlannedCall]) -> list[CallRecord] | None: ...

    def end_tick(self, job_id: str, *, token: str, exchange: dict, counts: bool, output: Any = None,
                 has_output: bool = False, usage: dict[str, int] | None = None, messages: Sequence[dict] = (),
                 events: Sequence[Envelope] = ()) -> TickEnded | None: ...


class EventStore(Protocol):
    """A job's event stream: appended, read, and a module child's events relayed to its parent."""

    def add_events(self, job_id: str, envelopes: Sequence[Envelope]) -> None: ...

    def read_events(self, job_id: str, after: str = "0-0", *, block_ms: int | None = None,
                    count: int | None = None) -> list[tuple[str, dict]]: ...

    def relay_cursor(self, job_id: str) -> RelayCursor | None: ...

    def write_relayed(self, job_id: str, *, parent_id: str, cursor: str, to: str,
                      envelopes: Sequence[dict[str, Any]]) -> bool: ...


class TenantStore(Protocol):
    """Jobs' concurrency keys (a tenant's): admitted, released, swept; a waiting job started."""

    def admit_concurrency(self, tenant: str, job_id: str, keys: ConcurrencyKeys, *,
                          expire_at_ms: int) -> list[str]: ...

    def release_concurrency(self, tenant: str, job_id: str) -> list[str]: ...

    def sweep_concurrency(self) -> dict[str, list[str]]: ...

    def start_waiting(self, job_id: str, *, event: Envelope) -> bool: ...


class AdmissionStore(Protocol):
    """The fair admission of ready calls (one step), its sweep's reads and its turn."""

    def admit_calls(self, tickets: Sequence[Ticket], config: AdmissionConfig, *, ended: Sequence[str] = (),
                    fill: Sequence[str] = ()) -> list[str]: ...

    def admitted_before(self, before_ms: int, limit: int = 500) -> list[str]: ...

    def touch_admitted(self, members: Sequence[str]) -> None: ...

    def parked_queues(self) -> list[str]: ...

    def admission_counts(self) -> dict[str, int]: ...

    def take_admission_sweep(self, holder: str, ttl_ms: int) -> bool: ...

    def swap_fleet_seen(self, seen: str) -> str | None: ...

    def leases_lapsed(self, calls: Sequence[tuple[str, str]]) -> set[tuple[str, str]]: ...

    def admission_members(self, members: Sequence[str]) -> set[str]: ...


class BudgetStore(Protocol):
    """A job's budget (shared by its module children) and the usage it reports."""

    def reserve_budget(self, job_id: str, key: str, *, budget: Budget, ask: BudgetAsk) -> BudgetReply: ...

    def settle_budget(self, job_id: str, key: str, spend: Spend) -> bool: ...

    def add_usage(self, job_id: str, usage: dict[str, int]) -> None: ...


class WaitStore(Protocol):
    """Waits (docs/waits.md): open a wait call, decide how it ends, deliver events and signals, take due timers."""

    def open_wait(self, job_id: str, call_id: str, *, token: str, spec: WaitSpec, opened_ms: int, tenant: str,
                  event: Envelope) -> str: ...

    def take_wait(self, job_id: str, call_id: str, *, now_ms: int, sleep_output: Any) -> WaitTaken: ...

    def wake_wait(self, job_id: str, call_id: str, *, event_name: str, event: dict) -> bool: ...

    def send_signal(self, job_id: str, name: str, signal: dict) -> tuple[str, str | None]: ...

    def event_waiters(self, tenant: str, event_name: str, data: Any) -> list[tuple[str, str]]: ...

    def first_sight(self, tenant: str, event_id: str) -> bool: ...

    def take_due_timers(self, *, now_ms: int, limit: int, claim_ms: int) -> list[tuple[str, str]]: ...

    def retime_wait(self, job_id: str, call_id: str, due_ms: float) -> None: ...

    def close_wait(self, job_id: str, call_id: str, *, tenant: str | None, spec: WaitSpec | None) -> None: ...

    def drop_event_wait(self, tenant: str, event_name: str, digest: str, member: str) -> None: ...


class JobTimerStore(Protocol):
    """A job's own timers (docs/waits.md#deadlines): its deadline, the start of a job submitted for later."""

    def set_job_timer(self, job_id: str, kind: str, due_ms: int, *, nx: bool = False) -> None: ...

    def start_scheduled(self, job_id: str, *, waiting: bool, event: Callable[[JobStatus], Envelope]) -> bool: ...

    def drop_job_timer(self, job_id: str, kind: str) -> None: ...

    def set_start_timeouts(self, job_id: str, due_ms: Mapping[str, int]) -> None: ...

    def take_untaken(self, job_id: str, call_id: str, *, token: str, lease_ms: int) -> bool: ...

    def end_by_deadline(self, job_id: str, *, record: JobRecord, event: Envelope, log_length: int) -> DeadlineEnd: ...


class Connection(Protocol):
    """The connection itself."""

    def ping(self) -> None: ...

    def close(self) -> None: ...

    def single_server(self, url: str) -> bool:
        """Whether `url` names this store's own single Redis server (not a cluster, not a Sentinel group): a Redis
        broker at `url` keeps its lists on the store's server, where the store's steps can reach them."""
        ...


class RestartStore(Protocol):
    """What the admission's sweep reads after a restart of the store's server (its run id changed), where the
    broker is that server too: the tasks the broker still holds."""

    def admission_runs(self) -> tuple[str, str | None, int]:
        """The server's run id, the one the sweep last looked at the queues for (None: never) and how long the
        server has run (ms)."""
        ...

    def note_admission_run(self, run: str) -> None:
        """The sweep looked at the queues for the server's run `run`."""
        ...

    def broker_holds(self, lists: Sequence[str], unacked: str) -> set[str]:
        """The ids of the tasks a Redis broker on the store's server holds: on `lists` (queues), or taken and not
        acknowledged yet (the hash `unacked`), read at once."""
        ...

    def active_job_heads(self, limit: int) -> list[JobHead]:
        """What tells whether an engine task of an active job is due: its status, kind, open calls, tick in flight
        and lease, model requests and ready calls; of at most `limit` jobs of the fleet's active set."""
        ...


__all__ = [
    "AdmissionStore",
    "BatchStore",
    "BudgetStore",
    "CallStore",
    "Connection",
    "EventStore",
    "FleetPart",
    "FleetStore",
    "JobReader",
    "JobStore",
    "JobTimerStore",
    "LeaseStore",
    "LimitStore",
    "NodeNameStore",
    "RestartStore",
    "StatsStore",
    "TenantLimitStore",
    "TenantStore",
    "TickStore",
    "WaitStore",
    "WebhookDeliveries",
    "WebhookStore",
    "WebhookWatch",
]
