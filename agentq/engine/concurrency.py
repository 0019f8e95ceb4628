"""Starting jobs that waited for their concurrency keys (docs/tenants.md), and letting the next ones in when a job ends.

The store decides who holds a key (`Store.admit_concurrency`, `release_concurrency`); whoever it hands a job that
now holds its keys starts it here: the job turns from `waiting` to its status (once: `Store.start_waiting`), then
its ready calls' tasks or its first tick are sent. A job let in that ended meanwhile (canceled while it waited) is
released again, so its place goes on to the next in line.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Protocol

from agentq.errors import AgentQError, JobNotFoundError
from agentq.protocol.envelopes import JobQueued
from agentq.protocol.events import job_part
from agentq.protocol.records import CallRecord, JobInfo, JobKind
from agentq.protocol.status import CallStatus
from agentq.store.contracts import CallStore, JobReader, TenantStore


class ConcurrencyStore(TenantStore, CallStore, JobReader, Protocol):
    """What starting and releasing jobs' concurrency keys uses."""

log = logging.getLogger("agentq.executor")


class Dispatch(Protocol):
    """`engine.progress.Dispatch` (named here: the progress step imports this module)."""

    def __call__(self, job_id: str, records: list[CallRecord]) -> None: ...

    def tick(self, job_id: str, n: int = 0) -> None: ...


class Finisher(Protocol):
    """What starting a job needs of the job-progress step: to end a job that awaits no call."""

    def finish(self, job_id: str) -> bool: ...


def release_keys(store: ConcurrencyStore, dispatch: Dispatch, progress: Finisher, info: JobInfo) -> None:
    """A job that ended leaves its concurrency keys; the jobs that hold theirs now start. Best effort: the job's
    end stands either way."""
    if not info.job_options.concurrency:
        return
    try:
        start_jobs(store, dispatch, progress, info.tenant, store.release_concurrency(info.tenant, info.id))
    except AgentQError:  # the job did end: the next job that would wait for its keys releases it (store/concurrency)
        log.warning("job %s ended, but its concurrency keys could not be released now", info.id, exc_info=True)


def start_jobs(store: ConcurrencyStore, dispatch: Dispatch, progress: Finisher, tenant: str,
               job_ids: Iterable[str]) -> None:
    """Start each job that holds its keys now (see the module docstring)."""
    pending = list(job_ids)
    while pending:
        job_id = pending.pop(0)
        try:
            info = store.job_info(job_id)
        except JobNotFoundError:  # expired meanwhile: its place goes on
            pending += store.release_concurrency(tenant, job_id)
            continue
        event = JobQueued(job_id=job_id, kind=info.kind.value, calls=len(store.call_statuses(job_id)),
                          part=job_part("Job queued", kind=info.kind.value, source="agentq", locale=info.locale))
        if store.start_waiting(job_id, event=event):
            log.info("job %s holds its concurrency keys: started", job_id)
            send_started(store, dispatch, progress, info)
        elif store.job_status(job_id).is_final:  # canceled while it waited: its place goes on
            pending += store.release_concurrency(tenant, job_id)


def send_started(store: ConcurrencyStore, dispatch: Dispatch, progress: Finisher, info: JobInfo) -> None:
    """A started job's first tasks: an agent job's first tick, a plan job's ready calls."""
    if info.kind is JobKind.AGENT:
        dispatch.tick(info.id, info.exchanges)  # a resumed, continued or forked job's next request (0 for a new job)
        return
    statuses = store.call_statuses(info.id)
    ready = [call_id for call_id, status in statuses.items() if status is CallStatus.READY]
    if ready:
        dispatch(info.id, list(store.call_records(info.id, ready).values()))
    if info.open_calls <= 0:
        progress.finish(info.id)  # nothing awaited: no commit will finalize it (as at submission)


def sweep_keys(store: ConcurrencyStore, dispatch: Dispatch, progress: Finisher) -> None:
    """Start the jobs a lost release or start left waiting (`Store.sweep_concurrency`); a dispatcher's heartbeat
    runs it."""
    for tenant, job_ids in store.sweep_concurrency().items():
        log.info("concurrency keys of tenant %s: %d job(s) let in by the sweep", tenant, len(job_ids))
        start_jobs(store, dispatch, progress, tenant, job_ids)
