"""`Store`: the job-step facade, every contract of a job's state machine at once (`contracts.py`).

`StateStore` (Redis, `state.py`) is the implementation, constructed only by the composition root
(`runtime/root.py`), which hands each part the store typed as the contracts that part uses; the fleet-wide parts
(the fleet, the models' limits, the tenants' job limits, the metrics' reads, webhooks) are classes of their own over
the same connection (`part.py`), built beside it. Contract tests
(`tests/runtime/test_store_contract*.py`) run every step on real Redis and Redis Cluster.

The replies of the atomic steps (`Claim`, `Commit`, `Settle`, `Decision`, ...: unions of frozen records) live in
`replies.py` and the records of plain reads (`CallTable`, `AgentInputs`, `WorkerBeat`, `FleetStats`,
`RelayCursor`) in `views.py`; code written against the contracts needs no import from the Redis implementation.
"""

from __future__ import annotations

from typing import Protocol

from agentq.store.contracts import (
    AdmissionStore,
    BudgetStore,
    CallStore,
    Connection,
    CopyStore,
    EventStore,
    JobReader,
    JobStore,
    JobTimerStore,
    LeaseStore,
    RestartStore,
    TenantStore,
    TickStore,
    WaitStore,
)
from agentq.store.replies import (
    Claim,
    ClaimOutcome,
    Commit,
    CommitOutcome,
    Decision,
    EndAhead,
    FinishInputs,
    Settle,
    SettleOutcome,
    TickClaim,
    TickEnded,
)
from agentq.store.resume_contract import ResumeStore
from agentq.store.views import AgentInputs, CallTable, FleetStats, RelayCursor, WorkerBeat

__all__ = ["AgentInputs", "CallTable", "Claim", "ClaimOutcome", "Commit", "CommitOutcome", "Decision", "EndAhead",
           "FinishInputs", "FleetStats", "RelayCursor", "Settle", "SettleOutcome", "Store", "TickClaim", "TickEnded",
           "WorkerBeat"]


class Store(JobStore, JobReader, CopyStore, CallStore, LeaseStore, TickStore, EventStore, TenantStore, AdmissionStore,
            BudgetStore, WaitStore, JobTimerStore, RestartStore, ResumeStore, Connection,
            Protocol):
    """The job-step facade: every contract of a job's state machine. The fleet-wide parts (`FleetPart`,
    `LimitStore`, `TenantLimitStore`, `StatsStore`, `WebhookStore`) are built beside it over the same connection."""
