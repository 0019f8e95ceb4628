"""The admission of ready calls (docs/tenants.md), as records: what a call asks (`Ticket`) and what the fleet allows
(`AdmissionConfig`). The store's step (`store/admission.py`, `admission.lua`) keeps the admitted and parked calls;
the runtime (`runtime/admission.py`) builds these and publishes what is admitted. Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Ticket:
    """A ready call asking to be admitted: `member` (`admission_member`), its queue, tenant, priority (1 first),
    concurrency key ('' none) and the key's limit, and `payload`: what publishes it when it is admitted later (one
    starting with `PUSHED` is its task, which the step pushes to the broker itself when it admits the call, at once
    or later)."""

    member: str
    queue: str
    tenant: str
    priority: int = 2
    key: str = ""
    limit: int = 0
    payload: str = ""


@dataclass(frozen=True, slots=True)
class AdmissionConfig:
    """The windows (calls admitted and not ended per queue; `default_window` for a queue not named), the free places
    a queue's parked calls wait for (`batch`: they are published a few at a time), the tenants' weights and their
    `max_running_calls`."""

    windows: Mapping[str, int] = field(default_factory=dict)
    default_window: int = 1
    batch: int = 1
    weights: Mapping[str, float] = field(default_factory=dict)
    maxima: Mapping[str, int] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps({"w": dict(self.windows), "d": self.default_window, "b": self.batch, "wt": dict(self.weights),
                           "mx": dict(self.maxima)}, separators=(",", ":"))


@dataclass(slots=True)
class AdmissionRequest:
    """An admission step made with a new job's write: a single Redis runs it in the write's round trip, after the
    job's script and only if that wrote the job; `reply` is its answer (as `admit_calls` returns it), None when it
    did not run (a cluster, a job not written, a Redis that lost the step's script): then the step is made on its
    own once the job is written."""

    tickets: Sequence[Ticket]
    config: AdmissionConfig
    reply: list[str] | None = None


PUSHED = "!"
"""The first character of a ticket's payload the step pushes to the broker itself (`runtime/pushed.py`), and of its
answer for it."""


def admission_member(job_id: str, call_id: str) -> str:
    """A call's name in the admission keys (a job id has no '/')."""
    return f"{job_id}/{call_id}"


def split_member(member: str) -> tuple[str, str]:
    job_id, _, call_id = member.partition("/")
    return job_id, call_id


