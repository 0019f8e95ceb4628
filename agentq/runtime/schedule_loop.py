"""The firing loop of schedules (docs/schedules.md): a daemon thread of every dispatcher, firing while its process
holds the schedules' lease in Redis (`SET NX PX`, renewed; another dispatcher takes over within `LEASE_MS` of one
that died). It sleeps until the first due time of the `due` set (at most `POLL_S`), so a slot fires within a second
of when it is due, and holds no Celery slot or engine thread while it waits.

Each slot fires exactly once: its job's id derives from the schedule and the slot (`slot_job_id`), and a
submission with an id that exists writes nothing; a slot found fired already (a dispatcher died between the
submission and the state's advance) is only recorded. A schedule's state moves by compare-and-set, so a loop that
lost its lease, or a change from the API made meanwhile, never moves it back.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from typing import Any

from agentq.errors import JobExistsError, JobValidationError, RateLimited
from agentq.protocol.schedules import Schedule, slot_job_id
from agentq.runtime.schedules import Schedules, active, exists, fresh_state
from agentq.store.schedules import ScheduleStore

log = logging.getLogger("agentq.schedules")

LEASE_MS = 3000
POLL_S = 0.5
BUFFER_RECHECK_MS = 500  # how often a buffered slot looks whether the run before it ended
MAX_SLOTS_PER_PASS = 10_000  # slots handled per schedule and pass (an outage's missed ones are counted in passes)


class ScheduleLoop:
    """Fires due schedules while this process holds the lease."""

    def __init__(self, schedules: Schedules, *, clock: Any = time.time):
        self.schedules = schedules
        self.store: ScheduleStore = schedules.store
        self.jobs = schedules.jobs
        self.token = f"{os.getpid()}:{uuid.uuid4().hex}"  # the pid first: who holds the lease, for people
        self.clock = clock
        self.holding = False
        self._renewed = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> ScheduleLoop:
        self._thread = threading.Thread(target=self._run, name="agentq-schedules", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self.holding:
            try:
                self.store.release_lease(self.token)
            except Exception:
                log.debug("could not release the schedules' lease", exc_info=True)

    def _run(self) -> None:
        wait, failing = 0.0, False
        while not self._stop.wait(wait):
            try:
                wait = self.run_once()
            except Exception:  # an outage says one line when it starts failing, one when a pass goes through
                if not failing:
                    log.warning("firing schedules failed; trying again every %s s", POLL_S, exc_info=True)
                wait, failing, self.holding = POLL_S, True, False
                continue
            if failing:
                log.warning("firing schedules works again")
                failing = False

    def run_once(self) -> float:
        """One pass: fire what is due if this process holds (or takes) the lease; how long to wait for the next."""
        if not self.holding and not self.store.has_schedules():
            return POLL_S  # no schedules: no lease is taken (a fleet without schedules keeps no key for them)
        if not self._renew():
            return POLL_S
        now_ms = int(self.clock() * 1000)
        for name in self.store.due_names(now_ms):
            if not self._renew():
                return POLL_S
            self.fire(name, self.clock())
        first = self.store.next_due_ms()
        if first is None:
            return POLL_S
        return min(POLL_S, max(0.0, first / 1000 - self.clock()))

    def _renew(self) -> bool:
        """Hold the lease: renewed at most every tenth of it; False when another process holds it."""
        now = time.monotonic()
        if self.holding and now - self._renewed < LEASE_MS / 10000:
            return True
        taken = self.store.take_lease(self.token, LEASE_MS)
        if taken and not self.holding:
            self._repair()
        self.holding, self._renewed = taken, now
        return taken

    def _repair(self) -> None:
        """On taking the lease: a due time for every active schedule that has none (the set was lost)."""
        due = self.store.due_of()
        missing = {}
        for name, (definition, raw) in self.store.read_all().items():
            schedule = Schedule.from_dict(definition)
            if name not in due and not schedule.paused:
                state = json.loads(raw) if raw else fresh_state(schedule, self.clock())
                missing[name] = schedule.due_ms(state.get("next") or schedule.next_slot(self.clock()))
        self.store.add_missing_due(missing)

    def fire(self, name: str, now_s: float) -> None:
        """Handle schedule `name`'s due slots at `now_s` and move its state on (once: a concurrent change wins)."""
        found = self.store.read(name)
        if found is None:
            self.store.advance(name, "", {}, None)  # a due time left by a deleted schedule
            return
        definition, raw = found
        schedule = Schedule.from_dict(definition)
        state = json.loads(raw) if raw else fresh_state(schedule, now_s)
        if schedule.paused:
            self.store.advance(name, raw, state, None)
            return
        if state.get("pending") is not None and not active(self.jobs, state.get("last_job")):
            self._submit(schedule, state, state.pop("pending"))
            state["pending"] = None
        self._due_slots(schedule, state, now_s)
        due = schedule.due_ms(state["next"])
        if state.get("pending") is not None:
            due = min(due, int(now_s * 1000) + BUFFER_RECHECK_MS)
        if not self.store.advance(name, raw, state, due):
            log.info("schedule %s changed while it fired; its new state stands", name)

    def _due_slots(self, schedule: Schedule, state: dict, now_s: float) -> None:
        """Handle the slots due by `now_s` in order, moving `state["next"]` past each. The slots a dispatcher that
        died mid-pass fired come first (from `next` on, before it moved the state): an old slot is looked up only
        while the ones before it were found fired, so a long outage's missed slots cost no read each."""
        found = True
        for _ in range(MAX_SLOTS_PER_PASS):
            if schedule.due_ms(state["next"]) > now_s * 1000:
                return
            found = self._slot(schedule, state, state["next"], now_s, look=found)
            state["next"] = schedule.next_slot(state["next"])

    def _slot(self, schedule: Schedule, state: dict, slot: int, now_s: float, *, look: bool = True) -> bool:
        """One due slot: found fired, missed (older than its catch-up window), skipped or buffered by the overlap
        policy, or fired. Whether its job was found fired already (`look`: whether an old slot is looked up)."""
        job_id = slot_job_id(schedule.name, slot)
        old = schedule.missed(slot, now_s)
        if (look or not old) and exists(self.jobs, job_id):
            state.update(last_slot=slot, last_job=job_id)
            return True
        if old:
            state["missed"] = state.get("missed", 0) + 1
            return False
        if schedule.overlap != "allow" and active(self.jobs, state.get("last_job")):
            if schedule.overlap == "buffer_one" and state.get("pending") is None:
                state["pending"] = slot
            else:
                state["skipped"] = state.get("skipped", 0) + 1
            return False
        self._submit(schedule, state, slot)
        return False

    def _submit(self, schedule: Schedule, state: dict, slot: int) -> None:
        job_id = slot_job_id(schedule.name, slot)
        try:
            self.jobs.submit(schedule.job, job_id=job_id, tenant=schedule.tenant)
        except JobExistsError:
            pass  # fired by a process that died before it moved the state on
        except (JobValidationError, RateLimited) as error:  # the fleet changed (a tool is gone), a tenant's limit
            log.warning("schedule %s: the job of slot %s was refused: %s", schedule.name, slot, error)
            state.update(failed=state.get("failed", 0) + 1, error=str(error))
            return
        state.update(last_slot=slot, last_job=job_id, fired=state.get("fired", 0) + 1, error=None)
