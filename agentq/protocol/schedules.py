"""Schedules (docs/schedules.md): a job submitted on a cron expression or every N seconds, as pure functions.

`parse_schedule` checks a schedule's body (every problem with its JSON pointer; the job itself is checked by the
job service, which prefixes its problems with `/job`); `Schedule.slots_after` gives its fire times ("slots", Unix
seconds): a cron expression is read by cronsim in the schedule's IANA time zone (`zoneinfo`), so a local 08:00 fires
once a day across both daylight-saving changes (a local time skipped by the spring change fires at the first time
after it, one repeated in autumn fires once); `every_s` slots are the multiples of N seconds since the Unix epoch,
the same in every process. A slot's job id derives from the schedule and the slot (`slot_job_id`), so a slot fired
twice (a dispatcher killed mid-fire, another taking over) is written once.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from agentq.errors import Problem
from agentq.protocol.tenants import DEFAULT_TENANT, tenant_problem

OVERLAPS = ("skip", "buffer_one", "allow")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
FIELDS = ("cron", "every_s", "timezone", "job", "overlap", "catchup_window_s", "jitter_s", "paused", "tenant")
# A slot fired at most this late is on time whatever `catchup_window_s` says: the poll, and a dispatcher taking
# over the lease of one that died (a few seconds), never make a slot missed.
ON_TIME_S = 5.0
MAX_EVERY_S = 366 * 86400


def name_problem(name: object) -> str | None:
    """Why `name` cannot name a schedule (it becomes part of its jobs' ids), or None."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        return (f"{str(name)[:80]!r} is not a schedule name: 1 to 64 letters, digits, '_', '.' or '-', starting "
                "with a letter or digit")
    return None


@dataclass(frozen=True)
class Schedule:
    """A checked schedule. `job` is the job as submitted (checked by the job service, not here)."""

    name: str
    tenant: str
    job: Any
    cron: str | None = None
    every_s: int | None = None
    timezone: str = "UTC"
    overlap: str = "skip"
    catchup_window_s: float = 0.0
    jitter_s: float = 0.0
    paused: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The stored form (and what the API answers), every field given."""
        timing: dict[str, Any] = {"cron": self.cron} if self.cron is not None else {"every_s": self.every_s}
        return {"name": self.name, "tenant": self.tenant, **timing, "timezone": self.timezone, "job": self.job,
                "overlap": self.overlap, "catchup_window_s": self.catchup_window_s, "jitter_s": self.jitter_s,
                "paused": self.paused}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Schedule:
        return cls(name=data["name"], tenant=data.get("tenant", DEFAULT_TENANT), job=data["job"],
                   cron=data.get("cron"), every_s=data.get("every_s"), timezone=data.get("timezone", "UTC"),
                   overlap=data.get("overlap", "skip"), catchup_window_s=float(data.get("catchup_window_s", 0)),
                   jitter_s=float(data.get("jitter_s", 0)), paused=bool(data.get("paused", False)))

    def with_paused(self, paused: bool) -> Schedule:
        return Schedule(**{**self.__dict__, "paused": paused})

    def slots_after(self, after_s: float, count: int) -> list[int]:
        """The next `count` slots strictly after `after_s` (Unix seconds)."""
        if self.every_s is not None:
            first = (math.floor(after_s) // self.every_s + 1) * self.every_s
            return [first + i * self.every_s for i in range(count)]
        zone = ZoneInfo(self.timezone)
        times = CronSim(self.cron or "", datetime.fromtimestamp(math.floor(after_s), zone))
        return [int(next(times).timestamp()) for _ in range(count)]

    def next_slot(self, after_s: float) -> int:
        return self.slots_after(after_s, 1)[0]

    def due_ms(self, slot: int) -> int:
        """When `slot` fires (ms): the slot plus its jitter, the same in every process (a hash of name and slot)."""
        jitter_ms = int(self.jitter_s * 1000)
        if jitter_ms <= 0:
            return slot * 1000
        digest = hashlib.sha1(f"{self.name}\n{slot}".encode()).digest()
        return slot * 1000 + int.from_bytes(digest[:8], "big") % (jitter_ms + 1)

    def missed(self, slot: int, now_s: float) -> bool:
        """Whether `slot`, not fired by `now_s`, is too late to fire (older than its catch-up window)."""
        return now_s - self.due_ms(slot) / 1000 > max(self.catchup_window_s, ON_TIME_S)


def slot_job_id(name: str, slot: int) -> str:
    """The id of the job a schedule's slot submits: the same for every process that fires it."""
    return f"sched-{name}-{slot}"


def triggered_job_id(name: str, at_ms: int) -> str:
    """The id of a job started by hand (`trigger`): outside the slots' ids."""
    return f"sched-{name}-now{at_ms}"


# one check per field of the body, each adding that field's problems: the branches are the fields
def parse_schedule(name: str, body: Any, *, tenant: str) -> tuple[Schedule | None, list[Problem]]:
    """`body` checked as schedule `name` of `tenant` (a `tenant` field in the body, which only an admin may give,
    overrides it): the schedule and no problems, or None and every problem with its pointer."""
    problems: list[Problem] = []
    if (problem := name_problem(name)) is not None:
        problems.append(Problem("", problem))
    if not isinstance(body, dict):
        return None, [*problems, Problem("", "a schedule is a JSON object")]
    problems += [Problem(f"/{key}", f"unknown field {key!r} (fields: {', '.join(FIELDS)})")
                 for key in body if key not in FIELDS]
    tenant = body.get("tenant", tenant)
    if (problem := tenant_problem(tenant)) is not None:
        problems.append(Problem("/tenant", problem))
    timezone = body.get("timezone", "UTC")
    zone_ok = _zone_problems(timezone, problems)
    _timing_problems(body, timezone if zone_ok else "UTC", problems)
    if "job" not in body:
        problems.append(Problem("/job", "a schedule needs the job it submits"))
    overlap = body.get("overlap", "skip")
    if overlap not in OVERLAPS:
        problems.append(Problem("/overlap", f"{overlap!r} is not one of {', '.join(OVERLAPS)}"))
    for key in ("catchup_window_s", "jitter_s"):
        _seconds_problem(body, key, problems)
    if not isinstance(body.get("paused", False), bool):
        problems.append(Problem("/paused", "paused is true or false"))
    if problems:
        return None, problems
    return Schedule(name=name, tenant=tenant, job=body["job"], cron=body.get("cron"), every_s=body.get("every_s"),
                    timezone=timezone, overlap=overlap, catchup_window_s=float(body.get("catchup_window_s", 0)),
                    jitter_s=float(body.get("jitter_s", 0)), paused=body.get("paused", False)), []


def _zone_problems(timezone: Any, problems: list[Problem]) -> bool:
    if not isinstance(timezone, str) or not timezone:
        problems.append(Problem("/timezone", "a time zone is an IANA name such as \"Europe/Berlin\""))
        return False
    try:
        ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        problems.append(Problem("/timezone", f"unknown time zone {timezone[:80]!r} (an IANA name such as "
                                             "\"Europe/Berlin\")"))
        return False
    return True


def _timing_problems(body: dict, timezone: str, problems: list[Problem]) -> None:
    has_cron, has_every = "cron" in body, "every_s" in body
    if has_cron == has_every:
        problems.append(Problem("", "give either cron or every_s" if not has_cron
                                else "give either cron or every_s, not both"))
    if has_cron:
        cron = body["cron"]
        if not isinstance(cron, str):
            problems.append(Problem("/cron", "a cron expression is a string such as \"0 8 * * 1-5\""))
        else:
            try:
                next(CronSim(cron, datetime.now(ZoneInfo(timezone))))
            except (CronSimError, StopIteration, ValueError) as error:
                problems.append(Problem("/cron", f"cron expression {cron[:80]!r} does not parse: {error}"))
    if has_every:
        every = body["every_s"]
        if isinstance(every, bool) or not isinstance(every, int) or not 1 <= every <= MAX_EVERY_S:
            problems.append(Problem("/every_s", f"every_s is a whole number of seconds from 1 to {MAX_EVERY_S}"))


def _seconds_problem(body: dict, key: str, problems: list[Problem]) -> None:
    value = body.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_EVERY_S:
        problems.append(Problem(f"/{key}", f"{key} is a number of seconds from 0 to {MAX_EVERY_S}"))


def iso_slot(slot: int) -> str:
    """A slot as RFC 3339 UTC."""
    return datetime.fromtimestamp(slot, UTC).isoformat().replace("+00:00", "Z")


__all__ = ["OVERLAPS", "Schedule", "name_problem", "parse_schedule", "slot_job_id", "triggered_job_id"]
