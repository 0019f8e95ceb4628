"""`Store`: what the runtime and the client need of the state store, as a protocol.

`StateStore` (Redis, `state.py`) is the implementation; the unit tests run the executor and the job service on
an in-memory stand-in (`tests/runtime/memory_store.py`) that keeps the same contract, checked against the real
store by `tests/runtime/test_store_contract.py`. Only the methods used outside the store are listed: those of
the executor, finalization, the job service, the lease keeper, the worker's announcements and the client.

The replies of the atomic steps (`Claim`, `Commit`, `Settle`, `Decision`: unions of frozen records) live in
`replies.py`, which both stores return, so code written against `Store` needs no import from the Redis
implementation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from agentq.protocol.envelopes import Envelope
from agentq.protocol.jobs import JobPlan
from agentq.protocol.records import CallRecord, JobInfo, JobRecord
from agentq.protocol.status import CallStatus, JobStatus
from agentq.store.replies import (
    Claim,
    ClaimOutcome,
    Commit,
    CommitOutcome,
    Decision,
    FinishInputs,
    Settle,
    SettleOutcome,
)
from agentq.store.state import CallTable

__all__ = ["CallTable", "Claim", "ClaimOutcome", "Commit", "CommitOutcome", "Decision", "FinishInputs", "Settle",
           "SettleOutcome", "Store"]


class Store(Protocol):
    """The state store's contract (see `StateStore` for what each step does)."""

    # ---------------------------------------------------------------------------- submission
    def create_job(self, plan: JobPlan, records: Sequence[CallRecord], *, submitted: Any,
                   events: Sequence[Envelope], parent: dict | None = None) -> bool: ...

    def job_tools(self, job_id: str) -> dict[str, dict]: ...

    def decide(self, job_id: str, call_id: str, *, decision: str, record: CallRecord | None = None,
               token: str = "", lease_ms: int = 0, event: Envelope | None = None) -> Decision: ...

    def record_rejection(self, job_id: str, error: dict, *, ttl_s: int) -> bool: ...

    # ----------------------------------------------------------------------------- execution
    def claim(self, job_id: str, call_id: str, *, token: str, lease_ms: int, log_offset: int = -1,
              job_started: Envelope | None = None, record: CallRecord | None = None, record_sha: str = "",
              tool_sha: str = "", start_events: Sequence[Envelope] = (), expect_started: bool = False) -> Claim: ...

    def add_events(self, job_id: str, envelopes: Sequence[Envelope]) -> None: ...

    def commit(self, job_id: str, call_id: str, *, token: str, status: CallStatus, messages: Sequence[dict] = (),
               events: Sequence[Envelope] = ()) -> Commit: ...

    def settle(self, job_id: str, call_id: str, *, record_sha: str, tool: str, tool_sha: str,
               job_started: Envelope | None, status: CallStatus, messages: Sequence[dict] = (),
               events: Sequence[Envelope] = ()) -> Settle: ...

    def task_signing_key(self) -> bytes: ...

    def release_for_retry(self, job_id: str, call_id: str, *, token: str,
                          event: Envelope | None = None) -> bool: ...

    def renew_leases(self, job_id: str, leases: dict[str, str], lease_ms: int) -> int: ...

    def add_usage(self, job_id: str, usage: dict[str, int]) -> None: ...

    def relay_events(self, job_id: str) -> int: ...

    def finalize(self, job_id: str, *, record: JobRecord, event: Envelope) -> bool: ...

    def cancel(self, job_id: str, *, event: Envelope) -> tuple[JobStatus, list[str]]: ...

    def save_record(self, job_id: str, record: JobRecord) -> None: ...

    # --------------------------------------------------------------------------------- reads
    def job_info(self, job_id: str) -> JobInfo: ...

    def job_status(self, job_id: str) -> JobStatus: ...

    def wait_finished(self, job_id: str, timeout_s: float) -> JobStatus | None: ...

    def read_log(self, job_id: str, start: int = 0) -> list[dict]: ...

    def call_records(self, job_id: str, call_ids: Sequence[str] | None = None) -> dict[str, CallRecord]: ...

    def finish_inputs(self, job_id: str) -> FinishInputs: ...

    def dependents(self, job_id: str, call_id: str) -> list[str]: ...

    def call_statuses(self, job_id: str) -> dict[str, CallStatus]: ...

    def record(self, job_id: str) -> JobRecord: ...

    def read_events(self, job_id: str, after: str = "0-0", *, block_ms: int | None = None,
                    count: int | None = None) -> list[tuple[str, dict]]: ...

    def call_table(self, job_id: str) -> CallTable: ...

    # --------------------------------------------------------------------------------- fleet
    def announce_worker(self, worker_id: str, announcement: dict, ttl_s: float) -> None: ...

    def retire_worker(self, worker_id: str) -> None: ...

    def live_activities(self) -> dict[str, dict]: ...

    def known_activities(self, memory_s: float) -> dict[str, dict]: ...

    def forget_activity(self, name: str) -> bool: ...

    def publish_tools(self, schemas: dict[str, dict], *, publisher: str) -> list[str]: ...

    def published_tools(self) -> dict[str, dict]: ...

    def tool_conflicts(self) -> dict[str, dict]: ...

    # ---------------------------------------------------------------------------- connection
    def ping(self) -> None: ...

    def close(self) -> None: ...
