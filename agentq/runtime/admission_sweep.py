"""The admission's sweep (docs/tenants.md): `AdmissionSweep`, a mixin of `Admission` (`runtime/admission.py`).

Every heartbeat, one process of the fleet gives back the places of admitted calls that ended without saying so (a
canceled job, a process that died between a call's end and its step), fills the queues with parked calls, and
publishes again an admitted call still ready after `AGENTQ_ADMISSION_REPUBLISH_S` (its publisher died before
publishing it; a duplicate task is harmless: a claim is taken once). Where the broker is the store's Redis, it also
publishes at once, after a restart of the store, the admitted calls whose tasks the restart lost, and the engine's
lost calls and ticks (`runtime/restarts.py`, `runtime/engine_restarts.py`), and the engine's lost tasks again when a
process of the fleet live at its last sweep is gone (its heartbeat expired: killed, most likely), with the ready
activity calls nobody admitted (the process that made them ready died first) whose task the broker holds nowhere,
which it admits; and, at any sweep, an admitted call still ready a heartbeat after its admission, or running with
its lease gone (its process died), whose task the broker holds nowhere. Kombu's Redis transport takes a task off its
queue, then records it as unacknowledged: a process killed between the two loses it, and only the 300 s republish
would have sent a ready admitted call's task again, nothing a running one's or an engine task. A copy of a running
call's task takes the call over (`claim.lua`: its lease is gone).
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from agentq.protocol.admission import AdmissionConfig, admission_member, split_member
from agentq.protocol.records import CallRecord
from agentq.protocol.status import CallStatus
from agentq.runtime.restarts import RestartReads, StoreRestarts
from agentq.store.contracts import CallStore, JobReader, JobStore

if TYPE_CHECKING:
    from agentq.runtime.pushed import PushedTasks
    from agentq.settings import Settings
    from agentq.store.contracts import FleetStore

log = logging.getLogger("agentq.admission")

Publish = list[tuple[str, CallRecord]]  # (job id, call record) of each call to publish


class AdmissionSteps(RestartReads, JobStore, JobReader, CallStore, Protocol):
    """What admission and its sweep need of the store: the admission steps, the calls' statuses and records, a job's
    tenant, tools and log, and what finding the tasks a restart lost reads."""


class AdmissionSweep:
    """The sweep of one process's `Admission` (see the module docstring)."""

    store: AdmissionSteps
    settings: Settings
    pushed: PushedTasks | None
    fleet: FleetStore
    _restarts: StoreRestarts | None = None  # made on the first sweep where the step pushes the tasks
    sent_again: Callable[[CallRecord], None] | None = None  # told of each call whose lost task the sweep sends again

    def config(self) -> AdmissionConfig:
        """The admission's windows and shares now (`Admission.config`)."""
        raise NotImplementedError  # `Admission`'s

    def admit(self, job_id: str, records: Sequence[CallRecord], *, ended: Sequence[str] = ()) -> Publish:
        """Which of a job's ready calls to publish (`Admission.admit`)."""
        raise NotImplementedError  # `Admission`'s

    @staticmethod
    def _answer(reply: list[str], job_id: str, gated: Sequence[CallRecord]) -> Publish:
        """What a step's reply leaves to publish (`Admission._answer`)."""
        raise NotImplementedError  # `Admission`'s

    def sweep(self, holder: str) -> Publish:
        """Give back the places of admitted calls that ended, fill the queues with parked calls, and return what to
        publish: those parked calls, and admitted calls never claimed after `AGENTQ_ADMISSION_REPUBLISH_S`. Done by
        one process of the fleet per heartbeat."""
        beat_ms = int(self.settings.heartbeat_s * 1000)
        if not self.store.take_admission_sweep(holder, max(beat_ms - 100, 100)):
            return []
        out = self._after_restart()
        now_ms = int(time.time() * 1000)
        stale = self.store.admitted_before(now_ms - beat_ms)
        old = set(self.store.admitted_before(now_ms - int(self.settings.admission_republish_s * 1000)))
        ended, again, ready, running = self._look_at(stale, old)
        out += self._again(again)
        out += self._lost(ready, self._lapsed(running))
        queues = self.store.parked_queues()
        if ended or queues:
            out += self._answer(self.store.admit_calls([], self.config(), ended=ended, fill=queues), "", [])
        if ended or again:
            log.info("admission sweep: %d places given back, %d admitted calls published again", len(ended),
                     sum(len(c) for c in again.values()))
        return out

    def _after_restart(self) -> Publish:
        """The calls whose tasks a restart of the store lost, where the broker is the store's Redis (the ticks it
        lost are sent here)."""
        if self.pushed is None:
            return []
        dispatcher = self.pushed.dispatcher
        if self._restarts is None:
            self._restarts = StoreRestarts.of(self.store, dispatcher.app, dispatcher.routing.engine_queue)
        if self._restarts is None:
            return []
        lost = self._restarts.lost(died=self._one_died())
        for job_id, n in lost.ticks:
            dispatcher.tick(job_id, n)
        return lost.calls + lost.ends + self._unadmitted(lost.activity)

    def _unadmitted(self, ready: Publish) -> Publish:
        """Of ready activity calls whose task the broker holds nowhere, what the admission publishes for those not
        admitted (their process died before admitting them: a tick's dispatcher killed after its commit, whose
        task is lost too); an admitted one is the sweep's own look (`_lost`), a parked one waits for its place."""
        known = self.store.admission_members([admission_member(job_id, r.id) for job_id, r in ready])
        by_job: dict[str, list[CallRecord]] = defaultdict(list)
        for job_id, record in ready:
            if admission_member(job_id, record.id) not in known:  # neither admitted nor parked
                by_job[job_id].append(record)
        out: Publish = []
        for job_id, records in by_job.items():
            out += self.admit(job_id, records)
        if by_job:
            log.warning("admission sweep: %d ready call(s) that nobody admitted (their process died first, likely) "
                        "are admitted now", sum(len(r) for r in by_job.values()))
        return out

    def _one_died(self) -> bool:
        """Whether a process of the fleet live at the last sweep (of any process) is gone (killed, most likely: a
        task it had taken off its queue and not recorded as unacknowledged yet is lost). Three round trips."""
        live = sorted(f"{w.id}:{w.pid}" for w in self.fleet.live_workers())
        before = self.store.swap_fleet_seen("\n".join(live))
        return before is not None and bool(set(before.split("\n")) - set(live) - {""})

    def _lapsed(self, running: dict[str, list[str]]) -> set[tuple[str, str]]:
        """Of the `running` calls, those whose lease is gone (their process died), where the sweep looks for lost
        tasks (one round trip)."""
        if not running or self.pushed is None or self._restarts is None:
            return set()
        return self.store.leases_lapsed([(job_id, c) for job_id, calls in running.items() for c in calls])

    # the ready and the lapsed calls looked for in one read of the broker, and the one log line that counts them
    def _lost(self, ready: dict[str, list[str]], lapsed: set[tuple[str, str]]) -> Publish:
        """Of the admitted calls still ready a heartbeat after their admission, and of the `lapsed` ones (running,
        their lease gone), those whose tasks the broker (the store's Redis) holds nowhere; nothing where the
        broker is another (its own redelivery covers a killed worker)."""
        if not (ready or lapsed) or self.pushed is None or self._restarts is None:
            return []
        calls: dict[str, list[str]] = defaultdict(list, {job_id: list(ids) for job_id, ids in ready.items()})
        for job_id, call_id in sorted(lapsed):
            calls[job_id].append(call_id)
        records = [(job_id, r) for job_id, call_ids in calls.items()
                   for r in self.store.call_records(job_id, call_ids).values()]
        lost = self._restarts.lost_tasks(records)
        if lost:
            if self.sent_again is not None:  # the metrics' redeliveries: the broker no longer holds these tasks
                for _, record in lost:
                    self.sent_again(record)
            running = sum((job_id, r.id) in lapsed for job_id, r in lost)
            log.warning("admission sweep: %d admitted call(s) had lost their task (a worker killed as it took it, "
                        "likely; %d of them running, their lease gone) and are published again", len(lost), running)
        return lost

    def _again(self, again: dict[str, list[str]]) -> Publish:
        """The records of admitted calls to publish again, counted as admitted now."""
        out: Publish = []
        for job_id, call_ids in again.items():
            out += [(job_id, r) for r in self.store.call_records(job_id, call_ids).values()]
        self.store.touch_admitted([admission_member(j, c) for j, calls in again.items() for c in calls])
        return out

    def _look_at(self, stale: Sequence[str], old: set[str]) -> tuple[list[str], dict[str, list[str]],
                                                                      dict[str, list[str]], dict[str, list[str]]]:
        """Of admitted members: those whose call ended (or whose job is gone), the calls still ready among `old`
        (by job), the other calls still ready (by job), and the calls running (by job)."""
        by_job: dict[str, list[str]] = defaultdict(list)
        for member in stale:
            job_id, call_id = split_member(member)
            by_job[job_id].append(call_id)
        ended: list[str] = []
        again: dict[str, list[str]] = defaultdict(list)
        ready: dict[str, list[str]] = defaultdict(list)
        running: dict[str, list[str]] = defaultdict(list)
        for job_id, call_ids in by_job.items():
            statuses = self.store.call_statuses(job_id, call_ids)
            for call_id in call_ids:
                status = statuses.get(call_id)
                member = admission_member(job_id, call_id)
                if status is None or status.is_final:
                    ended.append(member)
                elif status is CallStatus.READY:
                    (again if member in old else ready)[job_id].append(call_id)
                elif status is CallStatus.RUNNING:
                    running[job_id].append(call_id)
        return ended, dict(again), dict(ready), dict(running)
