"""Running one Call: claim → resolve → validate → handler → commit → release successors → finalize.

This module knows the store and the protocol but not Celery: the Celery task in `runtime/app.py` is a thin
adapter that turns an `Outcome` with `retry_in` into `task.retry(...)`. Every step is safe to repeat: a
redelivered task finds its call already claimed or committed and only finishes what a crash may have
left undone (dispatching released calls, finalizing the job).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import random
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, cast

from agentq import metrics
from agentq.errors import AgentQError, InvalidInputError, NonRetryableError, ProtocolError, StoreUnavailableError
from agentq.protocol.activities import ActivityRegistry, ActivitySpec, invoke_handler
from agentq.protocol.cache import LRU
from agentq.protocol.envelopes import CallFinished, CallRetrying, CallStarted, Envelope, JobStarted, Part, Thought
from agentq.protocol.events import (
    activity_part,
    complete_part,
    technical_details,
    thought_part,
    tool_request_part,
    tool_result_part,
)
from agentq.protocol.records import CallMode, CallRecord, JobKind
from agentq.protocol.scopes import Emitter, ScopedContext
from agentq.protocol.sensitive import mask, redactor_for, sensitive_paths
from agentq.protocol.status import CallStatus, JobStatus
from agentq.protocol.validation import validate_call
from agentq.protocol.views import LogIndex, resolve_params
from agentq.protocol.writes import absorbs_failure, check_write, failure_messages, output_messages
from agentq.runtime.agent import AgentLoop
from agentq.runtime.caches import JobTools, LogCache, StaleCache, solution_for
from agentq.runtime.delegation import Delegation
from agentq.runtime.failures import CallFailure as _Failure
from agentq.runtime.finalize import finalize_job
from agentq.runtime.latent import run_latent
from agentq.runtime.leases import LeaseKeeper
from agentq.runtime.outages import PatientStore
from agentq.runtime.routing import Routing
from agentq.runtime.signing import TaskSigner
from agentq.settings import Settings
from agentq.store.base import FinishInputs, Store
from agentq.store.codecs import now_iso, record_digest
from agentq.store.replies import (
    Claim,
    Claimed,
    ClaimFinished,
    ClaimLeased,
    ClaimNotReady,
    ClaimUnstarted,
    Commit,
    CommitDuplicate,
    Committed,
    Settled,
    SettleStaleTool,
    SettleUnstarted,
)

log = logging.getLogger("agentq.executor")

Dispatch = Callable[[str, list[CallRecord]], None]
"""Sends the tasks of released calls: `dispatch(job_id, call_records)`."""


@dataclass
class Outcome:
    """What happened to one delivery of a call's task."""

    status: str  # done | failed | retry | leased | duplicate | finished | canceled | skipped
    retry_in: float | None = None
    error: dict | None = None  # a failed call's error, as recorded (sensitive values masked)


@dataclass
class Ran:
    """A handler's run before its call was claimed (an idempotent activity's signed task, see `_run_ahead`),
    carried into the usual claim-first path when the settle step could not record it, so it is not run again."""

    started: float
    result: Any = None
    error: Exception | None = None  # what the run raised, classified as in `_run_claimed`
    parts: list[Envelope] = field(default_factory=list)  # parts the activity emitted meanwhile, not published


class Executor:
    """Runs calls of any job for the activities in `activities`; one per process, shared by threads."""

    def __init__(self, store: Store, activities: ActivityRegistry, dispatch: Dispatch, *,
                 lease_s: float = 30.0, default_timeout_s: float = 900.0, max_result_bytes: int = 1_000_000,
                 source: str = "agentq", llm: Any = None, settings: Settings | None = None,
                 routing: Routing | None = None, known_activities: Callable[[], Mapping[str, Any]] | None = None,
                 modules: Any = None, submit_child: Callable[..., str] | None = None,
                 signer: TaskSigner | None = None):
        self.settings = settings or Settings(lease_s=lease_s)
        # every store step is retried while the store is unreachable (see runtime/outages.py); the lease
        # keeper has its own loop and keeps the store itself
        self.store = cast(Store, PatientStore(store, self.settings.store_retry_s))
        self.activities = activities
        self.dispatch = dispatch
        self.lease_ms = int(lease_s * 1000)
        self.default_timeout_s = default_timeout_s
        self.max_result_bytes = max_result_bytes
        self.source = source
        self.llm = llm  # the LLM for latent calls, module calls and agent ticks (None: they fail clearly)
        self.logs = LogCache()
        self.tools = JobTools()
        self.signer = signer  # checks the signature of tasks whose record may run before its claim
        self._started_jobs: LRU[str, bool] = LRU(4096)  # jobs a claim of this process found started
        self.leases = LeaseKeeper(store, lease_s)
        self._loops = threading.local()
        self.agent = AgentLoop(
            self.store, llm, dispatch, routing=routing or Routing.from_settings(self.settings),  # type: ignore[arg-type]
            settings=self.settings, known_activities=known_activities or (lambda: {}), finish=self.finish,
            leases=self.leases, source=source,
            module_loader=getattr(modules, "loader", None))
        self.delegation = Delegation(self.store, self.settings, library=modules,
                                     submit_child=submit_child, source=source)

    # ------------------------------------------------------------------------------------ delivery

    def timeout_of(self, spec: ActivitySpec) -> float:
        """The activity's own timeout, else `AGENTQ_DEFAULT_TIMEOUT_S` (SPEC §10)."""
        return spec.timeout if spec.timeout is not None else self.default_timeout_s

    def run_call(self, job_id: str, call_id: str, *, record: CallRecord | None = None,
                 signature: str | None = None) -> Outcome:
        """Run one delivery of a call's task. `record` is the call's record as the task carries it; the claim
        checks it against the stored one and the stored one is what runs (a task may carry none). A signed
        record of an idempotent activity runs before anything is claimed (`_run_ahead`)."""
        record_sha = record_digest(record) if record is not None else ""
        ran = None
        if record is not None and signature is not None and self._may_run_ahead(job_id, record, record_sha,
                                                                                signature):
            settled, ran = self._run_ahead(job_id, call_id, record, record_sha)
            if settled is not None:
                return settled
        token = uuid.uuid4().hex
        claim, index, announced = self._claim(job_id, call_id, token, record, record_sha)
        match claim:
            case Claimed():
                if claim.record_replaced:
                    ran = None  # it ran a record that is not the stored one: the stored one runs
                return self._run_held(job_id, call_id, token, claim, index, announced, ran)
            case ClaimLeased(lease_left_ms=left):
                return Outcome("leased", retry_in=max(left, 100) / 1000)
            case ClaimFinished():
                self.recover(job_id, call_id)
                return Outcome("finished")
            case ClaimNotReady(status=status):
                log.info("call %s of job %s not run: %s %s", call_id, job_id, claim.outcome, status)
            case _:
                log.info("call %s of job %s not run: %s", call_id, job_id, claim.outcome)
        return Outcome(claim.outcome.value)

    def _run_held(self, job_id: str, call_id: str, token: str, claim: Claimed, index: LogIndex | None,
                  announced: bool, ran: Ran | None) -> Outcome:
        """Run a claimed attempt while this process keeps its lease renewed."""
        self.leases.hold(job_id, call_id, token)
        try:
            if 0 < self.settings.max_deliveries <= claim.lost:
                return self._fail(job_id, call_id, token, claim, claim.record.call, self._delivery_limit(claim),
                                  time.time(), (claim.tool or {}).get("x-display"))
            return self._run_claimed(job_id, call_id, token, claim, index, announced, ran)
        finally:
            self.leases.release(job_id, call_id)
            if claim.record.relay:
                self._relay(job_id)

    def _delivery_limit(self, claim: Claimed) -> _Failure:
        """The failure of a poison call: the process running it died on each of its last deliveries."""
        limit = self.settings.max_deliveries
        return _Failure("DeliveryLimitExceeded", f"the task of this call was delivered {claim.lost} times and the "
                        f"process running it died each time (limit: AGENTQ_MAX_DELIVERIES={limit}); it is not run "
                        "again", retryable=False)

    def _claim(self, job_id: str, call_id: str, token: str, record: CallRecord | None,
               record_sha: str) -> tuple[Claim, LogIndex | None, bool]:
        """Claim the call; when it needs the log, bring this process's copy of the log up to date.

        When the task carries the call's record, the call reads nothing from the log and this process has
        a copy of its tool, the first attempt's start events (thought, call.started) are rendered now and
        published by the claim itself: one round trip instead of two. The claim publishes them only when the
        task's record and the tool are the stored ones, so they are not validated again: every stored record
        was validated against its job's tool when it was written (submission, an agent's solution, a
        reviewer's edit), and a record that reads nothing has no reference left to resolve. Any other record
        is validated after the claim (`_resolve`). Returns (claim, index, whether the start events were
        published)."""
        cached = self._tool_copy(job_id, record.tool) if record is not None else None
        needs_log = record is None or record.needs_log
        ahead = (self._start_events(job_id, call_id, record, cached[0], record.call, attempt=1)
                 if record and cached and not needs_log else [])
        offset = self.logs.offset(job_id) if needs_log else -1
        def claim_once() -> Claim:
            started = self._job_started(job_id, record)
            return self.store.claim(job_id, call_id, token=token, lease_ms=self.lease_ms, log_offset=offset,
                                    job_started=started, expect_started=started is None, record=record,
                                    record_sha=record_sha, tool_sha=cached[1] if cached else "",
                                    start_events=ahead)

        claim = claim_once()
        if isinstance(claim, ClaimUnstarted):  # a job id used again: this process's memory was stale
            self._started_jobs.pop(job_id)
            claim = claim_once()
        if not isinstance(claim, Claimed):
            return claim, None, False
        self._started_jobs.put(job_id, True)
        if claim.record_replaced:
            log.warning("call %s of job %s: the task's record differs from the stored one; running the stored "
                        "call", call_id, job_id)
        if claim.tool is not None:  # the store sent the tool: this process had no current copy
            claim = replace(claim, tool=self.tools.keep(job_id, claim.record.tool, claim.tool, claim.tool_sha))
        elif cached is not None:
            claim = replace(claim, tool=self.tools.keep(job_id, claim.record.tool, cached[0], cached[1]))
        if not claim.record.needs_log:
            return claim, None, claim.announced  # a later attempt publishes its own start events
        if not needs_log:  # the stored record reads the log although the task's did not: read all of it
            return claim, LogIndex(self.store.read_log(job_id)), False
        try:
            return claim, self.logs.extend(job_id, offset, claim.log_tail), False
        except StaleCache:  # another thread evicted or rebuilt the job's index meanwhile
            self.logs.forget(job_id)
            return claim, self.logs.extend(job_id, 0, self.store.read_log(job_id)), False

    def _tool_copy(self, job_id: str, name: str) -> tuple[dict, str] | None:
        """(schema, SHA-1) of this process's copy of a job's tool: the job's own, else the last one received of
        that name (the store confirms it is the job's before anything rendered from it is written)."""
        return self.tools.get(job_id, name) or self.tools.latest(name)

    # ------------------------------------------------------------------- running before the claim

    def _may_run_ahead(self, job_id: str, record: CallRecord, record_sha: str, signature: str) -> bool:
        """Whether a task's record may run before its claim: an explicit call of an activity registered
        idempotent, reading nothing from the log, not a module's child's call, signed by agentq."""
        if record.mode is not CallMode.EXPLICIT or record.needs_log or record.relay or self.signer is None:
            return False
        spec = self.activities.get(record.activity) if record.activity in self.activities else None
        if spec is None or not spec.idempotent:
            return False
        if not self.signer.verify(job_id, record.id, record_sha, signature):
            log.warning("call %s of job %s: its task's signature does not hold; claiming it first", record.id,
                        job_id)
            return False
        return True

    def _run_ahead(self, job_id: str, call_id: str, record: CallRecord,
                   record_sha: str) -> tuple[Outcome | None, Ran | None]:
        """Run an idempotent activity's call, then claim and commit its first attempt in one store step (see
        settle.lua): one round trip instead of two. Returns (its outcome, None) when that step recorded it,
        else (None, the run) for the usual path to claim the call and record that run (a failed run, a retry,
        a duplicate delivery, a canceled job, a write that needs the log), or (None, None) when this process has
        no copy of the call's tool yet (nothing ran)."""
        copy = self._tool_copy(job_id, record.tool)
        if copy is None:
            return None, None
        tool, tool_sha = copy
        parts: list[Envelope] = []
        started = time.time()
        try:
            result = self._invoke(record, record.call, tool, None, job_id, call_id, emitted=parts)
            self._check_result(result)
            messages = output_messages(record.call, result, call_id=call_id, date=now_iso())
        except StoreUnavailableError:
            raise
        except Exception as error:
            return None, Ran(started, error=error, parts=parts)
        ran = Ran(started, result=result, parts=parts)
        if any(m.get("_outputMethod") in ("push", "concat") for m in messages):
            return None, ran  # checking the target is an array needs the log: the usual path reads it
        finished = time.time()
        for _ in range(3):
            events = [*self._start_events(job_id, call_id, record, tool, record.call, 1), *parts,
                      self._done_event(job_id, call_id, record, tool, record.call, result, started, finished)]
            settle = self.store.settle(job_id, call_id, record_sha=record_sha, tool=record.tool, tool_sha=tool_sha,
                                       job_started=self._job_started(job_id, record), status=CallStatus.DONE,
                                       messages=messages, events=events)
            match settle:
                case SettleStaleTool(tool=stored, tool_sha=stored_sha):
                    tool, tool_sha = self.tools.keep(job_id, record.tool, stored, stored_sha), stored_sha
                case SettleUnstarted():
                    self._started_jobs.pop(job_id)
                case _:
                    break
        if not isinstance(settle, Settled):
            return None, ran
        self._started_jobs.put(job_id, True)
        self.tools.keep(job_id, record.tool, tool, tool_sha)
        metrics.call_ended(record, CallStatus.DONE.value, finished - started, settle.commit)
        self._after_commit(job_id, settle.commit, call_id)
        return Outcome("done"), None

    def _job_started(self, job_id: str, record: CallRecord | None) -> JobStarted | None:
        """The `job.started` event a claim publishes if it is the job's first; None once a claim of this process
        found the job started (it stays started), so the event is rendered about once per process and job."""
        if self._started_jobs.get(job_id):
            return None
        locale = record.locale if record is not None else "en"
        return JobStarted(job_id=job_id, part=activity_part("Job started", source=self.source, locale=locale))

    def _start_events(self, job_id: str, call_id: str, record: CallRecord, tool: dict, resolved: dict,
                      attempt: int) -> list[Envelope]:
        """The events published when an attempt starts: a thought (first attempt), then call.started."""
        call, name, locale = record.call, record.tool, record.locale
        first = attempt == 1
        events: list[Envelope] = []
        if first and call.get("_reasoningForCall"):
            events.append(Thought(job_id=job_id, call_id=call_id,
                                  part=thought_part(redactor_for(resolved, tool).redact(call["_reasoningForCall"]),
                                                    source=self.source, locale=locale)))
        # the tool_request part comes once per call (its first attempt), so the history pairs it with the
        # call's one tool_result into one tool_call; later attempts are told by `attempt` and call.retrying
        request = None if not first else tool_request_part(
            call_id=call_id, name=name, arguments=_arguments(resolved, tool), source=self.source, locale=locale,
            display=tool.get("x-display"))
        events.append(CallStarted(job_id=job_id, call_id=call_id, tool=name, attempt=attempt,
                                  instance=record.instance or None, part=request))
        return events

    def _run_claimed(self, job_id: str, call_id: str, token: str, claim: Claimed, index: LogIndex | None,
                     announced: bool = False, ran: Ran | None = None) -> Outcome:
        """Run a claimed attempt and commit its outcome; `ran` is the handler's run before the claim, if any
        (its outcome is recorded instead of running the handler again)."""
        record, tool = claim.record, claim.tool or {}
        call, locale = record.call, record.locale
        display = tool.get("x-display")
        started = ran.started if ran is not None else time.time()
        resolved = call
        try:
            if not announced:  # else the call was validated and its start events published by the claim
                resolved = self._resolve(call, record, tool, index)
                self.store.add_events(job_id, self._start_events(job_id, call_id, record, tool, resolved,
                                                                 claim.attempt))
            if ran is not None:
                if ran.parts:
                    self.store.add_events(job_id, ran.parts)
                if ran.error is not None:
                    raise ran.error
            if record.mode is CallMode.MODULE:
                self.delegation.start(job_id, call_id, token, record, resolved, tool, index or LogIndex())
                return Outcome("delegated")
            if record.mode is CallMode.LATENT:
                answer = run_latent(self.store, self.llm, self.settings, job_id=job_id, call_id=call_id,
                                    record=record, call=resolved, tool=tool, index=index or LogIndex(),
                                    model=self._model(job_id))
                result, messages = answer.value, answer.messages
                if answer.thought:
                    self.store.add_events(job_id, [Thought(job_id=job_id, call_id=call_id, part=thought_part(
                        result if isinstance(result, str) else json.dumps(result, ensure_ascii=False),
                        source=self.source, locale=locale))])
            else:
                result = ran.result if ran is not None else self._invoke(record, resolved, tool, index, job_id,
                                                                         call_id)
                self._check_result(result)
                messages = output_messages(call, result, call_id=call_id, date=now_iso())
            if index is None and any(m.get("_outputMethod") in ("push", "concat") for m in messages):
                # a call that reads nothing was claimed without the log; push/concat still need it to check
                # that the target is an array (SPEC §5: otherwise a runtime error of this call)
                index = LogIndex(self.store.read_log(job_id))
            if index is not None:
                for message in messages:
                    check_write(index, message)
        except _Failure as failure:
            return self._fail(job_id, call_id, token, claim, resolved, failure, started, display)
        except StoreUnavailableError:  # still unreachable after the retry window: the task is handed back
            raise
        except ProtocolError as error:  # e.g. a push onto a non-array, a message for an unknown branch
            protocol_failure = _Failure(type(error).__name__, str(error), retryable=False)
            return self._fail(job_id, call_id, token, claim, resolved, protocol_failure, started, display)
        except Exception as error:  # a defect, not the activity's: fail the call rather than leave it running
            log.exception("call %s of job %s: unexpected error before its commit", call_id, job_id)
            defect = _Failure(type(error).__name__, f"internal error: {error}", retryable=False)
            return self._fail(job_id, call_id, token, claim, resolved, defect, started, display)
        finished = time.time()
        done = self._done_event(job_id, call_id, record, tool, resolved, result, started, finished)
        # the activity ran: its result is held here, and the commit sent again while the store is unreachable
        commit = self.store.commit(job_id, call_id, token=token, status=CallStatus.DONE, messages=messages,
                                   events=[done])
        metrics.call_ended(record, CallStatus.DONE.value, finished - started, commit)
        self._after_commit(job_id, commit, call_id)
        return Outcome("done")

    def _done_event(self, job_id: str, call_id: str, record: CallRecord, tool: dict, resolved: dict, result: Any,
                    started: float, finished: float) -> CallFinished:
        """The `call.finished` event of an attempt that succeeded."""
        name = record.tool
        part = tool_result_part(
            call_id=call_id, name=name, content=result, is_error=False, source=self.source, locale=record.locale,
            display=tool.get("x-display"),
            technical=technical_details(name, _arguments(resolved, tool), result, started, finished, "success"))
        return CallFinished(job_id=job_id, call_id=call_id, tool=name, status=CallStatus.DONE.value,
                            duration_ms=round((finished - started) * 1000, 3), part=part)

    def _resolve(self, call: dict, record: CallRecord, tool: dict, index: LogIndex | None) -> dict:
        """The call with its references replaced by values, validated against its composed tool."""
        if index is not None:
            resolved, missing = resolve_params(call, index, record.instance)
            if missing:
                raise _Failure("UnresolvedReference",
                               "references with no value once nothing could write them anymore: "
                               + ", ".join(missing), retryable=False)
        else:
            resolved = call
        try:
            validate_call(resolved, solution_for(tool))
        except InvalidInputError as error:
            raise _Failure(type(error).__name__, str(error), retryable=False) from None
        return resolved

    def _model(self, job_id: str) -> str | None:
        model = self.store.job_info(job_id).options.get("model")
        return str(model) if model else None

    def _invoke(self, record: CallRecord, call: dict, tool: dict, index: LogIndex | None, job_id: str,
                call_id: str, emitted: list[Envelope] | None = None) -> Any:
        """Run the activity's handler. The parts it emits are published at once, or kept in `emitted` (a call
        run before its claim: its start events are not published yet)."""
        activity = record.activity
        if activity not in self.activities:
            raise _Failure("ActivityNotServed", f"this worker does not serve activity {activity!r}", retryable=True)
        spec = self.activities.get(activity)
        timeout = self.timeout_of(spec)
        def emit(part: Any) -> None:
            envelope = Part(job_id=job_id, call_id=call_id,
                            part=complete_part(part, source=self.source, locale=record.locale))
            if emitted is not None:
                emitted.append(envelope)
            else:
                self.store.add_events(job_id, [envelope])

        emitter = Emitter(job_id, call_id, emit)  # the context reaches `emit` (and so the store) only by key
        context = ScopedContext.build(index if index is not None else [], list(record.scopes), record.instance,
                                      emit=emitter)
        try:
            begun = time.monotonic()
            result = invoke_handler(spec, call, tool, context)
            if inspect.isawaitable(result):
                result = self._await(result, timeout)
            elif time.monotonic() - begun > timeout:
                # nothing interrupts a sync handler in a threads pool (Celery's time limits need prefork):
                # its late result is discarded and the call times out as it would under the soft limit
                raise TimeoutError(f"timed out after {timeout} s")
            return result
        except NonRetryableError as error:
            raise _Failure(error.type, str(error), retryable=False) from None
        except StoreUnavailableError:  # its `emit` could not reach the store within the retry window
            raise
        except AgentQError as error:
            raise _Failure(type(error).__name__, str(error), retryable=False) from None
        except Exception as error:  # the activity raised: a runtime error of this call
            message = str(error) or type(error).__name__
            if isinstance(error, asyncio.TimeoutError) or type(error).__name__ == "SoftTimeLimitExceeded":
                message = f"timed out after {timeout} s"
            raise _Failure(type(error).__name__, message, retryable=True) from None
        finally:
            emitter.close()

    def _await(self, awaitable: Any, timeout: float) -> Any:
        loop = getattr(self._loops, "loop", None)
        if loop is None or loop.is_closed():
            loop = self._loops.loop = asyncio.new_event_loop()
        return loop.run_until_complete(asyncio.wait_for(awaitable, timeout))

    def _fail(self, job_id: str, call_id: str, token: str, claim: Claimed, call: dict, failure: _Failure,
              started: float, display: dict | None) -> Outcome:
        record = claim.record
        name = record.tool
        failure = _masked(failure, call, claim.tool)
        spec = self.activities.get(record.activity) if record.activity in self.activities else None
        engine_call = record.mode is not CallMode.EXPLICIT  # its retries are model requests
        retries = self.settings.llm_max_attempts - 1 if engine_call else spec.retries if spec else 0
        if failure.retryable and claim.attempt <= retries:
            backoff = spec.retry_backoff if spec and not engine_call else 1.0
            delay = backoff * (2 ** (claim.attempt - 1)) * random.uniform(0.5, 1.0)
            if failure.retry_in is not None:
                delay = max(failure.retry_in, 0.0)
            retrying = CallRetrying(job_id=job_id, call_id=call_id, tool=name, attempt=claim.attempt,
                                    error={"type": failure.type, "message": str(failure)},
                                    retry_in_s=round(delay, 3))
            if self.store.release_for_retry(job_id, call_id, token=token, event=retrying):
                metrics.call_ended(record, "retry", time.time() - started)
                return Outcome("retry", retry_in=delay)
            return Outcome("duplicate")
        finished = time.time()
        messages = failure_messages(record.call, call_id=call_id, error_type=failure.type,
                                    message=str(failure), date=now_iso())
        part = tool_result_part(
            call_id=call_id, name=name, content=f"{failure.type}: {failure}", is_error=True, source=self.source,
            locale=record.locale, display=display,
            technical=technical_details(name, _arguments(call, claim.tool), None, started, finished, "error",
                                        str(failure)))
        event = CallFinished(job_id=job_id, call_id=call_id, tool=name, status=CallStatus.FAILED.value,
                             duration_ms=round((finished - started) * 1000, 3),
                             error={"type": failure.type, "message": str(failure)},
                             absorbed=absorbs_failure(record.call), part=part)
        commit = self.store.commit(job_id, call_id, token=token, status=CallStatus.FAILED, messages=messages,
                                   events=[event])
        metrics.call_ended(record, CallStatus.FAILED.value, finished - started, commit)
        self._after_commit(job_id, commit, call_id)
        return Outcome("failed", error=event.error)

    # --------------------------------------------------------------------------- after a commit

    def _after_commit(self, job_id: str, commit: Commit | None, call_id: str | None = None) -> None:
        """Send the calls a commit released and take the job's next step. A commit of this attempt's own call
        that finds it committed already (its first reply was lost to a store outage, or a takeover committed
        it) finishes whatever that commit may have left undone, as a redelivery would."""
        if isinstance(commit, CommitDuplicate) and call_id is not None:
            self.recover(job_id, call_id)
            return
        if not isinstance(commit, Committed):
            return
        if commit.job_status is JobStatus.CANCELED and call_id is not None:
            log.info("call %s of job %s ended after its job was canceled: its outcome is recorded, marked "
                     "after_cancel", call_id, job_id)
        if commit.released:
            self.dispatch(job_id, commit.released)
        if commit.open_calls <= 0 and commit.job_status.is_active and not commit.ticking:
            if commit.kind is JobKind.PLAN:
                self.finish(job_id, inputs=commit.finish_inputs)
            else:
                self.advance(job_id)

    def advance(self, job_id: str) -> None:
        """The job has no open awaited call: a plan job ends; an agent job ends or asks for its next solution."""
        info = self.store.job_info(job_id)
        if info.kind is JobKind.AGENT:
            self.agent.advance(job_id)
        elif info.status.is_active:
            self.finish(job_id)

    def recover(self, job_id: str, call_id: str) -> None:
        """A redelivered task of a finished call: finish what a crash after the commit may have skipped."""
        dependents = self.store.dependents(job_id, call_id)
        if dependents:
            statuses = self.store.call_statuses(job_id)
            ready = [d for d in dependents if statuses.get(d) is CallStatus.READY]
            if ready:
                self.dispatch(job_id, list(self.store.call_records(job_id, ready).values()))
        info = self.store.job_info(job_id)
        if info.open_calls <= 0 and info.status.is_active and not info.ticking:
            self.advance(job_id)

    def tick(self, job_id: str, n: int = 0) -> float | None:
        """Make an agent job's model request number `n` (see `runtime/agent.py`); returns seconds to wait
        before the task tries again, or None."""
        try:
            return self.agent.tick(job_id, n)
        finally:
            self._relay(job_id)  # a module's child job: its tick's events reach the parent's stream

    def _relay(self, job_id: str) -> None:
        """Copy a module's child job's new events to its parent's stream (see `StateStore.relay_events`)."""
        try:
            self.store.relay_events(job_id)
        except AgentQError:
            log.warning("could not relay the events of job %s to its parent job", job_id, exc_info=True)

    def _check_result(self, result: Any) -> None:
        """A result must be JSON, and at most `AGENTQ_MAX_RESULT_BYTES` of it, to be stored; anything else
        fails the call now (not its commit, later)."""
        try:
            size = len(json.dumps(result, ensure_ascii=False).encode())
        except (TypeError, ValueError, RecursionError) as error:
            raise _Failure("InvalidResult", f"the activity returned a value that is not JSON: {error}",
                           retryable=False) from None
        if size > self.max_result_bytes:
            raise _Failure("ResultTooLarge", f"the activity's result is {size} bytes of JSON; the limit is "
                           f"{self.max_result_bytes} (AGENTQ_MAX_RESULT_BYTES)", retryable=False)

    def finish(self, job_id: str, *, error: dict | None = None, inputs: FinishInputs | None = None) -> bool:
        """Give a job its final status and record (idempotent); a module's child job then resumes the call
        it ran for. `inputs`: what finalizing reads, when a commit's reply brought it."""
        finalized = finalize_job(self.store, job_id, source=self.source, error=error, inputs=inputs)
        parent = finalized.info.parent
        if finalized.ended and parent:
            self._relay(job_id)
            self._after_commit(str(parent["job"]), self.delegation.resume(finalized.info, finalized.record))
        return finalized.ended

    finalize = finish


def _arguments(call: dict, tool: dict | None) -> dict:
    """A call's parameters as a front end shows them: without meta fields, sensitive values masked."""
    return mask({k: v for k, v in call.items() if not k.startswith("_")}, sensitive_paths(tool))


def _masked(failure: _Failure, call: dict, tool: dict | None) -> _Failure:
    """The failure with the call's sensitive values masked in its message (an exception's text may quote them)."""
    redactor = redactor_for(call, tool)
    message = redactor.redact(str(failure)) if redactor else str(failure)
    if message == str(failure):
        return failure
    return _Failure(failure.type, message, retryable=failure.retryable, retry_in=failure.retry_in)
