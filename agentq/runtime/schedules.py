"""The schedule service (docs/schedules.md): set, read, pause, resume, trigger and delete schedules, for the CLI,
the HTTP API and the clients. A schedule is checked whole before anything is written (its fields by
`protocol/schedules.py`, its job as a submission would be by the job service, `/job` before each of the job's
pointers); the firing loop (`schedule_loop.py`) fires the slots.

A schedule belongs to a tenant: a tenant's token sees and changes its own tenant's schedules (another's is not
found), an admin's sees all of them. Names are the fleet's (a slot's job id derives from the name).
"""

from __future__ import annotations

import json
import time
from typing import Any

from agentq.errors import ConflictError, JobNotFoundError, JobValidationError, Problem, ScheduleError
from agentq.errors import ScheduleNotFoundError as NotFound
from agentq.protocol.digests import iso_utc
from agentq.protocol.schedules import (
    Schedule,
    iso_slot,
    name_problem,
    parse_schedule,
    slot_job_id,
    triggered_job_id,
)
from agentq.protocol.status import JOB_FINAL
from agentq.protocol.tenants import Principal
from agentq.runtime.service import JobService
from agentq.store.schedules import ScheduleStore

NEXT_RUNS = 3


def fresh_state(schedule: Schedule, now_s: float) -> dict[str, Any]:
    """The state of a schedule set or resumed at `now_s`: its next slot is the first after now."""
    return {"next": schedule.next_slot(now_s), "last_slot": None, "last_job": None, "pending": None,
            "fired": 0, "skipped": 0, "missed": 0, "failed": 0, "error": None}


def due_of(schedule: Schedule, state: dict[str, Any]) -> int | None:
    """When the firing loop looks at the schedule next (ms); None while paused."""
    if schedule.paused or state.get("next") is None:
        return None
    return schedule.due_ms(state["next"])


class Schedules:
    """Schedules as `who` sees them (`for_principal`: the API's token; clients: their tenant)."""

    def __init__(self, store: ScheduleStore, jobs: JobService, who: Principal | None = None):
        self.store = store
        self.jobs = jobs
        self.who = who if who is not None else Principal()

    def for_principal(self, who: Principal) -> Schedules:
        return Schedules(self.store, self.jobs, who)

    # ------------------------------------------------------------------------------------------------ writes

    def set(self, name: str, body: Any) -> dict[str, Any]:
        """Check `body` as schedule `name` and store it (it fires from its next slot on); raises `ScheduleError`
        naming every problem with its pointer, and writes nothing then."""
        self._may_write()
        found = self.store.read(name) if name_problem(name) is None else None
        schedule, problems = parse_schedule(name, body, tenant=self._owner(name, found, body))
        if isinstance(body, dict) and "job" in body:
            problems += self._job_problems(name, body["job"])
        if schedule is None or problems:
            raise ScheduleError(f"schedule {name!r} refused: nothing was written", problems)
        now = time.time()
        definition = {**schedule.to_dict(), "updated_at": iso_utc(now),
                      "created_at": found[0].get("created_at", iso_utc(now)) if found else iso_utc(now)}
        state = self._kept_state(found, schedule, now)
        self.store.write(definition, state, due_of(schedule, state))
        return self.view(definition, json.dumps(state))

    def _owner(self, name: str, found: tuple[dict, str] | None, body: Any) -> str:
        """The tenant a schedule being set belongs to: its own when it exists (409 when this token may not see
        it), else the token's; only an admin's token may name another in the body."""
        if found is not None and not self.who.sees(found[0].get("tenant", "")):
            raise ConflictError(f"the schedule name {name!r} is taken by another tenant")
        owner: str = found[0]["tenant"] if found is not None else self.who.tenant
        if isinstance(body, dict) and "tenant" in body and not self.who.is_admin and body["tenant"] != owner:
            raise ScheduleError(f"schedule {name!r} refused: nothing was written",
                                [Problem("/tenant", "only an admin's token names the tenant")])
        return owner

    def _job_problems(self, name: str, job: Any) -> list[Problem]:
        try:
            self.jobs.check(job, job_id=slot_job_id(name, 0))
        except JobValidationError as error:
            return [Problem(f"/job{p.pointer}", p.message) for p in error.problems] or [Problem("/job", str(error))]
        return []

    @staticmethod
    def _kept_state(found: tuple[dict, str] | None, schedule: Schedule, now: float) -> dict[str, Any]:
        """A changed schedule keeps its counts and last job; its next slot is computed again when its timing
        changed or it is resumed."""
        if found is None or not found[1]:
            return fresh_state(schedule, now)
        old, state = Schedule.from_dict(found[0]), json.loads(found[1])
        timing = (old.cron, old.every_s, old.timezone) != (schedule.cron, schedule.every_s, schedule.timezone)
        if timing or (old.paused and not schedule.paused) or state.get("next") is None:
            state = {**state, "next": schedule.next_slot(now), "pending": None}
        return state

    def pause(self, name: str) -> dict[str, Any]:
        return self._paused(name, True)

    def resume(self, name: str) -> dict[str, Any]:
        """Fire again from the next slot after now (the slots while paused are not fired)."""
        return self._paused(name, False)

    def _paused(self, name: str, paused: bool) -> dict[str, Any]:
        self._may_write()
        definition, raw = self._read(name)
        schedule = Schedule.from_dict(definition)
        if schedule.paused == paused:
            return self.view(definition, raw)
        now = time.time()
        state = self._kept_state((definition, raw), schedule.with_paused(paused), now)
        definition = {**definition, "paused": paused, "updated_at": iso_utc(now)}
        self.store.write(definition, state, due_of(schedule.with_paused(paused), state))
        return self.view(definition, json.dumps(state))

    def trigger(self, name: str) -> str:
        """Submit the schedule's job now, outside its slots (whatever its overlap policy); its id."""
        self._may_write()
        definition, _ = self._read(name)
        schedule = Schedule.from_dict(definition)
        return self.jobs.submit(schedule.job, job_id=triggered_job_id(name, int(time.time() * 1000)),
                                tenant=schedule.tenant)

    def delete(self, name: str) -> None:
        self._may_write()
        self._read(name)
        self.store.delete(name)

    # ------------------------------------------------------------------------------------------------- reads

    def get(self, name: str) -> dict[str, Any]:
        return self.view(*self._read(name))

    def list(self) -> list[dict[str, Any]]:
        found = self.store.read_all()
        return [self.view(d, raw) for _, (d, raw) in sorted(found.items()) if self.who.sees(d.get("tenant", ""))]

    def view(self, definition: dict, raw_state: str) -> dict[str, Any]:
        """A schedule as listed: its definition, its next runs (RFC 3339 UTC, none while paused), its last job
        (id and status: `expired` once its job's keys are gone) and its counts."""
        schedule = Schedule.from_dict(definition)
        state = json.loads(raw_state) if raw_state else {}
        after = time.time() if state.get("next") is None else state["next"] - 1
        runs = [] if schedule.paused else [iso_slot(s) for s in schedule.slots_after(after, NEXT_RUNS)]
        last = state.get("last_job")
        return {**definition, "next_runs": runs,
                "last_job": None if last is None else {"id": last, "status": self._status(last)},
                "pending": None if state.get("pending") is None else iso_slot(state["pending"]),
                "counts": {k: state.get(k, 0) for k in ("fired", "skipped", "missed", "failed")},
                "error": state.get("error")}

    def _status(self, job_id: str) -> str:
        try:
            return str(self.jobs.store.job_status(job_id))
        except JobNotFoundError:
            return "expired"

    def _read(self, name: str) -> tuple[dict, str]:
        found = self.store.read(name) if name_problem(name) is None else None
        if found is None or not self.who.sees(found[0].get("tenant", "")):
            raise NotFound(f"no schedule named {name!r}")
        return found

    def _may_write(self) -> None:
        if not self.who.may_write:
            raise ConflictError(f"this token may only read (role {self.who.role.value!r})")


def active(jobs: JobService, job_id: str | None) -> bool:
    """Whether `job_id` names a job that has not ended (an expired one has)."""
    if job_id is None:
        return False
    try:
        return jobs.store.job_status(job_id) not in JOB_FINAL
    except JobNotFoundError:
        return False


def exists(jobs: JobService, job_id: str) -> bool:
    try:
        jobs.store.job_status(job_id)
    except JobNotFoundError:
        return False
    return True
