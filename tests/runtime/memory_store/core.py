"""The memory store's state and what every step shares: one job's keys, the clock, the lock, leases, streams,
and the two functions of `_committed.lua` (releasing a committed call's dependents, the committed reply)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from agentq.errors import JobNotFoundError
from agentq.protocol.records import CallRecord, JobKind
from agentq.protocol.status import CALL_FINAL, CALL_UNSTARTED, JOB_ACTIVE, CallStatus, JobStatus
from agentq.store.codecs import decode_job
from agentq.store.keys import JobKeys
from agentq.store.replies import Committed, FinishInputs

FINAL = {s.value for s in CALL_FINAL}
UNSTARTED = {s.value for s in CALL_UNSTARTED}
ACTIVE = {s.value for s in JOB_ACTIVE}


class ManualClock:
    """Unix seconds that only move when the test says so."""

    def __init__(self, start: float | None = None):
        self._now = time.time() if start is None else start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds


@dataclass
class JobState:
    """Every key of one job (`JobKeys.all`, `done` and the leases), values in stored form: JSON text, and
    event entries packed as `store/event_codec.py` packs them."""

    job: dict[str, str] = field(default_factory=dict)
    spec: dict[str, str] = field(default_factory=dict)  # the cold spec (`keys.SPEC_FIELDS`)
    log: list[str] = field(default_factory=list)
    calls: dict[str, str] = field(default_factory=dict)
    status: dict[str, str] = field(default_factory=dict)
    waiting: dict[str, int] = field(default_factory=dict)
    attempts: dict[str, int] = field(default_factory=dict)
    lost: dict[str, int] = field(default_factory=dict)
    tools: dict[str, str] = field(default_factory=dict)
    events: list[tuple[str, str]] = field(default_factory=list)
    dependents: dict[str, str] = field(default_factory=dict)
    exchanges: list[str] = field(default_factory=list)
    approval: dict[str, str] = field(default_factory=dict)
    budget: dict[str, str] = field(default_factory=dict)  # budget.lua's hash (`spent.*`, `held.*`, `r:<key>`, ...)
    done: list[str] = field(default_factory=list)
    leases: dict[str, tuple[str, float]] = field(default_factory=dict)  # call id (or TICK) -> (token, expiry s)
    expire_at_ms: int | None = None

    def incr(self, name: str, by: int) -> int:
        """HINCRBY on the job hash."""
        value = int(self.job.get(name) or 0) + by
        self.job[name] = str(value)
        return value


def not_found(job_id: str) -> JobNotFoundError:
    return JobNotFoundError(f"no job {job_id!r} (never submitted, or expired)")


def marked(text: str, name: str, value: object) -> str:
    """A JSON object's text with one key added at its end, as the Lua steps insert one before the closing brace."""
    return json.dumps({**json.loads(text), name: value}, ensure_ascii=False, separators=(",", ":"))


class MemoryCore:
    """The memory store's state, its lock and the helpers of its steps. Call every `_` helper with the lock held."""

    def __init__(self, *, clock: Callable[[], float] | None = None, namespace: str = "agentq"):
        self.clock = clock if clock is not None else ManualClock()
        self.namespace = namespace
        self.url = "memory://"
        self._jobs: dict[str, JobState] = {}
        self._stream_seq = 0
        self._changed = threading.Condition(threading.RLock())

    def keys(self, job_id: str) -> JobKeys:
        return JobKeys(self.namespace, job_id)  # checks the id, as every StateStore method does

    def ping(self) -> None:
        pass

    def close(self) -> None:
        pass

    def _get(self, job_id: str) -> JobState | None:
        """The job's keys, or None once they expired (or never existed)."""
        self.keys(job_id)
        state = self._jobs.get(job_id)
        if state is not None and state.expire_at_ms is not None and self.clock() * 1000 >= state.expire_at_ms:
            del self._jobs[job_id]
            return None
        return state

    def _get_or_new(self, job_id: str) -> JobState:
        """The job's keys, created empty as a write to a key that does not exist creates it (XADD, HSET)."""
        state = self._get(job_id)
        if state is None:
            state = self._jobs[job_id] = JobState()
        return state

    def _lease(self, state: JobState, name: str) -> tuple[str, float] | None:
        """GET of a lease key: (token, expiry), None once it expired."""
        lease = state.leases.get(name)
        if lease is not None and self.clock() >= lease[1]:
            del state.leases[name]
            return None
        return lease

    def _pttl_ms(self, state: JobState, name: str) -> int:
        """PTTL of a lease key (0 when it does not exist)."""
        lease = self._lease(state, name)
        return 0 if lease is None else int((lease[1] - self.clock()) * 1000)

    def _set_lease(self, state: JobState, name: str, token: str, lease_ms: int) -> None:
        state.leases[name] = (token, self.clock() + lease_ms / 1000)

    def _xadd(self, state: JobState, entry: str) -> None:
        self._stream_seq += 1
        state.events.append((f"{self._stream_seq}-0", entry))
        self._changed.notify_all()

    def _end(self, state: JobState, status: str) -> None:
        state.done[:] = [status]
        tenant_active = self.__dict__.get("_tenant_active", {}).get(state.job.get("tenant", "default"), {})
        tenant_active.pop(state.job.get("id"), None)  # it leaves its tenant's active set (`_count_end`)
        self._changed.notify_all()



def release_dependents(state: JobState, call_id: str, job_status: str,
                       publish: Callable[[str], None]) -> tuple[list[CallRecord], str]:
    """`release_dependents` of _committed.lua: each dependent that waits on nothing more becomes ready (its
    record returned), awaiting_approval when a reviewer must approve it (the job too; its kept
    `call.awaiting_approval` event is published), or canceled in a canceled job. Returns the released records and
    the job's status after it."""
    released: list[CallRecord] = []
    for dependent in json.loads(state.dependents.get(call_id) or "[]"):
        left = state.waiting[dependent] = state.waiting.get(dependent, 0) - 1
        if left > 0 or state.status.get(dependent) != CallStatus.PENDING.value:
            continue
        if job_status == JobStatus.CANCELED.value:
            state.status[dependent] = CallStatus.CANCELED.value
        elif dependent in state.approval:
            state.status[dependent] = CallStatus.AWAITING_APPROVAL.value
            if state.approval[dependent] != "1":
                publish(state.approval[dependent])
            state.incr("awaiting", 1)
            job_status = state.job["status"] = JobStatus.AWAITING_APPROVAL.value
        else:
            state.status[dependent] = CallStatus.READY.value
            released.append(CallRecord.from_dict(json.loads(state.calls[dependent])))
    return released, job_status


def committed_reply(state: JobState, record: dict, job_status: str, released: list[CallRecord]) -> Committed:
    """`committed_reply` of _committed.lua: count the call out of the open awaited calls; what finalizing a plan
    job reads comes along when this was its last awaited call and no tick is in flight."""
    open_calls = state.incr("open", -1) if record["awaited"] else int(state.job.get("open") or 0)
    kind, ticking = state.job["kind"], state.job.get("ticking") or "0"
    last = open_calls <= 0 and kind == JobKind.PLAN.value and job_status in ACTIVE and ticking == "0"
    return Committed(open_calls=open_calls, job_status=JobStatus(job_status), kind=JobKind(kind),
                     released=released, ticking=ticking == "1", finish_inputs=finish_inputs(state) if last else None)


def finish_inputs(state: JobState) -> FinishInputs:
    """What finalizing a job reads: its fields, its log and its calls' statuses."""
    return FinishInputs(decode_job(dict(state.job)), [json.loads(m) for m in state.log],
                        {k: CallStatus(v) for k, v in state.status.items()})
