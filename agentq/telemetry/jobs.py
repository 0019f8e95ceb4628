"""A job's trace when its submitter did not trace: created once, by the first process that traces the job.

A submitter that traces stores its `submit job` span's context in the job's hash (`traceparent`); one that does not
stores the `traceparent` it was given, if any. When neither is there, the first process with a tracer that needs the
job's context (a tick, a call's task sent without a `traceparent` header) starts the job's root span, `job` (from
the job's creation to now; a module's child job's is a child of its parent job's context), and stores its context
with one HSETNX-like step (`Store.adopt_traceparent`): of two processes doing it at once, one wins, the other drops
its span unended (so it is never exported) and continues the winner's. From then on every tick, call and child job
of the job continues that one trace.

The composition root binds the process's store (`bind`); with none bound, or tracing off, nothing is created.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from agentq import telemetry
from agentq.errors import AgentQError, JobNotFoundError

if TYPE_CHECKING:
    from agentq.protocol.records import JobInfo

log = logging.getLogger("agentq.telemetry")

ROOT_SPAN = "job"
_MAX_NESTING = 32  # a module's child job's parents are read up to this deep (module nesting is limited far below)


class TraceContexts(Protocol):
    """What this module needs of the state store (`agentq.store.base.Store` has both)."""

    def job_info(self, job_id: str) -> JobInfo: ...

    def adopt_traceparent(self, job_id: str, traceparent: str) -> str | None: ...


_store: TraceContexts | None = None


def bind(store: TraceContexts | None) -> None:
    """The store job contexts are read from and stored in (the composition root's; None: unbound, tests)."""
    global _store
    _store = store
    telemetry.resolve_jobs_with(job_traceparent if store is not None else None)


def job_traceparent(job_id: str, info: JobInfo | None = None) -> str | None:
    """The job's stored trace context, created and stored first when it has none (while tracing is on and a store
    is bound; None otherwise, or when the job is gone). Never raises: a trace is not worth failing a job for."""
    store = _store
    if store is None or not telemetry.enabled():
        return None
    try:
        return _context(store, job_id, info, 0)
    except AgentQError as error:
        log.debug("job %s: its trace context could not be read or stored (%s)", job_id, error)
        return None


def _context(store: TraceContexts, job_id: str, info: JobInfo | None, depth: int) -> str | None:
    """The job's context (None: no such job); a module child's parent that is gone leaves it a root of its own."""
    if info is None:
        try:
            info = store.job_info(job_id)
        except JobNotFoundError:
            return None
    if info.traceparent:
        return info.traceparent
    above = None
    if info.parent is not None and depth < _MAX_NESTING:
        above = _context(store, info.parent.job, None, depth + 1)
    span = _root_span(info, above)
    proposed = telemetry._traceparent(span)
    if proposed is None:
        return None
    stored = store.adopt_traceparent(info.id, proposed)
    if stored == proposed:
        span.end()  # this process won: its span is the job's root; a loser's is never ended, so never exported
    return stored


def _root_span(info: JobInfo, above: str | None) -> Any:
    """The `job` span: a child of `above` (a module's parent job), else a new trace's root, not the current
    context's child (a worker's, whatever it runs)."""
    from opentelemetry.context import Context

    context = telemetry._context_of(above) or Context()
    return telemetry._tracer.start_span(ROOT_SPAN, context=context, start_time=_ns(info.created_at), attributes={
        "agentq.job.id": info.id, "agentq.job.kind": info.kind.value, "gen_ai.conversation.id": info.id})


def _ns(iso: str | None) -> int | None:
    """The nanoseconds since the epoch of a stored timestamp (None: now)."""
    try:
        return int(datetime.fromisoformat(iso).timestamp() * 1e9) if iso else None
    except ValueError:
        return None
