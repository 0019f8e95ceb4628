"""The admission of ready calls to their Celery queues (docs/tenants.md): `Admission`.

A ready call of an activity queue is published only once admitted: per queue, at most a window of calls are
admitted and not yet ended (`AGENTQ_ADMISSION_WINDOW`, else the slots of the live workers serving the queue, as
their heartbeats announce them, plus `AGENTQ_ADMISSION_PREFETCH`); the others wait in Redis, parked per tenant and
priority, and each place an ended call gives back goes to the next parked call, round-robin across tenants by
their weight (the fleet's `tenants`, `agentq config`), by `options.priority` inside a tenant, never over a
tenant's `max_running_calls`. So one tenant's burst delays another tenant's job by no more than the calls already
admitted. The engine's own calls (latent and module calls, on the engine queue) are not gated.

The state is the store's (`store/admission.py`, one Lua step); this module builds what the step takes and turns
its answer into calls to publish. `sweep` (every heartbeat, one process of the fleet at a time) gives back the
places of calls that ended without saying so (a canceled job, a process that died between a call's end and the
step) and publishes again an admitted call still ready after `AGENTQ_ADMISSION_REPUBLISH_S` (its publisher died
before publishing it; a duplicate task is harmless: a claim is taken once). Where the broker is the store's Redis,
it also publishes at once, after a restart of the store, the admitted calls whose tasks the restart lost
(`runtime/restarts.py`).

The place of a call that ended and released nothing is given back off the caller's path, in groups: once a
`publisher` is set, `ended` only notes the call, and a thread of the process gives back what was noted in the
last `GIVE_BACK_S` in one step (and publishes the parked calls it admits); the next step this process makes for
other reasons (a submission, an end that released calls) takes the noted places along. A process that dies with
places noted leaves them to the sweep, as one dying between a call's end and its step always did.
"""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from agentq.protocol.admission import (
    PUSHED,
    AdmissionConfig,
    AdmissionRequest,
    Ticket,
    admission_member,
)
from agentq.protocol.cache import LRU
from agentq.protocol.call_keys import CallKey, tool_keys
from agentq.protocol.concurrency import concurrency_keys
from agentq.protocol.jobs import JobPlan
from agentq.protocol.priority import admission_level
from agentq.protocol.records import CallMode, CallRecord, JobKind
from agentq.protocol.views import LogIndex
from agentq.runtime.admission_sweep import AdmissionSteps, AdmissionSweep, Publish
from agentq.runtime.give_back import Noted

if TYPE_CHECKING:
    from agentq.protocol.tenants import TenantLimits
    from agentq.runtime.pushed import PushedTasks
    from agentq.settings import Settings
    from agentq.store.contracts import FleetStore

log = logging.getLogger("agentq.admission")

KEPT_JOBS = 4096  # jobs whose tenant and priority one process keeps


class Admission(AdmissionSweep):
    """What one process asks of the admission step and what it publishes (shared by threads)."""

    def __init__(self, store: AdmissionSteps, settings: Settings,
                 tenant_limits: Callable[[], dict[str, TenantLimits]] | None = None, *, fleet: FleetStore):
        self.store = store
        self.fleet = fleet  # the live workers' announcements: the windows per queue
        self.settings = settings
        self.engine_queue = settings.engine_queue
        # the tenants' limits as read now (the fleet's config: they change while the process runs)
        self.tenant_limits = tenant_limits if tenant_limits is not None else lambda: settings.tenant_limits
        self._shares: tuple[object, dict[str, float], dict[str, int]] | None = None
        self._jobs: LRU[str, tuple[str, int]] = LRU(KEPT_JOBS)
        self._keys: LRU[str, dict[str, CallKey]] = LRU(KEPT_JOBS)  # a job's tools' x-concurrency, by tool
        self._windows: tuple[float, dict[str, int], dict[str, int]] = (0.0, {}, {})
        self.publisher: Callable[[Publish], None] | None = None  # set: places are given back in groups
        self.pushed: PushedTasks | None = None  # set: the step pushes the tasks it admits (`runtime/pushed.py`)
        self._noted = Noted(enough=self.group)
        self._with_writes: dict[str, AdmissionRequest] = {}  # new jobs' steps made with their writes, by job

    @property
    def weights(self) -> dict[str, float]:
        """The tenants' weights other than 1."""
        return self._tenant_shares()[0]

    @property
    def maxima(self) -> dict[str, int]:
        """The tenants' `max_running_calls`."""
        return self._tenant_shares()[1]

    def _tenant_shares(self) -> tuple[dict[str, float], dict[str, int]]:
        limits = self.tenant_limits()
        shares = self._shares
        if shares is None or shares[0] is not limits:
            shares = (limits, {t: lim.weight for t, lim in limits.items() if lim.weight != 1},
                      {t: lim.max_running_calls for t, lim in limits.items() if lim.max_running_calls})
            self._shares = shares
        return shares[1], shares[2]

    def gated(self, record: CallRecord) -> bool:
        """Whether the call waits for admission: an activity's call (not the engine's own)."""
        return record.mode is CallMode.EXPLICIT and bool(record.queue) and record.queue != self.engine_queue

    def know(self, job_id: str, tenant: str, priority: object, tools: dict[str, dict] | None = None) -> None:
        """Remember a job's tenant, `options.priority` and tools (the job service, which just wrote it)."""
        self._jobs.replace(job_id, (tenant, admission_level(priority)))
        if tools is not None:
            self._keys.replace(job_id, tool_keys(tools))

    def config(self) -> AdmissionConfig:
        fixed = self.settings.admission_window
        prefetch = self.settings.admission_prefetch
        return AdmissionConfig(windows={} if fixed else self._live_windows(), default_window=fixed or prefetch,
                               batch=self._batch(fixed or prefetch), weights=self.weights, maxima=self.maxima)

    def _batch(self, window: int) -> int:
        """The free places a queue's parked calls wait for: where this process publishes what a step admits, half
        the prefetch (a few tasks per publication); where the step pushes the tasks itself, one (nothing to group,
        and a wait only drains the queue: the workers of a one-job burst of short calls went idle waiting)."""
        if self.pushed is not None:
            return 1
        return max(1, min(self.settings.admission_prefetch, window) // 2)

    def group(self) -> int:
        """How many places of ended calls this process gives back in one step (`runtime/give_back.py`): a quarter
        of the prefetch, fewer where many processes share a queue's window. Each process serving a queue (a prefork
        child each; a threads pool's one) may hold back a group less one, so a group less one is at most a queue's
        window over twice those processes, which leaves at least half of every window in flight: 4 for one prefork
        worker of two children and the default prefetch (a window of 18), 3 for four children, 2 for eight or
        sixteen, 1 from thirty-two; 4 for a threads worker of any size."""
        group = max(1, self.settings.admission_prefetch // 4)
        fixed = self.settings.admission_window
        self._live_windows()
        _, windows, holders = self._windows  # one reading: another thread may read the fleet again meanwhile
        for queue, processes in holders.items():
            group = min(group, 1 + (fixed or windows[queue]) // (2 * processes))
        return max(1, group)

    def _live_windows(self) -> dict[str, int]:
        """Per queue: the slots of the live workers serving it, plus the prefetch (read once per heartbeat)."""
        at, windows, _ = self._windows
        if time.monotonic() - at < min(self.settings.heartbeat_s, 2.0):
            return windows
        slots: dict[str, int] = defaultdict(int)
        holders: dict[str, int] = defaultdict(int)  # the processes holding places back (`group`)
        for worker in self.fleet.live_workers():
            for queue in worker.queues:
                slots[queue] += max(worker.concurrency, 1)
                holders[queue] += worker.processes or max(worker.concurrency, 1)  # unannounced: one per slot
        windows = {queue: n + self.settings.admission_prefetch for queue, n in slots.items()}
        self._windows = (time.monotonic(), windows, dict(holders))
        return windows

    def admit(self, job_id: str, records: Sequence[CallRecord], *, ended: Sequence[str] = ()) -> Publish:
        """Which of a job's ready calls (and of the parked calls the `ended` members' places go to) to publish: for
        a new job's calls whose step was made with its write (`with_write`), what that step admitted."""
        request = self._with_writes.pop(job_id, None) if self._with_writes else None
        if request is not None and request.reply is not None and self._same_calls(job_id, records, request):
            return self._written(job_id, records, request)
        out, gated, tickets = self._tickets(job_id, records)
        if not gated and not ended:
            return out
        noted = self._noted.take()  # the places noted go along with the step
        try:
            reply = self.store.admit_calls(tickets, self.config(), ended=[*ended, *noted])
        except Exception:
            self._noted.put_back(noted)
            raise
        return out + self._answer(reply, job_id, gated)

    def _tickets(self, job_id: str, records: Sequence[CallRecord]) -> tuple[Publish, list[CallRecord], list[Ticket]]:
        """The calls published without admission, the gated ones and their tickets."""
        out, gated = self._split(job_id, records)
        if not gated:
            return out, gated, []
        tenant, priority = self._job(job_id)
        keys = self._call_keys(job_id, gated)
        payloads = self._payloads(job_id, gated)
        tickets = [Ticket(member=admission_member(job_id, r.id), queue=r.queue, tenant=tenant, priority=priority,
                          key=keys.get(r.id, ("", 0))[0], limit=keys.get(r.id, ("", 0))[1], payload=payload)
                   for r, payload in zip(gated, payloads, strict=True)]
        return out, gated, tickets

    def _payloads(self, job_id: str, gated: Sequence[CallRecord]) -> list[str]:
        """What publishes each call once admitted: its task, pushed by the step itself (`pushed`), else its record."""
        pushed = self.pushed.payloads([(job_id, r) for r in gated]) if self.pushed is not None else None
        return pushed or [json.dumps([job_id, r.to_task()], separators=(",", ":")) for r in gated]

    def with_write(self, plan: JobPlan, ready: list[CallRecord], tenant: str, *, fresh: bool) -> WithWrite | None:
        """The admission step of a new job's `ready` calls to make with its write (`Store.create_job`: one round
        trip on a single Redis), for a plan job whose id was just made (`fresh`: its write never finds one, so
        what is learnt of it here is its own) that starts at once (no concurrency keys), where this admission
        publishes (`publisher`). None: none, or a concurrency key names the job's log (read once it is written)."""
        if not fresh or self.publisher is None or not self._starts_gated(plan, ready):
            return None
        self.know(plan.id, tenant, plan.options.get("priority"), plan.tools)
        keys = self._keys.get(plan.id) or {}
        if any(keys[r.tool].is_reference for r in ready if r.tool in keys):
            return None
        _, _, tickets = self._tickets(plan.id, ready)
        request = self._with_writes[plan.id] = AdmissionRequest(tickets, self.config())
        return WithWrite(self, plan.id, ready, request)

    def _starts_gated(self, plan: JobPlan, ready: list[CallRecord]) -> bool:
        """Whether a plan job starts at once (no concurrency keys) with gated calls among its `ready` ones."""
        return plan.kind is JobKind.PLAN and not concurrency_keys(plan.options.get("concurrency")) and \
            any(self.gated(r) for r in ready)

    def _same_calls(self, job_id: str, records: Sequence[CallRecord], request: AdmissionRequest) -> bool:
        """Whether `records` are the calls `request` asked for (else a step of their own: it finds those admitted
        or parked already, and sends the admitted ones again)."""
        return [t.member for t in request.tickets] == [admission_member(job_id, r.id) for r in records if self.gated(r)]

    def _written(self, job_id: str, records: Sequence[CallRecord], request: AdmissionRequest) -> Publish:
        """Which of a written job's ready calls to publish: what `request`'s step, made with the write, admitted."""
        out, gated = self._split(job_id, records)
        return out + self._answer(request.reply or [], job_id, gated)

    def _split(self, job_id: str, records: Sequence[CallRecord]) -> tuple[Publish, list[CallRecord]]:
        """A job's calls published without admission, and the gated ones."""
        out: Publish = []
        gated: list[CallRecord] = []
        for record in records:
            if self.gated(record):
                gated.append(record)
            else:
                out.append((job_id, record))
        return out, gated

    def withdraw(self, job_id: str, records: Sequence[CallRecord], request: AdmissionRequest) -> None:
        """The write of a job failed after `request`'s step, made with it (`with_write`), may have run: the job's
        calls it admitted give their places back, unpublished; the other jobs' calls it admitted are published."""
        self._with_writes.pop(job_id, None)
        if self.publisher is not None:
            self.publisher(self._withdrawn(job_id, records, request))

    def _withdrawn(self, job_id: str, records: Sequence[CallRecord], request: AdmissionRequest) -> Publish:
        """A job whose write failed after `request`'s step ran: its calls that step admitted give their places
        back (never published); the other jobs' parked calls it admitted are what to publish. (A task the step
        pushed itself is on its queue already: the step ran only because the job's hash existed, so a fresh id's
        job was written, and the worker's claim finds it.)"""
        if request.reply is None:
            return []
        answered = self._answer(request.reply, job_id, self._split(job_id, records)[1])
        others: Publish = []
        while answered:  # a place given back may go to another of the job's parked calls: given back in turn
            ours = [admission_member(job_id, r.id) for j, r in answered if j == job_id]
            others += [(j, r) for j, r in answered if j != job_id]
            answered = self._answer(self.store.admit_calls([], self.config(), ended=ours), "", []) if ours else []
        return others

    def ended(self, job_id: str, call_ids: Sequence[str], released: Sequence[CallRecord]) -> Publish:
        """Calls of a job ended (their places go to parked calls) and others became ready: what to publish. With a
        `publisher` and nothing released, the places are only noted: a thread gives them back soon, in a group."""
        members = [admission_member(job_id, c) for c in call_ids]
        if released or self.publisher is None:
            return self.admit(job_id, released, ended=members)
        self._noted.add(members, self._give_back)
        return []

    def close(self) -> None:
        """The process's runtime closes: its giving-back thread gives back what was noted and ends (a runtime built
        and closed again and again, as tests and embedded clients do, leaves no thread behind)."""
        self._noted.close()

    def _give_back(self) -> None:
        """Give back the places noted (the thread's turn): the parked calls they admit are published."""
        members = self._noted.take()
        if not members or self.publisher is None:
            return
        try:
            reply = self.store.admit_calls([], self.config(), ended=members)
        except Exception:
            self._noted.put_back(members)
            raise
        self.publisher(self._answer(reply, "", []))

    def _call_keys(self, job_id: str, records: Sequence[CallRecord]) -> dict[str, tuple[str, int]]:
        """The concurrency key (as counted) and limit of each call whose tool has `x-concurrency`."""
        if not records:
            return {}
        keys = self._keys.get(job_id)
        if keys is None:
            keys = self._keys.replace(job_id, tool_keys(self.store.job_tools(job_id)))
        if not keys:
            return {}
        keyed = [(r, keys[r.tool]) for r in records if r.tool in keys]
        index = LogIndex(self.store.read_log(job_id)) if any(k.is_reference for _, k in keyed) else None
        return {r.id: (k.counted(k.value(index, r.instance)), k.limit) for r, k in keyed}

    def _job(self, job_id: str) -> tuple[str, int]:
        known = self._jobs.get(job_id)
        if known is None:
            info = self.store.job_info(job_id)
            known = (info.tenant, admission_level(info.job_options.priority))
            self._jobs.replace(job_id, known)
        return known

    @staticmethod
    def _answer(reply: list[str], job_id: str, gated: Sequence[CallRecord]) -> Publish:
        """What a step's `reply` leaves to publish (not the tasks it pushed itself)."""
        out: Publish = []
        for item in reply:
            if item.startswith("#"):
                out.append((job_id, gated[int(item[1:]) - 1]))
            elif not item.startswith(PUSHED):
                parked_job, task = json.loads(item)
                out.append((parked_job, CallRecord.from_dict(task)))
        return out


class WithWrite:
    """A new job's admission step made with its write (`Admission.with_write`): `request` goes to
    `Store.create_job`; then the dispatch of the job's ready calls publishes what it admitted (`Admission.admit`;
    a step of their own when it did not run), or, the job not written, `withdraw`."""

    def __init__(self, admission: Admission, job_id: str, ready: list[CallRecord], request: AdmissionRequest):
        self.admission, self.job_id, self.ready, self.request = admission, job_id, ready, request

    def withdraw(self) -> None:
        """The write failed: the job's calls the step admitted give their places back, unpublished."""
        self.admission.withdraw(self.job_id, self.ready, self.request)
