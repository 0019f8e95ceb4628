"""The job-progress step: what follows any change to a call, on every path that makes one.

A call's commit (its attempt succeeded or failed for good), a reviewer's rejection, a job's cancellation and a
module's child job ending all go through `JobProgress`: it sends the calls a commit released, and when the job
has no open awaited call and no tick in flight, takes the job's next step (a plan job ends; an agent job ends
or asks the model again). A job that ends while it is a module's child resumes the call it ran for, whose commit
goes through the same step in the parent job. Every step is safe to repeat.
"""

from __future__ import annotations

import logging
from typing import Protocol

from agentq.engine.concurrency import ConcurrencyStore, release_keys, start_jobs
from agentq.engine.delegation import DelegationStore, resume_parent
from agentq.engine.finalize import Finalized, FinalizeStore, PlannedEnd, finalize_job
from agentq.engine.hooks import CallEnded, Hook, Hooks
from agentq.engine.relay import relay_events
from agentq.errors import AgentQError
from agentq.protocol.job_record import build_job_record
from agentq.protocol.records import CallRecord, ErrorInfo, JobInfo, JobKind, JobRecord
from agentq.protocol.status import CallStatus, JobStatus
from agentq.store.base import Commit, FinishInputs
from agentq.store.replies import CommitDuplicate, Committed

log = logging.getLogger("agentq.executor")

_ENDED = (JobStatus.SUCCEEDED, JobStatus.FAILED)  # a canceled job's record is always computed anew

class Dispatch(Protocol):
    """Sends tasks: `dispatch(job_id, records)` the calls' tasks (those admitted to their queues, docs/tenants.md),
    `dispatch.ended(job_id, call_ids, released)` after calls ended (their places go to waiting calls; `released`:
    calls their end made ready), `dispatch.tick(job_id, n)` an agent tick's."""

    def __call__(self, job_id: str, records: list[CallRecord]) -> None: ...

    def ended(self, job_id: str, call_ids: list[str], released: list[CallRecord]) -> None: ...

    def tick(self, job_id: str, n: int = 0) -> None: ...


class ProgressStore(FinalizeStore, ConcurrencyStore, DelegationStore, Protocol):
    """What the job-progress step needs of the store: a job's end, its concurrency keys, a module's parent call
    (and, through those, the calls, the job's reads and writes, its events)."""


class JobProgress:
    """Takes jobs forward after their calls change (one per process, shared by threads)."""

    def __init__(self, store: ProgressStore, dispatch: Dispatch, *, source: str = "agentq", hooks: Hook | None = None):
        self.store = store
        self.dispatch = dispatch
        self.source = source
        self.hooks = hooks if hooks is not None else Hooks()

    def committed(self, job_id: str, commit: Commit | None, call_id: str | None = None,
                  planned: PlannedEnd | None = None) -> None:
        """Send the calls a commit released and take the job's next step. A commit of this attempt's own call
        (`call_id`) that finds it committed already (its first reply was lost to a store outage, or a takeover
        committed it) finishes whatever that commit may have left undone, as a redelivery would. `planned`: the
        job's end the commit was given to write (`engine/finalize.end_ahead`)."""
        if isinstance(commit, CommitDuplicate) and call_id is not None:
            self.recover(job_id, call_id)
            return
        if not isinstance(commit, Committed):
            return
        if commit.job_status is JobStatus.CANCELED and call_id is not None:
            log.info("call %s of job %s ended after its job was canceled: its outcome is recorded, marked "
                     "after_cancel", call_id, job_id)
        if commit.released:  # they go first; a call's place alone is given back after the job's next step
            self.dispatch.ended(job_id, _ids(call_id), commit.released)
        self.step(job_id, commit, call_id, planned)
        if not commit.released:
            self.dispatch.ended(job_id, _ids(call_id), [])

    def step(self, job_id: str, commit: Committed, call_id: str | None, planned: PlannedEnd | None = None) -> None:
        """The job's next step after a commit, when it is due (else a late call's record saved again). A commit
        that wrote the job's end planned ahead (`Committed.finalized`) leaves what follows a job's end."""
        if _step_due(commit.open_calls, commit.job_status, ticking=commit.ticking):
            if commit.finalized and planned is not None:
                self.ended(Finalized(True, planned.info, planned.end.record))
            elif commit.kind is JobKind.PLAN:
                self.finish(job_id, inputs=commit.finish_inputs)
            else:
                self.advance(job_id)
        elif call_id is not None:
            self.resave(job_id, call_id, commit)

    def resave(self, job_id: str, call_id: str, commit: Committed) -> None:
        """A call committed after its job ended: when it was the last awaited call still open (one commit sees the
        count of open calls reach 0), the job's record is saved again with its outcome and every one before it.
        (Until then the record is computed from the log: `store.codecs.standing_record`.)"""
        if commit.open_calls != 0 or commit.job_status not in _ENDED:
            return
        record = self.store.call_records(job_id, [call_id]).get(call_id)
        if record is not None and record.awaited:
            self.store.save_record(job_id, build_job_record(self.store.job_info(job_id),
                                                            self.store.read_log(job_id)))

    def gone(self, job_id: str, call_id: str) -> None:
        """A call's task found it will not run (canceled, gone, not ready): its place in its queue is given back."""
        self.dispatch.ended(job_id, [call_id], [])

    def recover(self, job_id: str, call_id: str) -> None:
        """A redelivered task of a finished call: finish what a crash after the commit may have skipped."""
        dependents = self.store.dependents(job_id, call_id)
        if dependents:
            statuses = self.store.call_statuses(job_id)
            ready = [d for d in dependents if statuses.get(d) is CallStatus.READY]
            if ready:
                self.dispatch(job_id, list(self.store.call_records(job_id, ready).values()))
        self.step_if_due(job_id)

    def resend_ready(self, job_id: str) -> None:
        """The job's `ready` calls sent again, for a tick task whose first delivery may have died between writing
        its calls and sending them: the admission answers an admitted call with its task again and leaves a parked
        one parked; a copy of a task runs nothing twice (a call is claimed once)."""
        statuses = self.store.call_statuses(job_id)
        ready = [c for c, status in statuses.items() if status is CallStatus.READY]
        if ready:
            self.dispatch(job_id, list(self.store.call_records(job_id, ready).values()))

    def step_if_due(self, job_id: str) -> None:
        """The job's next step when it is due (no awaited call open, no tick in flight): for a task that finds its
        work done already, whose first delivery may have died before taking that step."""
        info = self.store.job_info(job_id)
        if _step_due(info.open_calls, info.status, ticking=info.ticking):
            self.advance(job_id, info)

    def advance(self, job_id: str, info: JobInfo | None = None, *, finish: FinishInputs | None = None) -> None:
        """The job has no open awaited call: a plan job ends; an agent job with no tick in flight ends (its final
        output given, or its ticks used up) or its next tick is sent. `finish`: what its end reads, when the
        caller read it with `info` (the reply of the tick that gave the final output)."""
        info = info if info is not None else self.store.job_info(job_id)
        if not info.status.is_active or info.ticking:
            return
        if info.kind is not JobKind.AGENT or info.has_final_output:
            self.finish(job_id, inputs=finish)
            return
        limit = info.job_options.max_ticks
        if info.ticks >= limit:
            message = f"no final output after {info.ticks} ticks (options.max_ticks {limit})"
            self.finish(job_id, error=ErrorInfo("max_ticks_exceeded", message))
            return
        self.dispatch.tick(job_id, info.exchanges)

    def finish(self, job_id: str, *, error: ErrorInfo | None = None, inputs: FinishInputs | None = None) -> bool:
        """Give a job its final status and record (idempotent); a module's child job then resumes the call it
        ran for. `inputs`: what finalizing reads, when a commit's reply brought it."""
        finalized = finalize_job(self.store, job_id, source=self.source, error=error, inputs=inputs)
        self.ended(finalized)
        return finalized.ended

    def ended(self, finalized: Finalized) -> None:
        """What follows a job's end, for the one caller that gave the job its final status: its concurrency keys
        go to the next jobs, and a module's child job resumes the call it ran for."""
        if finalized.ended:
            release_keys(self.store, self.dispatch, self, finalized.info)
        if finalized.ended and finalized.info.parent is not None:
            self.child_ended(finalized.info, finalized.record)

    def canceled(self, job_id: str) -> None:
        """A job was canceled (by `Store.cancel`): its record is kept, and a module's child job resumes the call
        it ran for (which fails), so the parent goes on instead of waiting out the call's lease."""
        info = self.store.job_info(job_id)
        record = build_job_record(info, self.store.read_log(job_id))
        self.store.save_record(job_id, record)
        release_keys(self.store, self.dispatch, self, info)
        if info.parent is not None:
            self.child_ended(info, record)

    def start(self, tenant: str, job_ids: list[str]) -> None:
        """Start the jobs that hold their concurrency keys now (`engine/concurrency.py`)."""
        start_jobs(self.store, self.dispatch, self, tenant, job_ids)

    def child_ended(self, child: JobInfo, outcome: JobRecord) -> None:
        """A module's child job ended: its last events reach the parent's stream, then the parent's call is
        committed with the child's output or failure and the parent job goes on."""
        self.relay(child.id)
        resumed = resume_parent(self.store, child, outcome, source=self.source)
        if resumed is None:
            return
        if isinstance(resumed.commit, Committed):
            self.hooks.after_call(CallEnded(resumed.job_id, resumed.record, resumed.status, resumed.seconds))
        self.committed(resumed.job_id, resumed.commit)

    def relay(self, job_id: str) -> None:
        """Copy a module's child job's new events to its parent's stream (see `engine/relay.py`)."""
        try:
            relay_events(self.store, job_id)
        except AgentQError:
            log.warning("could not relay the events of job %s to its parent job", job_id, exc_info=True)


def _ids(call_id: str | None) -> list[str]:
    return [] if call_id is None else [call_id]


def _step_due(open_calls: int, status: JobStatus, *, ticking: bool) -> bool:
    """Whether the job's next step is due: it is active, no awaited call is open and no tick is in flight."""
    return open_calls <= 0 and status.is_active and not ticking
