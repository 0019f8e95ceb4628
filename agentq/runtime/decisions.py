"""A job's decisions after submission: a reviewer's approve, edit or reject of a call awaiting approval
(docs/protocol.md#approvals), and a job's cancellation. A mixin of `JobService` (`runtime/service.py`), which builds the
parts it uses.

An approved (or edited) call is made `ready` in the store, then sent by the deciding process (an API, a CLI): a
process killed between the two would leave it `ready` and never admitted, and a reviewer's retry finds it decided.
So the decision first writes a check, `<job> @decided:<call>` in the timers' sorted set, due a lease later; the
dispatcher that takes it sends the call again when it is still `ready` (`send_decided`: the admission answers an
admitted call with its task again and leaves a parked one parked; a copy runs nothing twice, a call is claimed once).

A rejection commits the call's `Rejected` failure in the decision's own step (decide.lua): nothing can come between
the two, and a second decision finds the call `failed` (a conflict). What follows the commit — the calls it released
sent, the job's next step — is the deciding process's too, so a rejection writes its check as well,
`<job> @rejected:<call>`, whose dispatcher takes those steps again once the call is `failed` (`finish_rejected`,
`JobProgress.recover`: each is safe to repeat)."""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any, Protocol

from agentq import telemetry
from agentq.engine.commits import failure
from agentq.engine.progress import Dispatch as EngineDispatch
from agentq.engine.progress import JobProgress
from agentq.errors import CallNotFoundError, ConflictError, JobValidationError, Problem
from agentq.protocol.envelopes import Envelope, JobFinished
from agentq.protocol.events import activity_part
from agentq.protocol.records import CallRecord
from agentq.protocol.status import CallStatus, JobStatus
from agentq.settings import Settings
from agentq.store.base import Store
from agentq.store.job_timers import DECIDED, REJECTED
from agentq.store.replies import Decided, DecisionConflict, DecisionMissing, RejectedCall

log = logging.getLogger("agentq.timers")

REJECTED_ERROR = "Rejected"  # the error type of a call a reviewer rejected


class Dispatch(EngineDispatch, Protocol):
    """What the service needs of the dispatcher (the runtime's Celery adapter, or a stand-in in unit tests)."""

    def revoke(self, job_id: str, call_ids: list[str], run: int = 1) -> None: ...


class JobDecisions:
    """Approve, edit, reject a call awaiting approval; cancel a job."""

    store: Store
    dispatcher: Dispatch
    progress: JobProgress
    settings: Settings

    def approve(self, job_id: str, call_id: str) -> CallRecord:
        """Let a call awaiting approval run (docs/protocol.md#approvals); its task is sent now."""
        self._awaiting(job_id, call_id)
        record = self._let_run(job_id, call_id, "approve")
        self._send(job_id, record)
        return record

    def edit(self, job_id: str, call_id: str, params: Any) -> CallRecord:
        """Replace the parameters of a call awaiting approval, re-validated against its tool, and let it run.
        Meta fields (`_tool`, `_outputPath`, ...) stay as they were; raises `JobValidationError` (nothing
        changes) when the edited call is invalid."""
        if not isinstance(params, dict):
            raise JobValidationError("edit rejected", [Problem("/params", "params must be an object")])
        record = self._awaiting(job_id, call_id)
        call = _edited(record.call, params)
        tool = self.store.job_tools(job_id).get(record.tool)
        problems = [Problem("/params", f"{k!r}: meta fields cannot be edited") for k in params if k.startswith("_")]
        if tool is not None:
            from agentq.protocol.jobs import plan_calls

            found: list[Problem] = []
            plan_calls([call], {record.tool: tool}, {record.tool: tool}, found)
            problems += [Problem("/params" + p.pointer.removeprefix("/calls/0"), p.message) for p in found]
        if problems:
            raise JobValidationError("edit rejected", problems)
        record = self._let_run(job_id, call_id, "edit", replace(record, call=call))
        self._send(job_id, record)
        return record

    def send_decided(self, job_id: str, call_id: str) -> None:
        """A call approved a lease ago, sent again when still `ready` (its decider may have died before sending
        it; see the module docstring)."""
        if self.store.call_statuses(job_id, [call_id]).get(call_id) is not CallStatus.READY:
            return
        record = self.store.call_records(job_id, [call_id]).get(call_id)
        if record is not None:
            log.info("call %s of job %s still ready a lease after its approval: sent again", call_id, job_id)
            self._send(job_id, record)

    def _send(self, job_id: str, record: CallRecord) -> None:
        """Send a decided call's task, unless its job waits for its concurrency keys or its start time (its start
        sends it)."""
        if self.store.job_status(job_id) in (JobStatus.WAITING, JobStatus.SCHEDULED):
            return
        with telemetry.resumed(lambda: self.store.job_info(job_id).traceparent):
            self.dispatcher(job_id, [record])

    def finish_rejected(self, job_id: str, call_id: str) -> None:
        """A call rejected a lease ago: the calls its rejection released are sent and the job's next step taken
        again, when the call is `failed` (its decider may have died after the rejection's step, before these; see
        the module docstring)."""
        if self.store.call_statuses(job_id, [call_id]).get(call_id) is CallStatus.FAILED:
            self.progress.recover(job_id, call_id)

    def reject(self, job_id: str, call_id: str, reason: str | None = None) -> CallRecord:
        """Fail a call awaiting approval with "rejected by reviewer" (and the reason), in the decision's step; the
        job goes on."""
        record = self._awaiting(job_id, call_id)
        message = "rejected by reviewer" + (f": {reason}" if reason else "")
        messages, event = failure(job_id, call_id, record=record, error_type=REJECTED_ERROR, message=message,
                                  source="agentq")
        rejected = self._decide(job_id, call_id, "reject", messages=messages, events=[event])
        assert isinstance(rejected, RejectedCall), "a rejection's step commits the call's failure"
        self.progress.committed(job_id, rejected.commit)
        return record

    def _awaiting(self, job_id: str, call_id: str) -> CallRecord:
        records = self.store.call_records(job_id, [call_id])
        if call_id not in records:
            self.store.job_status(job_id)  # JobNotFoundError for an unknown job
            raise CallNotFoundError(f"job {job_id!r} has no call {call_id!r}")
        return records[call_id]

    def _let_run(self, job_id: str, call_id: str, decision: str, record: CallRecord | None = None) -> CallRecord:
        """Approve (or edit, with the edited `record`) the call; its record after the decision."""
        decided = self._decide(job_id, call_id, decision, record=record)
        assert isinstance(decided, Decided), "only a rejection's step commits"
        return decided.record

    def _decide(self, job_id: str, call_id: str, decision: str, *, record: CallRecord | None = None,
                messages: list[dict] | None = None, events: list[Envelope] | None = None) -> Decided | RejectedCall:
        """The decision's step, after its check (see the module docstring); a conflict raises `ConflictError`."""
        check = (REJECTED if decision == "reject" else DECIDED) + call_id
        self.store.set_job_timer(job_id, check, round((time.time() + self.settings.lease_s) * 1000))
        match self.store.decide(job_id, call_id, decision=decision, record=record, messages=messages or (),
                                events=events or ()):
            case Decided() | RejectedCall() as decided:
                return decided
            case DecisionConflict(status=CallStatus.AWAITING_APPROVAL):  # the call waits, but its job ended
                ended = self.store.job_status(job_id)
                raise ConflictError(f"job {job_id} has ended ({ended}): call {call_id} can no longer be decided")
            case DecisionConflict(status=status):
                raise ConflictError(f"call {call_id} of job {job_id} is {status}, not awaiting approval")
            case DecisionMissing():
                raise CallNotFoundError(f"job {job_id!r} has no call {call_id!r}")

    def cancel(self, job_id: str) -> JobStatus:
        """Cancel a job: no call starts after this; queued tasks are revoked; a module's child job fails the call it
        ran for, and its parent goes on. Returns the job's status."""
        event = JobFinished(job_id=job_id, status=JobStatus.CANCELED.value, error=None,
                            part=activity_part("Job canceled", source="agentq"))
        status, ready = self.store.cancel(job_id, event=event)
        if status is not JobStatus.CANCELED:
            return status
        self.dispatcher.revoke(job_id, ready, run_of(self.store, job_id, ready))
        self.dispatcher.ended(job_id, ready, [])  # their places in their queues go to waiting calls
        self.progress.canceled(job_id)
        return status



def _edited(call: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """A call with a reviewer's parameters: its meta fields (`_tool`, `_outputPath`, ...) as they were, the edited
    parameters in place of its own."""
    return {**{k: v for k, v in call.items() if k.startswith("_")},
            **{k: v for k, v in params.items() if not k.startswith("_")}}


def run_of(store: Store, job_id: str, call_ids: list[str]) -> int:
    """The run of a job the calls `call_ids` run in (their tasks' ids name it: docs/resume.md); 1 when none."""
    records = store.call_records(job_id, call_ids[:1]) if call_ids else {}
    return next((record.run for record in records.values()), 1)
