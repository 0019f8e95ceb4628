"""The contract of resuming a job in the store (docs/resume.md): `ResumeStore` and the typed replies of its step
(`store/resume.py`'s `resume.lua`), for the job service and `base.py`'s `Store`; no I/O here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from agentq.protocol.envelopes import Envelope
from agentq.protocol.records import CallRecord, JobKind
from agentq.protocol.status import JobStatus


@dataclass(frozen=True)
class Resumed:
    """The job runs again: its run number, the status it resumed to, its open awaited calls, its model exchanges so
    far, its kind and the records of the calls ready now (their tasks are to be sent)."""

    run: int
    status: JobStatus
    open_calls: int
    exchanges: int
    kind: JobKind
    ready: list[CallRecord]


@dataclass(frozen=True)
class ResumeConflict:
    """The job is neither failed nor canceled (`status`): nothing was written."""

    status: JobStatus


@dataclass(frozen=True)
class ResumeMissing:
    """No job has that id (it expired, or was never submitted)."""


ResumeReply = Resumed | ResumeConflict | ResumeMissing


class ResumeStore(Protocol):
    """What resuming a job writes."""

    def resume_job(self, job_id: str, *, event: Envelope, expire_at_ms: int, waiting: bool,
                   options: dict[str, Any] | None, note: dict[str, Any] | None) -> ResumeReply: ...
