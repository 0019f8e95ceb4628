"""A job's own timers (docs/waits.md#deadlines), fired by the dispatchers' timer loop (`runtime/timers.py`): a job
submitted with `options.start_at` or `delay_s` is `scheduled` until then, and started by its timer; a job still
running at its `options.deadline_s` fails with `DeadlineExceeded`. A mixin of `JobService` (`runtime/service.py`),
which builds the parts it uses.

A start timer is written before its job (once: a job id written twice keeps its first timer), so a crash between
the two leaves a timer that finds no scheduled job and is dropped, never a job that waits for no timer. A start cut
off after the job's status flipped and before its tasks were sent is finished when the timer comes back (the claim
of the process that took it runs out): the job, still `queued`, gets its first tasks sent again. Its start
is the one a concurrency-keys job gets when let in (`engine/concurrency.py`): the status it was written for (or
`waiting` for its keys), then its ready calls' tasks or its first tick.

A job whose first tasks only its submitter sends — an agent job's first tick, a plan job's engine calls (`sleep`,
`waitForSignal`, any wait, latent and module calls), any ready call no admission step written with the job took, the
admission of a job with concurrency keys — gets an `@unstarted` timer in its write's round trip (`start_check`), due
a lease after it: a submitter killed between the write and those tasks would otherwise leave the job `queued` until
its TTL. When it fires (`start_unstarted`), a job still `queued` gets its first tasks sent again, a job still
`waiting` is admitted under its keys again (both idempotent: a call's claim is taken once, a tick's begin once, an
admitted call is sent again and a parked one stays parked, an admitted job keeps its place); any other job is left
alone. Its submitter does not drop it (that would be a round trip more); on one Redis the step that starts the job
drops it in its own round trip (`tick_begin.lua`, `claim.lua`, `settle.lua`: `unstarted_check`); on a cluster, where
the timers are in another slot, it fires once and finds its job started.

The deadline ends the job as a cancel does, in one store step (`store/job_timers.py`): its record is built from
its log, its calls not ended are canceled — the running ones too, so their late commits are refused and nothing
of them reaches the job's state —, their tasks revoked, its waits dropped, and what follows a job's end (its
concurrency keys, a module's parent) happens once. A job that ended before its deadline is left alone.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import replace
from typing import TYPE_CHECKING

from agentq.engine.commits import commit_failure
from agentq.engine.concurrency import send_started
from agentq.engine.finalize import Finalized, job_end
from agentq.engine.progress import JobProgress
from agentq.errors import JobNotFoundError
from agentq.protocol.envelopes import JobQueued
from agentq.protocol.events import job_part
from agentq.protocol.job_times import start_ms
from agentq.protocol.plans import JobPlan
from agentq.protocol.records import CallRecord, ErrorInfo, JobInfo
from agentq.protocol.resume import deadline_kind
from agentq.protocol.status import JobStatus
from agentq.runtime.decisions import Dispatch
from agentq.settings import Settings
from agentq.store.base import Store
from agentq.store.job_timers import DEADLINE, DECIDED, REJECTED, START, UNSTARTED, UNTAKEN

if TYPE_CHECKING:
    from agentq.runtime.admission import WithWrite

log = logging.getLogger("agentq.timers")

DEADLINE_EXCEEDED = "DeadlineExceeded"
START_TIMED_OUT = "StartTimedOut"
_ATTEMPTS = 5  # builds of the record when calls keep committing meanwhile


class JobTimers:
    """Set a job's timers at submission; fire them when due."""

    store: Store
    dispatcher: Dispatch
    progress: JobProgress
    settings: Settings

    def set_deadline(self, job_id: str, options: dict, created_s: float) -> None:
        """A job with `options.deadline_s` gets its timer, due that long after `created_s` (its submission)."""
        deadline_s = options.get("deadline_s")
        if deadline_s is not None:
            self.store.set_job_timer(job_id, DEADLINE, round((created_s + float(deadline_s)) * 1000))

    def scheduled(self, plan: JobPlan, submitted_s: float) -> JobPlan:
        """A valid plan submitted at `submitted_s`: with its start time and its start timer set when it starts
        later (`options.start_at` / `delay_s`), else as it is."""
        start = start_ms(plan.options, submitted_s)
        if start is None:
            return plan
        self.store.set_job_timer(plan.id, START, start, nx=True)
        return replace(plan, start_ms=start)

    def send_decided(self, job_id: str, call_id: str) -> None:
        """Send an approved call again when still `ready` (`JobDecisions.send_decided`)."""
        raise NotImplementedError  # `JobDecisions`'s

    def finish_rejected(self, job_id: str, call_id: str) -> None:
        """Take again what follows a rejected call's failure (`JobDecisions.finish_rejected`)."""
        raise NotImplementedError  # `JobDecisions`'s

    def start_check(self, plan: JobPlan, ready: list[CallRecord], with_write: WithWrite | None,
                    submitted_s: float) -> int | None:
        """When a new job's `@unstarted` timer is due (unix ms), or None when it needs none: a job started later (its
        start timer), or a plan job with an awaited call whose ready calls are all activity calls the admission step
        written with it took (a call that step admitted and nobody published is published again by the admission's
        sweep)."""
        if plan.start_ms is not None:
            return None
        if with_write is not None and any(c.awaited for c in plan.calls) and \
                all(with_write.admission.gated(r) for r in ready):
            return None
        return round((submitted_s + self.settings.lease_s) * 1000)

    def fire_job_timer(self, job_id: str, kind: str) -> bool:
        """Fire the due timer `kind` of a job; whether it is done with (the timer loop drops it), else it is taken
        again when its claim runs out."""
        if kind == START:
            self.start_scheduled(job_id)
            return True
        if kind == DEADLINE or kind.startswith(DEADLINE + ":"):  # a resumed run's: `deadline:<run>` (docs/resume.md)
            return self.expire(job_id, kind) is not None
        if kind == UNSTARTED:
            self.start_unstarted(job_id)
            return True
        if kind.startswith(UNTAKEN):
            self.start_timed_out(job_id, kind.removeprefix(UNTAKEN))
            return True
        if kind.startswith(DECIDED):
            self.send_decided(job_id, kind.removeprefix(DECIDED))
            return True
        if kind.startswith(REJECTED):
            self.finish_rejected(job_id, kind.removeprefix(REJECTED))
            return True
        log.warning("job %s has a timer of unknown kind %r: dropped", job_id, kind)
        return True

    def start_scheduled(self, job_id: str) -> bool:
        """Start a scheduled job whose time came; whether this call started it. A job found `queued` (or `waiting`
        for its keys) was flipped by a start cut off before it sent its first tasks (its timer came back when the
        claim of the process that took it ran out): they are sent again, as for an unstarted job."""
        try:
            info = self.store.job_info(job_id)
        except JobNotFoundError:
            return False
        if info.status is not JobStatus.SCHEDULED:
            return self._start_again(info)
        keys = info.job_options.concurrency
        calls = len(self.store.call_statuses(job_id))
        if not self.store.start_scheduled(job_id, waiting=bool(keys),
                                          event=lambda status: _started(info, status, calls)):
            return False
        log.info("job %s: its start time came", job_id)
        self._send_first(info)
        return True

    def start_unstarted(self, job_id: str) -> bool:
        """A job's `@unstarted` timer came due: a job still `queued` (nothing of it claimed, no tick begun) gets its
        first tasks sent again, one still `waiting` its admission under its concurrency keys (see the module
        docstring); whether it did."""
        try:
            info = self.store.job_info(job_id)
        except JobNotFoundError:
            return False
        return self._start_again(info)

    def _start_again(self, info: JobInfo) -> bool:
        """A job still `queued`, or `waiting` for its concurrency keys, gets its first tasks (its admission) sent
        again; any other job is left alone. Whether it did."""
        waiting = info.status is JobStatus.WAITING and bool(info.job_options.concurrency)
        if info.status is not JobStatus.QUEUED and not waiting:
            return False
        log.info("job %s still %s: its first tasks are sent again", info.id, info.status.value)
        self._send_first(info)
        return True

    def _send_first(self, info: JobInfo) -> None:
        """A job's first tasks, or its admission under its concurrency keys (then its tasks once it holds them)."""
        if keys := info.job_options.concurrency:
            ttl_s = info.job_options.ttl_s or self.settings.job_ttl_s
            started = self.store.admit_concurrency(info.tenant, info.id, keys,
                                                   expire_at_ms=int((time.time() + ttl_s) * 1000))
            self.progress.start(info.tenant, started)
        else:
            send_started(self.store, self.dispatcher, self.progress, info)

    def start_timed_out(self, job_id: str, call_id: str) -> bool:
        """Fail a call still `ready` at its tool's `x-start-timeout-s` with `StartTimedOut` (no live worker took
        it); whether it did. Its task is revoked; the job goes on as after any failure (a `||` branch takes it)."""
        token = uuid.uuid4().hex
        if not self.store.take_untaken(job_id, call_id, token=token, lease_ms=int(self.settings.lease_s * 1000)):
            return False
        record = self.store.call_records(job_id, [call_id])[call_id]
        timeout = record.start_timeout_s or 0.0
        message = (f"no worker took this call of {record.tool!r} within its x-start-timeout-s ({timeout:g} s): "
                   f"is a worker serving activity {record.activity!r} running?")
        commit, _ = commit_failure(self.store, job_id, call_id, token=token, record=record,
                                   error_type=START_TIMED_OUT, message=message, source="agentq")
        self.dispatcher.revoke(job_id, [call_id], record.run)
        self.progress.committed(job_id, commit, call_id)
        return True

    def expire(self, job_id: str, kind: str = DEADLINE) -> bool | None:
        """Fail a job still active at its deadline (see the module docstring); whether this call ended it (None:
        its calls kept committing while the record was built; try again later). `kind`: the timer's, which names
        the run it is the deadline of (a resumed job's earlier runs' timers are left alone)."""
        for _ in range(_ATTEMPTS):
            try:
                info, messages, _ = self.store.finish_inputs(job_id)
            except JobNotFoundError:
                return False  # expired with its keys
            if not info.status.is_active or kind != deadline_kind(len(info.runs) + 1, DEADLINE):
                return False
            limit = info.job_options.deadline_s or 0.0
            error = ErrorInfo(DEADLINE_EXCEEDED, f"the job ran longer than its deadline (options.deadline_s: "
                                                 f"{limit:g} s)")
            record, event = job_end(job_id, info, messages, error, source="agentq")
            ended = self.store.end_by_deadline(job_id, record=record, event=event, log_length=len(messages))
            if ended.outcome == "moved":
                continue
            if ended.outcome != "ended":
                return False
            stopped = [*ended.ready, *ended.running]
            self.dispatcher.revoke(job_id, stopped, len(info.runs) + 1)
            self.dispatcher.ended(job_id, stopped, [])  # their places in their queues go to waiting calls
            for call_id in ended.waiting:
                self.store.close_wait(job_id, call_id, tenant=None, spec=None)
            log.info("job %s failed at its deadline (%g s): %d call(s) canceled", job_id, limit,
                     len(stopped) + len(ended.waiting))
            self.progress.ended(Finalized(True, info, record))
            return True
        log.warning("job %s: its deadline could not end it yet (its log kept growing); tried again later", job_id)
        return None



def _started(info: JobInfo, status: JobStatus, calls: int) -> JobQueued:
    """The event of a scheduled job's start: queued (or its status), or waiting for its concurrency keys."""
    text = "Job waiting for its concurrency keys" if status is JobStatus.WAITING else "Job queued"
    return JobQueued(job_id=info.id, kind=info.kind.value, calls=calls, status=status.value,
                     part=job_part(text, kind=info.kind.value, source="agentq", locale=info.locale))
