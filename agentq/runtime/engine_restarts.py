"""After a restart of the state store, the engine's tasks it lost are published again: `lost_engine_work`.

The restart check (`runtime/restarts.py`) finds the admitted activity calls whose tasks a restart lost. The engine's
own tasks are not admitted: an agent job's tick, and the task of a latent, module or wait call (published to the
engine queue at once, `Admission.gated`). A restart can lose them alike (a dispatcher took one off its queue in the
instant the server stopped and never recorded it as unacknowledged), and then nothing sends them again: the job
stays `queued` or `running` for good.

So, on the same restart, the check reads the heads of the fleet's active jobs (`Store.active_job_heads`: at most
`ACTIVE_JOBS`, a pipeline per 200 jobs) and publishes again, where the broker holds no task for it (neither queued
nor unacknowledged):

- each ready call of the engine's (not admitted) of a job that was sent its work (not `scheduled`, not `waiting`
  for its concurrency keys);
- each ready activity call of such a job, handed to the admission (`AdmissionSweep._unadmitted`): one nobody
  admitted (the process that made it ready — a tick's dispatcher — died before admitting it) is admitted now, an
  admitted one whose task is lost is sent again, a parked one stays parked;
- the next tick of each such agent job that is due one: no awaited call open, and no tick in flight (or one whose
  lease is gone: its process died with it). Its task's number is the job's model requests so far;
- the task of an ended call of each plan job due its end (no awaited call open) that did not end: the process that
  committed its last call died before ending it (the task of such a call is not kept unacknowledged where the broker
  is the store's Redis: `runtime/redis_transport.py`). Its delivery finds the call ended and ends the job, as a
  redelivery does (`JobProgress.recover`).

A copy is harmless: a call is claimed once, and a tick's claim is exclusive by its number (`begin_tick`): a tick
that was not lost, or that another process is about to send, runs once; a job ends once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from agentq.engine.routing import tick_task_id
from agentq.protocol.records import CallMode, CallRecord, JobKind
from agentq.protocol.status import JobStatus
from agentq.store.contracts import CallStore, RestartStore
from agentq.store.views import JobHead

ACTIVE_JOBS = 20_000  # the most active jobs looked at after a restart (about 0.15 ms each, read in pages of 200)
_UNSENT = (JobStatus.SCHEDULED, JobStatus.WAITING)  # nothing of such a job is sent yet: its start sends it


class EngineWorkReads(RestartStore, CallStore, Protocol):
    """What finding the engine's lost tasks reads: the active jobs' heads, their ready calls' records."""


@dataclass
class EngineWork:
    """The engine's tasks a restart lost: calls (job id, record) and ticks (job id, request number)."""

    calls: list[tuple[str, CallRecord]] = field(default_factory=list)
    ticks: list[tuple[str, int]] = field(default_factory=list)
    looked_at: int = 0  # active jobs read
    # ready activity calls whose task the broker holds nowhere: for the admission (admitted ones are sent again,
    # parked ones stay parked, those nobody admitted — their process died first — are admitted now)
    activity: list[tuple[str, CallRecord]] = field(default_factory=list)
    # an ended call of each plan job due its end that did not end: its task, sent again, ends the job
    ends: list[tuple[str, CallRecord]] = field(default_factory=list)


def due_tick(head: JobHead) -> int | None:
    """The number of the tick an active job is due, when it is an agent job that was sent its work, with no awaited
    call open and no live tick in flight; else None."""
    if head.kind is not JobKind.AGENT or head.status in _UNSENT or head.open_calls > 0:
        return None
    if head.ticking and head.tick_leased:
        return None
    return head.exchanges


def engine_call(record: CallRecord, engine_queue: str) -> bool:
    """Whether a call's task is the engine's (published without admission: `Admission.gated`'s complement)."""
    return record.mode is not CallMode.EXPLICIT or record.queue == engine_queue


# one read of the broker for the three kinds of lost work (engine calls, ticks, activity calls), each filtered alike
def lost_engine_work(store: EngineWorkReads, held: Callable[[Sequence[str]], set[str]], engine_queue: str,
                     task_id: Callable[[str, str], str]) -> EngineWork:
    """The engine's tasks of the active jobs that the broker does not hold. `held(queues)`: the ids of the tasks the
    broker holds on those queues (queued or unacknowledged); `task_id(job, call)`: a call task's id."""
    heads = store.active_job_heads(ACTIVE_JOBS)
    due = _due(store, heads, engine_queue)
    if not due.calls and not due.ticks and not due.activity and not due.ends:
        return due
    holds = held(sorted({engine_queue, *(record.queue for _, record in due.calls + due.activity + due.ends)}))
    return EngineWork([(j, r) for j, r in due.calls if task_id(j, r.id) not in holds],
                      [(j, n) for j, n in due.ticks if tick_task_id(j, n) not in holds], due.looked_at,
                      [(j, r) for j, r in due.activity if task_id(j, r.id) not in holds],
                      [(j, r) for j, r in due.ends if task_id(j, r.id) not in holds])


def _due(store: EngineWorkReads, heads: Sequence[JobHead], engine_queue: str) -> EngineWork:
    """The ready engine calls and the due ticks of the jobs of `heads` that were sent their work."""
    due = EngineWork(looked_at=len(heads))
    for head in heads:
        if head.status in _UNSENT:
            continue
        if head.ready:
            records = store.call_records(head.job_id, list(head.ready)).values()
            due.calls += [(head.job_id, r) for r in records if engine_call(r, engine_queue)]
            due.activity += [(head.job_id, r) for r in records if not engine_call(r, engine_queue)]
        n = due_tick(head)
        if n is not None:
            due.ticks.append((head.job_id, n))
        if due_end(head):
            due.ends += _an_ended_call(store, head.job_id)
    return due


def due_end(head: JobHead) -> bool:
    """Whether an active plan job that was sent its work is due its end: no awaited call open."""
    return head.kind is JobKind.PLAN and head.status not in _UNSENT and head.open_calls <= 0 and not head.ticking


def _an_ended_call(store: EngineWorkReads, job_id: str) -> list[tuple[str, CallRecord]]:
    """One ended call of the job (none when it has none): whose task's delivery takes the job's next step."""
    ended = sorted(c for c, status in store.call_statuses(job_id).items() if status.is_final)
    records = store.call_records(job_id, ended[-1:]) if ended else {}
    return [(job_id, record) for record in records.values()]
