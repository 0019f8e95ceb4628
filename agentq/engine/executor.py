"""Running one call's task: intake (claim, or settle a run made before the claim) → resolve → validate → the
call runner (or the model, or a module's child job) → commit → the job-progress step.

This module knows the store and the protocol but not Celery: the Celery task in `runtime/app.py` is a thin
adapter that turns an `Outcome` with `retry_in` into `task.retry(...)`. Every step is safe to repeat: a
redelivered task finds its call already claimed or committed and only finishes what a crash may have left undone
(dispatching released calls, finalizing the job).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from agentq.engine.agent import AgentLoop, KnownActivities
from agentq.engine.batch import Lane
from agentq.engine.budget import stop_for_budget
from agentq.engine.caches import solution_for
from agentq.engine.commits import Shown, commit_failure
from agentq.engine.delegation import Delegation, SubmitChild
from agentq.engine.failures import CallFailure, classify, masked, retry_in
from agentq.engine.finalize import end_ahead
from agentq.engine.hooks import CallEnded, Hook, Hooks
from agentq.engine.intake import CallIntake
from agentq.engine.latent import run_latent
from agentq.engine.leases import LeaseKeeper
from agentq.engine.modules import ModuleLibrary
from agentq.engine.outages import PatientStore
from agentq.engine.progress import Dispatch, JobProgress, ProgressStore
from agentq.engine.render import arguments, done_event, start_events
from agentq.engine.requests import ModelRequests
from agentq.engine.routing import Routing
from agentq.engine.runner import CallRunner
from agentq.engine.signing import TaskSigner
from agentq.engine.waits import Waits
from agentq.errors import BudgetExceeded, InvalidInputError, StoreUnavailableError
from agentq.llm.base import LLM
from agentq.protocol.activities import ActivityRegistry, ActivitySpec
from agentq.protocol.digests import now_iso, record_digest
from agentq.protocol.envelopes import CallRetrying, Envelope, Thought
from agentq.protocol.events import technical_details, thought_part
from agentq.protocol.records import CallMode, CallRecord, ErrorInfo, OutcomeStatus
from agentq.protocol.status import CallStatus
from agentq.protocol.validation import validate_call
from agentq.protocol.views import LogIndex, resolve_params
from agentq.protocol.writes import check_write, output_messages
from agentq.settings import Settings
from agentq.store.contracts import LeaseStore, LimitStore, TickStore, WaitStore
from agentq.store.replies import (
    Claim,
    Claimed,
    ClaimFinished,
    ClaimLeased,
    ClaimNotReady,
    ClaimOutcome,
    Commit,
    Committed,
)

log = logging.getLogger("agentq.executor")


@dataclass
class Outcome:
    """What happened to one delivery of a call's task."""

    status: OutcomeStatus
    retry_in: float | None = None
    error: ErrorInfo | None = None  # a failed call's error, as recorded (sensitive values masked)


@dataclass
class Ran:
    """A handler's run before its call was claimed (an idempotent activity's signed task, see `_run_ahead`),
    carried into the usual claim-first path when the settle step could not record it, so it is not run again."""

    started: float
    result: Any = None
    error: Exception | None = None  # what the run raised, classified as in `_run_claimed`
    parts: list[Envelope] = field(default_factory=list)  # parts the activity emitted meanwhile, not published


class ExecutorStore(ProgressStore, TickStore, WaitStore, Protocol):
    """What the executor and its parts need of the store: calls' claims and commits, the job's progress and end,
    agent ticks, waits (a module's child job and latent calls through those). Not the admission, the copies of past
    jobs, the job timers nor the restarts' checks."""


class Executor:
    """Runs calls of any job for the activities in `activities`; one per process, shared by threads."""

    def __init__(self, store: ExecutorStore, activities: ActivityRegistry, dispatch: Dispatch, *, settings: Settings,
                 source: str = "agentq", llm: LLM | None = None, routing: Routing | None = None,
                 known_activities: KnownActivities | None = None,
                 modules: ModuleLibrary | None = None,
                 submit_child: SubmitChild | None = None, signer: TaskSigner | None = None,
                 hooks: Hook | None = None, batch: Lane | None = None, limits: LimitStore | None = None,
                 leases: LeaseStore | None = None):
        self.settings = settings
        # every store step is retried while the store is unreachable (see engine/outages.py); the lease
        # keeper has its own loop and keeps the store itself (`leases`: the store's part for them, else `store`)
        self.store = cast(ExecutorStore, PatientStore(store, settings.store_retry_s))
        self.source = source
        self.llm = llm  # the LLM for latent calls, module calls and agent ticks (None: they fail clearly)
        self.hooks = hooks if hooks is not None else Hooks()
        # every model request goes through the hooks' gates (the budget, ...) to the LLM
        # (`batch`: the batch lane, for jobs with `options.priority: "batch"`)
        self.model = ModelRequests(llm, self.hooks, batch=batch) if llm is not None else None
        self.leases = LeaseKeeper(leases if leases is not None else store, settings.lease_s)
        self.intake = CallIntake(self.store, activities, lease_ms=int(settings.lease_s * 1000), signer=signer,
                                 source=source)
        self.runner = CallRunner(activities, default_timeout_s=settings.default_timeout_s,
                                 max_result_bytes=settings.max_result_bytes, source=source,
                                 around=self.hooks.around_activity)
        self.progress = JobProgress(self.store, dispatch, source=source, hooks=self.hooks)
        self.agent = AgentLoop(
            self.store, self.model, dispatch, routing=routing or Routing.from_settings(settings),
            settings=settings, known_activities=known_activities or (lambda names: {}), progress=self.progress,
            leases=self.leases, source=source, module_loader=getattr(modules, "loader", None), hooks=self.hooks,
            limits=cast(LimitStore, PatientStore(limits, settings.store_retry_s)) if limits is not None else None)
        self.delegation = Delegation(self.store, settings, library=modules,
                                     submit_child=submit_child, source=source)
        self.waits = Waits(self.store, self.progress, source=source, ended=self._ended)

    def timeout_of(self, spec: ActivitySpec) -> float:
        """The activity's own timeout, else `AGENTQ_DEFAULT_TIMEOUT_S`
        (docs/architecture.md#runtime--the-only-place-that-knows-celery)."""
        return self.runner.timeout_of(spec)

    def tick(self, job_id: str, n: int = 0) -> float | None:
        """Make an agent job's model request number `n` (see `engine/agent.py`); returns seconds to wait
        before the task tries again, or None."""
        try:
            return self.agent.tick(job_id, n)  # a module's child job: relays its tick's events to its parent
        finally:
            self.hooks.after_tick(job_id, n)

    # ------------------------------------------------------------------------------------ delivery

    # one delivery and each way it ends: another task's call (before or after the claim), a run ahead of the
    # claim, a claimed attempt, a call leased to another attempt, finished, or not to run
    def run_call(self, job_id: str, call_id: str, *, record: CallRecord | None = None,
                 signature: str | None = None, task: str | None = None) -> Outcome:
        """Run one delivery of a call's task. `record` is the call's record as the task carries it; the claim
        checks it against the stored one and the stored one is what runs (a task may carry none). A signed
        record of an idempotent activity runs before anything is claimed (`_run_ahead`). `task`: the name of
        the task delivered (None: any); a call routed to another task is left to that one (`_elsewhere`)."""
        if task is not None and record is not None and record.task != task:
            return self._elsewhere(job_id, call_id, record.task, task)  # nothing claimed
        record_sha = record_digest(record) if record is not None else ""
        ran = None
        if record is not None and self.intake.may_run_ahead(job_id, record, record_sha, signature):
            settled, ran = self._run_ahead(job_id, call_id, record, record_sha)
            if settled is not None:
                return settled
        token = uuid.uuid4().hex
        intake = self.intake.claim(job_id, call_id, token, record, record_sha)
        claim = intake.claim
        match claim:
            case Claimed() if task is not None and claim.record.task != task:
                # the task carried no record, or not the stored one: the stored call is another task's
                self.store.unclaim(job_id, call_id, token=token)
                return self._elsewhere(job_id, call_id, claim.record.task, task)
            case Claimed():
                if claim.record_replaced:
                    ran = None  # it ran a record that is not the stored one: the stored one runs
                return self._run_held(job_id, call_id, token, claim, intake.index, intake.announced, ran)
            case ClaimLeased(lease_left_ms=left):
                return Outcome(OutcomeStatus.LEASED, retry_in=max(left, 100) / 1000)
            case ClaimFinished():
                self.progress.recover(job_id, call_id)
                return Outcome(OutcomeStatus.FINISHED)
        return self._not_run(job_id, call_id, claim)

    @staticmethod
    def _elsewhere(job_id: str, call_id: str, routed: str, task: str) -> Outcome:
        """A delivery of a task that is not the call's own (a forged one, say, on another activity's queue): the
        call is left as it was, to its own task, instead of failing here for an activity this task does not
        run."""
        log.warning("call %s of job %s not run: it is routed to task %s, not %s (left to its own task)", call_id,
                    job_id, routed, task)
        return Outcome(OutcomeStatus.ELSEWHERE)

    def _not_run(self, job_id: str, call_id: str, claim: Claim) -> Outcome:
        """A delivery that found its call will not run (canceled, gone, not ready): its place in its queue is given
        back (one that must claim again keeps it)."""
        status = claim.status if isinstance(claim, ClaimNotReady) else ""
        log.info("call %s of job %s not run: %s %s", call_id, job_id, claim.outcome, status)
        if claim.outcome is not ClaimOutcome.UNSTARTED:
            self.progress.gone(job_id, call_id)
        return Outcome(OutcomeStatus(claim.outcome.value))

    def _run_ahead(self, job_id: str, call_id: str, record: CallRecord,
                   record_sha: str) -> tuple[Outcome | None, Ran | None]:
        """Run an idempotent activity's call, then claim and commit its first attempt in one store step (see
        settle.lua): one round trip instead of two. Returns (its outcome, None) when that step recorded it,
        else (None, the run) for the usual path to claim the call and record that run (a failed run, a retry,
        a duplicate delivery, a canceled job, a write that needs the log), or (None, None) when this process has
        no copy of the call's tool yet (nothing ran)."""
        copy = self.intake.tool_copy(job_id, record.tool)
        if copy is None:
            return None, None
        parts: list[Envelope] = []
        started = time.time()
        try:
            result = self.runner.invoke(record, record.call, copy[0], None, job_id, call_id, parts.append)
            messages = output_messages(record.call, result, call_id=call_id, date=now_iso())
        except StoreUnavailableError:
            raise
        except Exception as error:
            return None, Ran(started, error=error, parts=parts)
        ran = Ran(started, result=result, parts=parts)
        if any(m.get("_outputMethod") in ("push", "concat") for m in messages):
            return None, ran  # checking the target is an array needs the log: the usual path reads it
        finished = time.time()

        def events(tool: dict) -> list[Envelope]:
            return [*start_events(job_id, call_id, record, tool, record.call, 1, source=self.source), *parts,
                    done_event(job_id, call_id, record, tool, record.call, result, started, finished,
                               source=self.source)]

        settled = self.intake.settle(job_id, call_id, record, record_sha, copy, messages=messages, events=events)
        if settled is None:
            return None, ran
        self._ended(job_id, record, CallStatus.DONE.value, finished - started, settled.commit)
        self.progress.committed(job_id, settled.commit, call_id)
        return Outcome(OutcomeStatus.DONE), None

    def _run_held(self, job_id: str, call_id: str, token: str, claim: Claimed, index: LogIndex | None,
                  announced: bool, ran: Ran | None) -> Outcome:
        """Run a claimed attempt while this process keeps its lease renewed."""
        self.leases.hold(job_id, call_id, token)
        try:
            self.hooks.before_call(job_id, claim.record, claim.attempt)
            if 0 < self.settings.max_deliveries <= claim.lost:
                return self._fail(job_id, call_id, token, claim, claim.record.call, self._delivery_limit(claim),
                                  time.time())
            return self._run_claimed(job_id, call_id, token, claim, index, announced, ran)
        finally:
            self.leases.release(job_id, call_id)
            if claim.record.relay:
                self.progress.relay(job_id)

    def _delivery_limit(self, claim: Claimed) -> CallFailure:
        """The failure of a poison call: the process running it died on each of its last deliveries."""
        limit = self.settings.max_deliveries
        return CallFailure("DeliveryLimitExceeded", f"the task of this call was delivered {claim.lost} times and "
                           f"the process running it died each time (limit: AGENTQ_MAX_DELIVERIES={limit}); it is "
                           "not run again", retryable=False)

    def _run_claimed(self, job_id: str, call_id: str, token: str, claim: Claimed, index: LogIndex | None,
                     announced: bool = False, ran: Ran | None = None) -> Outcome:
        """Run a claimed attempt and commit its outcome; `ran` is the handler's run before the claim, if any
        (its outcome is recorded instead of running the handler again)."""
        record, tool = claim.record, claim.tool or {}
        started = ran.started if ran is not None else time.time()
        resolved = record.call
        try:
            if not announced:  # else the call was validated and its start events published by the claim
                resolved = self._resolve(record, tool, index, claim.tool_sha)
                self.store.add_events(job_id, start_events(job_id, call_id, record, tool, resolved, claim.attempt,
                                                           source=self.source))
            if ran is not None:
                self._publish_ran(job_id, ran)
            if record.mode is CallMode.MODULE:
                self.delegation.start(job_id, call_id, token, record, resolved, tool, index or LogIndex())
                return Outcome(OutcomeStatus.DELEGATED)
            if record.mode is CallMode.WAIT:  # written `waiting`: its timer, an event or a signal ends it
                self.waits.open(job_id, call_id, token, record, resolved)
                return Outcome(OutcomeStatus.WAITING)
            result, messages = self._answer(job_id, call_id, record, resolved, tool, index, ran)
            self._check_writes(job_id, messages, index)
        except StoreUnavailableError:  # still unreachable after the retry window: the task is handed back
            raise
        except Exception as error:
            failure = classify(error, where=f"call {call_id} of job {job_id}")
            return self._fail(job_id, call_id, token, claim, resolved, failure, started)
        self._commit_done(job_id, call_id, token, claim, resolved, result, messages, started)
        return Outcome(OutcomeStatus.DONE)

    def _commit_done(self, job_id: str, call_id: str, token: str, claim: Claimed, resolved: dict, result: Any,
                     messages: list[dict], started: float) -> None:
        """Commit a succeeded attempt, then the job-progress step. When the claim sent what finalizing the job
        reads (`Claimed.last`: this is its plan job's last awaited call), the commit writes the job's end too."""
        record, finished = claim.record, time.time()
        done = done_event(job_id, call_id, record, claim.tool or {}, resolved, result, started, finished,
                          source=self.source)
        planned = (end_ahead(job_id, claim.last, call_id, messages, source=self.source)
                   if claim.last is not None and record.awaited else None)
        # the activity ran: its result is held here, and the commit sent again while the store is unreachable
        commit = self.store.commit(job_id, call_id, token=token, status=CallStatus.DONE, messages=messages,
                                   events=[done], awaited=record.awaited, ahead=planned.end if planned else None,
                                   lease_ms=int(self.settings.lease_s * 1000))
        self._ended(job_id, record, CallStatus.DONE.value, finished - started, commit)
        self.progress.committed(job_id, commit, call_id, planned)

    def _check_writes(self, job_id: str, messages: list[dict], index: LogIndex | None) -> None:
        """Raise for a write the log cannot take (a push or concat onto a non-array: docs/protocol.md#output-paths, a
        runtime error of the call). A call that reads nothing was claimed without the log, which only push and concat
        need."""
        if index is None and any(m.get("_outputMethod") in ("push", "concat") for m in messages):
            index = LogIndex(self.store.read_log(job_id))
        if index is not None:
            for message in messages:
                check_write(index, message)

    def _publish_ran(self, job_id: str, ran: Ran) -> None:
        """Publish what a run before the claim emitted, after the attempt's start events; raise what it raised."""
        if ran.parts:
            self.store.add_events(job_id, ran.parts)
        if ran.error is not None:
            raise ran.error

    def _answer(self, job_id: str, call_id: str, record: CallRecord, resolved: dict, tool: dict,
                index: LogIndex | None, ran: Ran | None) -> tuple[Any, list[dict]]:
        """The attempt's result and the messages it writes: the model's for a latent call, else the handler's
        (or its run before the claim)."""
        if record.mode is CallMode.LATENT:
            job = self.store.job_info(job_id)
            try:
                answer = run_latent(self.store, self.model, self.settings, job=job, call_id=call_id, record=record,
                                    call=resolved, tool=tool, index=index or LogIndex())
            except BudgetExceeded as error:  # not sent: the job (and its root job) fails, then this call
                stop_for_budget(self.progress, job, error)
                raise CallFailure("BudgetExceeded", str(error), retryable=False) from None
            if answer.thought:
                value = answer.value
                self.store.add_events(job_id, [Thought(job_id=job_id, call_id=call_id, part=thought_part(
                    value if isinstance(value, str) else json.dumps(value, ensure_ascii=False),
                    source=self.source, locale=record.locale))])
            return answer.value, answer.messages
        if ran is not None:
            result = ran.result
        else:
            result = self.runner.invoke(record, resolved, tool, index, job_id, call_id,
                                        lambda part: self.store.add_events(job_id, [part]))
        return result, output_messages(record.call, result, call_id=call_id, date=now_iso())

    def _resolve(self, record: CallRecord, tool: dict, index: LogIndex | None, tool_sha: str) -> dict:
        """The call with its references replaced by values, validated against its composed tool (whose stored JSON
        has SHA-1 `tool_sha`: its validator is kept)."""
        resolved = record.call
        if index is not None:
            resolved, missing = resolve_params(record.call, index, record.instance)
            if missing:
                raise CallFailure("UnresolvedReference", "references with no value once nothing could write them "
                                  "anymore: " + ", ".join(missing), retryable=False)
        try:
            validate_call(resolved, solution_for(tool), validator=self.intake.validators.of(tool, tool_sha))
        except InvalidInputError as error:
            raise CallFailure(type(error).__name__, str(error), retryable=False) from None
        return resolved

    def _fail(self, job_id: str, call_id: str, token: str, claim: Claimed, call: dict, failure: CallFailure,
              started: float) -> Outcome:
        """An attempt failed: released for its next attempt when the failure is retryable and attempts remain,
        else the call is committed as failed."""
        record = claim.record
        failure = masked(failure, call, claim.tool)
        delay = self._retry_in(record, failure, claim.attempt)
        if delay is not None:
            retrying = CallRetrying(job_id=job_id, call_id=call_id, tool=record.tool, attempt=claim.attempt,
                                    error=failure.error(), retry_in_s=round(delay, 3))
            if self.store.release_for_retry(job_id, call_id, token=token, event=retrying):
                self.hooks.after_call(CallEnded(job_id, record, "retry", time.time() - started))
                return Outcome(OutcomeStatus.RETRY, retry_in=delay)
            return Outcome(OutcomeStatus.DUPLICATE)
        finished = time.time()
        technical = technical_details(record.tool, arguments(call, claim.tool), None, started, finished, "error",
                                      str(failure))
        shown = Shown(content=f"{failure.type}: {failure}", display=(claim.tool or {}).get("x-display"),
                      technical=technical, duration_ms=round((finished - started) * 1000, 3))
        commit, event = commit_failure(self.store, job_id, call_id, token=token, record=record,
                                       error_type=failure.type, message=str(failure), source=self.source,
                                       shown=shown, lease_ms=int(self.settings.lease_s * 1000))
        self._ended(job_id, record, CallStatus.FAILED.value, finished - started, commit)
        self.progress.committed(job_id, commit, call_id)
        return Outcome(OutcomeStatus.FAILED, error=ErrorInfo.from_dict(event.error))

    def _retry_in(self, record: CallRecord, failure: CallFailure, attempt: int) -> float | None:
        """The wait before the call's next attempt, or None: an activity's own `retries` and `retry_backoff`;
        a call the engine answers (latent, module) retries like a model request."""
        if record.mode is not CallMode.EXPLICIT:
            return retry_in(failure, attempt, retries=self.settings.llm_max_attempts - 1, backoff_s=1.0)
        spec = self.runner.spec(record)
        return retry_in(failure, attempt, retries=spec.retries if spec else 0,
                        backoff_s=spec.retry_backoff if spec else 1.0)

    def _ended(self, job_id: str, record: CallRecord, status: str, seconds: float, commit: Commit | None) -> None:
        """Tell the hooks of an attempt whose commit took effect (a duplicate was told by its winner)."""
        if isinstance(commit, Committed):
            self.hooks.after_call(CallEnded(job_id, record, status, seconds))
