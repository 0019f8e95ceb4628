"""Continue and fork a job (docs/continue-and-fork.md), for every shell: the HTTP API, the clients, the CLI.

Both write a new agent job through the job service's own steps (planning, the tenant's admission, the one atomic
write, its deadline, its webhook, its start), with a `Seed`: the log and exchanges copied from the old job as
stored, so the new job's first request repeats the old conversation byte for byte (`protocol/conversation.py`
rebuilds every request from them). Every check comes first and nothing is written when one fails: another tenant's
job or an unknown one is `JobNotFoundError` (404), an expired one `JobExpiredError` (410), a job that cannot be
copied so `ConflictError` (409), a bad request one `JobValidationError` naming every problem by its pointer (422).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from agentq import telemetry
from agentq.engine.job_lookup import everyone, readable, unknown
from agentq.errors import ConflictError, JobNotFoundError, JobValidationError, Problem
from agentq.protocol.continuation import (
    CONTINUE_FIELDS,
    FORK_FIELDS,
    CopySource,
    ForkCut,
    Seed,
    body_problems,
    context_length,
    continue_lineage,
    decoded,
    fork_cut,
    fork_lineage,
    merged_options,
    shifted,
)
from agentq.protocol.digests import dumps
from agentq.protocol.envelopes import Part
from agentq.protocol.events import activity_part
from agentq.protocol.jobs import JobPlan
from agentq.protocol.records import JobKind, JobRecord
from agentq.protocol.status import JOB_FINAL
from agentq.runtime.service import JobService, _queued

log = logging.getLogger("agentq.continuation")

Visible = Callable[[str], bool]
"""Whether the caller may see a job of this tenant (the API's principal); None: every tenant's."""


class Continuations:
    """Continue, fork, and list threads and forks, over one `JobService`."""

    def __init__(self, service: JobService):
        self.service = service
        self.store = service.store

    # --------------------------------------------------------------------------------------------- continue

    def continue_job(self, job_id: str, body: Any, *, visible: Visible | None = None) -> str:
        """A new agent job continuing the ended agent job `job_id` with `body` (`{"context": [messages],
        "options"?}`); returns its id."""
        source = self._source(job_id, visible)
        info = source.info
        if info.kind is not JobKind.AGENT:
            raise ConflictError(f"job {job_id!r} is a plan job: it has no conversation to continue (only an agent "
                                "job can be continued; submit a new plan job instead)")
        if info.status not in JOB_FINAL:
            raise ConflictError(f"job {job_id!r} is {info.status.value}: only an ended job can be continued; "
                                "continue it once it has ended")
        problems = body_problems(body, CONTINUE_FIELDS)
        valid = body if isinstance(body, dict) else {}
        context = _list_or_empty(valid.get("context"))
        job = self._job(source, context, valid.get("options"), list(source.registered.values()))
        plan = self._plan(job, problems)
        lineage = continue_lineage(job_id, info.lineage)
        seed = Seed(log=source.log + tuple(dumps(m) for m in plan.context), exchanges=source.exchanges,
                    fields={"ticks": 0, "exchanges": len(source.exchanges), "lineage": dumps(lineage)})
        note = f"Continues job {job_id}: its conversation, state and tools, then {len(plan.context)} new message(s)"
        new_id = self._write(plan, job, seed, info.tenant, note)
        self.store.list_copy(new_id, thread=lineage["thread"], expire_at_ms=_expire_at_ms(plan))
        log.info("job %s continues job %s (thread %s)", new_id, job_id, lineage["thread"])
        self._start(plan, info.tenant)
        return new_id

    # ------------------------------------------------------------------------------------------------- fork

    def fork(self, job_id: str, body: Any, *, visible: Visible | None = None) -> str:
        """A new agent job replaying the first `at_tick` ticks of agent job `job_id` and running live from there
        with the changes of `body` (`{"at_tick": N, "options"?, "tools"?, "context"?}`); returns its id."""
        source = self._source(job_id, visible)
        info = source.info
        if info.kind is not JobKind.AGENT:
            raise JobValidationError("fork rejected", [Problem("/at_tick", f"job {job_id!r} is a plan job: it has "
                                     "no ticks to replay (only an agent job can be forked; submit the plan job "
                                     "again with the change instead)")])
        problems = body_problems(body, FORK_FIELDS)
        valid = body if isinstance(body, dict) else {}
        exchanges = decoded(source.exchanges)
        cut = _cut(valid, exchanges, len(source.log))
        if isinstance(cut, Problem):
            problems.append(cut)
        first = context_length(exchanges, len(source.log))
        new_context = valid.get("context")
        given = valid.get("tools")
        tools: list = given if isinstance(given, list) else list(source.registered.values())
        job = self._job(source, _list_or_empty(new_context), valid.get("options"), tools)
        plan = self._plan(job, problems)
        assert isinstance(cut, ForkCut)  # a problem of the cut raised above
        head = tuple(dumps(m) for m in plan.context) if new_context is not None else source.log[:first]
        lineage = fork_lineage(job_id, cut)
        seed = Seed(log=head + source.log[first:cut.log_length] if cut.at_tick else head,
                    exchanges=shifted(source.exchanges[:cut.exchanges], len(head) - first),
                    fields={"ticks": cut.at_tick, "exchanges": cut.exchanges, "lineage": dumps(lineage)})
        note = (f"Forks job {job_id} at tick {cut.at_tick}: ticks 1-{cut.at_tick} replayed (no model request, no "
                "activity run, no cost)" if cut.at_tick else f"Forks job {job_id} at tick 0: every tick runs live")
        new_id = self._write(plan, {**job, "fork": {"of": job_id, "at_tick": cut.at_tick}}, seed, info.tenant, note)
        self.store.list_copy(new_id, forked_from=job_id, expire_at_ms=_expire_at_ms(plan))
        log.info("job %s forks job %s at tick %d", new_id, job_id, cut.at_tick)
        self._start(plan, info.tenant)
        return new_id

    # ---------------------------------------------------------------------------------------------- listings

    def thread(self, thread: str, *, visible: Visible | None = None) -> dict[str, Any]:
        """A thread's jobs in order, each with the messages it added and its record (an agent job nobody continued
        yet is the thread of itself alone); `JobNotFoundError` for an unknown thread or another tenant's."""
        listed = self.store.thread_jobs(thread) or [thread]
        jobs = [entry for entry in (self._entry(job_id, visible) for job_id in listed) if entry is not None]
        if listed == [thread] and jobs and (jobs[0]["record"].get("thread") or jobs[0]["kind"] != "agent"):
            jobs = []  # a continuation, or a plan job: not the first job of a thread
        if not jobs:
            raise unknown(thread)
        return {"thread": thread, "jobs": jobs}

    def forks(self, job_id: str, *, visible: Visible | None = None) -> dict[str, Any]:
        """A job's forks, oldest first, each with its tick and its record."""
        self._visible(job_id, visible)
        forks = [entry for entry in (self._entry(f, visible) for f in self.store.forks_of(job_id)) if entry]
        return {"job": job_id, "forks": forks}

    def _entry(self, job_id: str, visible: Visible | None) -> dict[str, Any] | None:
        """One job of a listing: its record and the messages it added; None when it expired or is not visible."""
        try:
            info = self.store.job_info(job_id)
            if visible is not None and not visible(info.tenant):
                return None
            record: JobRecord = self.store.record(job_id)
        except JobNotFoundError:
            return None
        submitted = self.store.submitted_job(job_id)
        messages = submitted.get("context") if isinstance(submitted, dict) else None
        return {"id": job_id, "kind": info.kind.value, "messages": messages or [], "record": record.to_dict()}

    # ------------------------------------------------------------------------------------------------ steps

    def _visible(self, job_id: str, visible: Visible | None) -> None:
        readable(self.store, job_id, sees=visible or everyone)

    def _source(self, job_id: str, visible: Visible | None) -> CopySource:
        """The job to copy: 404 for another tenant's (as for an unknown one), 410 once its data expired."""
        source = self.store.copy_source(job_id)
        if visible is not None and not visible(source.info.tenant):
            raise unknown(job_id)
        return source

    @staticmethod
    def _job(source: CopySource, context: list, options: Any, tools: list) -> dict[str, Any]:
        """The new job as it is planned (and kept as submitted): its new messages, the old options with the given
        ones over them, its tools, the old output schema."""
        job: dict[str, Any] = {"context": context, "tools": tools,
                               "options": merged_options(source.info.options,
                                                         options if isinstance(options, dict) else None)}
        submitted = source.submitted if isinstance(source.submitted, dict) else {}
        if submitted.get("output") is not None:
            job["output"] = submitted["output"]
        return job

    def _plan(self, job: dict[str, Any], problems: list[Problem]) -> JobPlan:
        """Plan the new job as a submission is planned; every problem (the request's and the plan's) in one
        `JobValidationError`, nothing written."""
        found = list(problems)
        plan: JobPlan | None = None
        try:
            plan, _ = self.service._plan(job, len(json.dumps(job, ensure_ascii=False).encode()), None)
        except JobValidationError as error:
            found += [p for p in error.problems if p not in found]
        if found or plan is None:
            raise JobValidationError("request rejected", _unique(found))
        return plan

    def _write(self, plan: JobPlan, job: dict[str, Any], seed: Seed, tenant: str, note: str) -> str:
        """Write the new job in one step (submit.lua with its seed), admitted under its tenant's limits, with its
        webhook watched and its deadline set, as a submission; its events start with `job.queued` and a part saying
        what it copied (`note`)."""
        service = self.service
        with telemetry.submission(None) as trace:
            trace.job(plan.id, plan.kind.value)
            if service.webhooks is not None and plan.options.get("webhook") is not None:
                service.webhooks.watch(plan.id, int(time.time() * 1000))
            with service._admitted(plan, tenant, child=False) as taken_back:
                copied = Part(job_id=plan.id, part=activity_part(note, source="agentq", locale=plan.options["locale"]))
                written = service.store.create_job(plan, [], submitted=job, events=[_queued(plan), copied],
                                                   traceparent=trace.traceparent, tenant=tenant, seed=seed,
                                                   start_check_ms=service.start_check(plan, [], None, time.time()))
                if not written:
                    taken_back()
        if not written:
            raise ConflictError(f"a job with id {plan.id!r} exists already")
        service.set_deadline(plan.id, plan.options, time.time())
        return plan.id

    def _start(self, plan: JobPlan, tenant: str) -> None:
        """Send the new job's first tick (numbered by the exchanges it copied), or let it wait for its concurrency
        keys as any job."""
        service = self.service
        admission = getattr(service.dispatcher, "admission", None)
        if admission is not None:
            admission.know(plan.id, tenant, plan.options.get("priority"), plan.tools)
        keys = plan.options.get("concurrency")
        if keys:
            from agentq.protocol.concurrency import concurrency_keys

            service._admit_keys(plan.id, tenant, concurrency_keys(keys), plan.ttl_s)
            return
        service.progress.advance(plan.id)


def _cut(body: dict, exchanges: list[dict], log_length: int) -> ForkCut | Problem:
    if "at_tick" not in body:
        return Problem("/at_tick", "required: the tick after which the fork runs live (0: from the start)")
    return fork_cut(exchanges, log_length, body["at_tick"])


def _list_or_empty(value: Any) -> list:
    return value if isinstance(value, list) else []


def _unique(problems: list[Problem]) -> list[Problem]:
    seen: list[Problem] = []
    for problem in problems:
        if problem not in seen:
            seen.append(problem)
    return seen


def _expire_at_ms(plan: JobPlan) -> int:
    return int((time.time() + plan.ttl_s) * 1000)


__all__ = ["Continuations", "Visible"]
