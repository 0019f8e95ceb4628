"""Running one Call: claim → resolve → validate → handler → commit → release successors → finalize.

This module knows the store and the protocol but not Celery: the Celery task in `tasks.py` is a thin
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
from dataclasses import dataclass
from typing import Any, Callable

from agentq.errors import AgentQError, InvalidInputError, NonRetryableError, ProtocolError
from agentq.protocol.activities import ActivityRegistry, invoke_handler
from agentq.protocol.events import (
    activity_part,
    complete_part,
    technical_details,
    thought_part,
    tool_request_part,
    tool_result_part,
)
from agentq.protocol.scopes import ScopedContext
from agentq.protocol.validation import validate_call
from agentq.protocol.views import LogIndex, resolve_params
from agentq.protocol.writes import absorbs_failure, check_write, failure_messages, output_messages
from agentq.runtime.events import envelope
from agentq.runtime.caches import JobTools, LogCache, StaleCache, solution_for
from agentq.runtime.finalize import finalize_job
from agentq.runtime.leases import LeaseKeeper
from agentq.store.state import Claim, StateStore, now_iso

log = logging.getLogger("agentq.executor")

Dispatch = Callable[[str, list[dict]], None]
"""Sends the tasks of released calls: `dispatch(job_id, call_records)`."""


@dataclass
class Outcome:
    """What happened to one delivery of a call's task."""

    status: str  # done | failed | retry | leased | duplicate | finished | canceled | skipped
    retry_in: float | None = None


class _Failure(Exception):
    """A call failure with the type name recorded in its error message; `retryable` decides retries."""

    def __init__(self, type_: str, message: str, *, retryable: bool):
        super().__init__(message)
        self.type = type_
        self.retryable = retryable


class Executor:
    """Runs calls of any job for the activities in `activities`; one per process, shared by threads."""

    def __init__(self, store: StateStore, activities: ActivityRegistry, dispatch: Dispatch, *,
                 lease_s: float = 30.0, source: str = "agentq", llm: Any = None):
        self.store = store
        self.activities = activities
        self.dispatch = dispatch
        self.lease_ms = int(lease_s * 1000)
        self.source = source
        self.llm = llm  # the LLM seam for latent calls, module calls and agent ticks
        self.logs = LogCache()
        self.tools = JobTools()
        self.leases = LeaseKeeper(store, lease_s)
        self._loops = threading.local()

    # ------------------------------------------------------------------------------------ delivery

    def run_call(self, job_id: str, call_id: str, *, needs_log: bool = True, locale: str = "en",
                 record: dict | None = None) -> Outcome:
        """Run one delivery of a call's task. `record` is the call's record as the task carries it (tasks
        sent by an older dispatcher, or by hand, carry none: the claim then reads it from the store)."""
        token = uuid.uuid4().hex
        claim, index, announced = self._claim(job_id, call_id, token, needs_log, locale, record)
        if claim.outcome == "leased":
            return Outcome("leased", retry_in=max(int(claim.detail), 100) / 1000)
        if claim.outcome == "finished":
            self.recover(job_id, call_id)
            return Outcome("finished")
        if claim.outcome != "claimed":
            log.info("call %s of job %s not run: %s %s", call_id, job_id, claim.outcome, claim.detail)
            return Outcome(claim.outcome)
        self.leases.hold(job_id, call_id, token)
        try:
            return self._run_claimed(job_id, call_id, token, claim, index, announced)
        finally:
            self.leases.release(job_id, call_id)

    def _claim(self, job_id: str, call_id: str, token: str, needs_log: bool, locale: str = "en",
               record: dict | None = None) -> tuple[Claim, LogIndex | None, bool]:
        """Claim the call; when it needs the log, bring this process's copy of the log up to date.

        When the task carries the call's record, the call reads nothing from the log and this process has
        the job's tool already, the call is validated now and its start events (thought, call.started) are
        published by the claim itself: one round trip instead of two. Returns (claim, index, whether the
        start events were published)."""
        cached = self.tools.get(job_id, record["tool"]) if record is not None else None
        ahead = self._start_ahead(job_id, call_id, record, cached[0]) if cached and not needs_log else []
        offset = self.logs.offset(job_id) if needs_log else -1
        started = envelope("job.started", job_id, part=activity_part("Job started", source=self.source,
                                                                     locale=locale))
        claim = self.store.claim(job_id, call_id, token=token, lease_ms=self.lease_ms, log_offset=offset,
                                 job_started=started, record=record, tool_sha=cached[1] if cached else "",
                                 start_events=ahead)
        if claim.outcome != "claimed":
            return claim, None, False
        if claim.tool is not None:  # the store sent the tool: this process had no current copy
            claim.tool = self.tools.keep(job_id, claim.record["tool"], claim.tool, claim.tool_sha)
        elif cached is not None:
            claim.tool = cached[0]
        if not needs_log:
            return claim, None, claim.announced  # a later attempt publishes its own start events
        try:
            return claim, self.logs.extend(job_id, offset, claim.log_tail), False
        except StaleCache:  # another thread evicted or rebuilt the job's index meanwhile
            self.logs.forget(job_id)
            return claim, self.logs.extend(job_id, 0, self.store.read_log(job_id)), False

    def _start_ahead(self, job_id: str, call_id: str, record: dict, tool: dict) -> list[dict]:
        """The first attempt's start events of a call that reads nothing, rendered before its claim for the
        claim to publish; none when the call does not validate (the failure is handled after the claim)."""
        try:
            validate_call(record["call"], solution_for(tool))
        except InvalidInputError:
            return []
        return self._start_events(job_id, call_id, record, tool, record["call"], attempt=1)

    def _start_events(self, job_id: str, call_id: str, record: dict, tool: dict, resolved: dict,
                      attempt: int) -> list[dict]:
        """The events published when an attempt starts: a thought (first attempt), then call.started."""
        call, name, locale = record["call"], record["tool"], record.get("locale", "en")
        first = attempt == 1
        events = []
        if first and call.get("_reasoningForCall"):
            events.append(envelope("thought", job_id, call_id=call_id,
                                   part=thought_part(call["_reasoningForCall"], source=self.source,
                                                     locale=locale)))
        # the tool_request part comes once per call (its first attempt), so the history pairs it with the
        # call's one tool_result into one tool_call; later attempts are told by `attempt` and call.retrying
        request = None if not first else tool_request_part(
            call_id=call_id, name=name, arguments=_arguments(resolved), source=self.source, locale=locale,
            display=tool.get("x-display"))
        where = {"instance": record["instance"]} if record.get("instance") else {}
        events.append(envelope("call.started", job_id, call_id=call_id, tool=name, attempt=attempt, **where,
                               part=request))
        return events

    def _run_claimed(self, job_id: str, call_id: str, token: str, claim: Claim, index: LogIndex | None,
                     announced: bool = False) -> Outcome:
        record, tool = claim.record or {}, claim.tool or {}
        call, name, locale = record["call"], record["tool"], record.get("locale", "en")
        display = tool.get("x-display")
        started = time.time()
        resolved = call
        try:
            if not announced:  # else the call was validated and its start events published by the claim
                resolved = self._resolve(call, record, tool, index)
                self.store.add_events(job_id, self._start_events(job_id, call_id, record, tool, resolved,
                                                                 claim.attempt))
            result = self._invoke(record, resolved, tool, index, job_id, call_id)
            _check_json(result)
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
        except ProtocolError as error:  # e.g. a push onto a non-array, a message for an unknown branch
            failure = _Failure(type(error).__name__, str(error), retryable=False)
            return self._fail(job_id, call_id, token, claim, resolved, failure, started, display)
        except Exception as error:  # a defect, not the activity's: fail the call rather than leave it running
            log.exception("call %s of job %s: unexpected error before its commit", call_id, job_id)
            failure = _Failure(type(error).__name__, f"internal error: {error}", retryable=False)
            return self._fail(job_id, call_id, token, claim, resolved, failure, started, display)
        finished = time.time()
        part = tool_result_part(
            call_id=call_id, name=name, content=result, is_error=False, source=self.source, locale=locale,
            display=display,
            technical=technical_details(name, _arguments(resolved), result, started, finished, "success"))
        done = envelope("call.finished", job_id, call_id=call_id, tool=name, status="done",
                        duration_ms=round((finished - started) * 1000, 3), part=part)
        commit = self.store.commit(job_id, call_id, token=token, status="done", messages=messages, events=[done])
        self._after_commit(job_id, commit)
        return Outcome("done")

    def _resolve(self, call: dict, record: dict, tool: dict, index: LogIndex | None) -> dict:
        """The call with its references replaced by values, validated against its composed tool."""
        if index is not None:
            resolved, missing = resolve_params(call, index, record.get("instance"))
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

    def _invoke(self, record: dict, call: dict, tool: dict, index: LogIndex | None, job_id: str,
                call_id: str) -> Any:
        if record.get("mode", "explicit") != "explicit" and self.llm is None:
            raise _Failure("LLMNotConfigured", f"{record['mode']} call of tool {record['tool']!r} needs an LLM: "
                           "set ANTHROPIC_API_KEY for the dispatcher", retryable=False)
        activity = record["activity"]
        if activity not in self.activities:
            raise _Failure("ActivityNotServed", f"this worker does not serve activity {activity!r}", retryable=True)
        spec = self.activities.get(activity)
        context = ScopedContext.build(
            index if index is not None else [], record.get("scopes") or [], record.get("instance"),
            emit=lambda part: self.store.add_events(job_id, [envelope(
                "part", job_id, call_id=call_id, part=complete_part(part, source=self.source,
                                                                    locale=record.get("locale", "en")))]),
        )
        try:
            begun = time.monotonic()
            result = invoke_handler(spec, call, tool, context)
            if inspect.isawaitable(result):
                result = self._await(result, spec.timeout)
            elif spec.timeout is not None and time.monotonic() - begun > spec.timeout:
                # nothing interrupts a sync handler in a threads pool (Celery's time limits need prefork):
                # its late result is discarded and the call times out as it would under the soft limit
                raise TimeoutError(f"timed out after {spec.timeout} s")
            return result
        except NonRetryableError as error:
            raise _Failure(error.type, str(error), retryable=False) from None
        except AgentQError as error:
            raise _Failure(type(error).__name__, str(error), retryable=False) from None
        except Exception as error:  # the activity raised: a runtime error of this call
            message = str(error) or type(error).__name__
            if isinstance(error, asyncio.TimeoutError) or type(error).__name__ == "SoftTimeLimitExceeded":
                message = f"timed out after {spec.timeout} s"
            raise _Failure(type(error).__name__, message, retryable=True) from None

    def _await(self, awaitable: Any, timeout: float | None) -> Any:
        loop = getattr(self._loops, "loop", None)
        if loop is None or loop.is_closed():
            loop = self._loops.loop = asyncio.new_event_loop()
        coro = awaitable if timeout is None else asyncio.wait_for(awaitable, timeout)
        return loop.run_until_complete(coro)

    def _fail(self, job_id: str, call_id: str, token: str, claim: Claim, call: dict, failure: _Failure,
              started: float, display: dict | None) -> Outcome:
        record = claim.record or {}
        name = record["tool"]
        spec = self.activities.get(record["activity"]) if record["activity"] in self.activities else None
        retries = spec.retries if spec else 0
        if failure.retryable and claim.attempt <= retries:
            backoff = spec.retry_backoff if spec else 1.0
            delay = backoff * (2 ** (claim.attempt - 1)) * random.uniform(0.5, 1.0)
            event = envelope("call.retrying", job_id, call_id=call_id, tool=name, attempt=claim.attempt,
                             error={"type": failure.type, "message": str(failure)}, retry_in_s=round(delay, 3))
            if self.store.release_for_retry(job_id, call_id, token=token, event=event):
                return Outcome("retry", retry_in=delay)
            return Outcome("duplicate")
        finished = time.time()
        messages = failure_messages(record["call"], call_id=call_id, error_type=failure.type,
                                    message=str(failure), date=now_iso())
        absorbed = absorbs_failure(record["call"])
        part = tool_result_part(
            call_id=call_id, name=name, content=f"{failure.type}: {failure}", is_error=True, source=self.source,
            locale=record.get("locale", "en"), display=display,
            technical=technical_details(name, _arguments(call), None, started, finished, "error", str(failure)))
        events = [envelope("call.finished", job_id, call_id=call_id, tool=name, status="failed",
                           duration_ms=round((finished - started) * 1000, 3),
                           error={"type": failure.type, "message": str(failure)}, absorbed=absorbed, part=part)]
        commit = self.store.commit(job_id, call_id, token=token, status="failed", messages=messages,
                                   events=events)
        self._after_commit(job_id, commit)
        return Outcome("failed")

    # --------------------------------------------------------------------------- after a commit

    def _after_commit(self, job_id: str, commit: Any) -> None:
        if commit.outcome != "committed":
            return
        if commit.released:
            self.dispatch(job_id, commit.released)
        if commit.open_calls <= 0 and commit.job_status in ("queued", "running"):
            self.finalize(job_id)

    def recover(self, job_id: str, call_id: str) -> None:
        """A redelivered task of a finished call: finish what a crash after the commit may have skipped."""
        records = self.store.call_records(job_id)
        statuses = self.store.call_statuses(job_id)
        record = records.get(call_id) or {}
        pending = [records[d] for d in record.get("dependents", []) if statuses.get(d) == "ready"]
        if pending:
            self.dispatch(job_id, pending)
        fields = self.store.job_fields(job_id)
        if int(fields.get("open", 1)) <= 0 and fields.get("status") in ("queued", "running"):
            self.finalize(job_id)

    def tick(self, job_id: str) -> None:
        """One agent tick. Agent jobs ask an LLM for calls; with no LLM configured the job fails clearly."""
        if self.llm is None:
            self.finalize(job_id, error={"type": "LLMNotConfigured",
                                         "message": "agent jobs (no `calls`) need an LLM: set ANTHROPIC_API_KEY "
                                                    "for the dispatcher, or submit a plan job with calls"})

    def finalize(self, job_id: str, *, error: dict | None = None) -> bool:
        """Give a plan job whose awaited calls all finished its final status and record (idempotent)."""
        return finalize_job(self.store, job_id, source=self.source, error=error)


def _check_json(result: Any) -> None:
    """A result must be JSON to be stored; anything else fails the call now (not its commit, later)."""
    try:
        json.dumps(result)
    except (TypeError, ValueError) as error:
        raise _Failure("InvalidResult", f"the activity returned a value that is not JSON: {error}",
                       retryable=False) from None


def _arguments(call: dict) -> dict:
    """A call's parameters as a front end shows them: without meta fields."""
    return {k: v for k, v in call.items() if not k.startswith("_")}
