"""Job and call statuses (docs/protocol.md#calls, docs/protocol.md#jobs): the names, and which of them are active or
final, defined once.

Everything else derives from here: the runtime compares enum members, the store's Lua scripts receive the
names and sets through a generated preamble (`lua_preamble`) instead of spelling them.
"""

from __future__ import annotations

from enum import StrEnum


class CallStatus(StrEnum):
    """`pending → ready → [awaiting_approval →] running → [waiting →] done | failed | skipped | canceled`."""

    PENDING = "pending"  # waits on calls that may still write what it reads
    READY = "ready"  # may start; its task is (or is about to be) on its queue
    AWAITING_APPROVAL = "awaiting_approval"  # ready, but held until a reviewer approves, rejects or edits it
    RUNNING = "running"  # an attempt holds its lease
    WAITING = "waiting"  # a wait call (sleep, waitForEvent, waitForSignal): holds nothing but its due time
    DONE = "done"
    FAILED = "failed"
    SKIPPED = "skipped"
    CANCELED = "canceled"

    @property
    def is_final(self) -> bool:
        return self in CALL_FINAL

    @property
    def is_active(self) -> bool:
        return self in CALL_ACTIVE


class JobStatus(StrEnum):
    """`[scheduled →] [waiting →] queued → running → succeeded | failed | canceled`, plus `awaiting_approval`."""

    SCHEDULED = "scheduled"  # accepted for later (`options.start_at` / `delay_s`): nothing of it is sent until then
    WAITING = "waiting"  # accepted, waits for room under its concurrency keys (docs/tenants.md): nothing of it is sent
    QUEUED = "queued"
    RUNNING = "running"
    AWAITING_APPROVAL = "awaiting_approval"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELED = "canceled"

    @property
    def is_final(self) -> bool:
        return self in JOB_FINAL

    @property
    def is_active(self) -> bool:
        return self in JOB_ACTIVE


CALL_FINAL = frozenset({CallStatus.DONE, CallStatus.FAILED, CallStatus.SKIPPED, CallStatus.CANCELED})
CALL_ACTIVE = frozenset(CallStatus) - CALL_FINAL
#: Calls that have not started: a cancel turns them into `canceled`.
CALL_UNSTARTED = frozenset({CallStatus.PENDING, CallStatus.READY, CallStatus.AWAITING_APPROVAL})

JOB_FINAL = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELED})
JOB_ACTIVE = frozenset(JobStatus) - JOB_FINAL


def lua_preamble() -> str:
    """Lua that defines the statuses for a script: `CALL.<NAME>`, `JOB.<NAME>` and the sets `CALL_FINAL`,
    `CALL_UNSTARTED`, `JOB_ACTIVE` (tables of name → true). Prepended to every store script."""

    def names(table: str, enum: type[StrEnum]) -> str:
        return f"local {table} = {{" + ", ".join(f"{m.name} = '{m.value}'" for m in enum) + "}"

    def members(table: str, values: frozenset[StrEnum]) -> str:
        return f"local {table} = {{" + ", ".join(f"{v.value} = true" for v in sorted(values)) + "}"

    return "\n".join([
        names("CALL", CallStatus),
        names("JOB", JobStatus),
        members("CALL_FINAL", CALL_FINAL),
        members("CALL_UNSTARTED", CALL_UNSTARTED),
        members("JOB_ACTIVE", JOB_ACTIVE),
        "",
    ])
