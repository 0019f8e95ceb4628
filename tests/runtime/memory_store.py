"""`MemoryStore`: an in-memory `agentq.store.base.Store` for fast unit tests of the executor and the job service.

It mirrors the Lua scripts in `agentq/store/lua/` step by step (the comments name the script), keeps values
in their stored JSON form as Redis does (so every read hands out fresh objects), and measures leases and job
expiry on a clock the test can advance (`ManualClock`). One lock makes every step atomic, as a script is.
`tests/runtime/test_store_contract.py` runs the same assertions against it and the real `StateStore`.

A stand-in for unit tests only: acceptance tests run on real Redis and real workers.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentq.errors import JobNotFoundError
from agentq.protocol.envelopes import Envelope
from agentq.protocol.jobs import JobPlan
from agentq.protocol.records import CallRecord, JobInfo, JobKind, JobRecord, empty_usage
from agentq.protocol.status import CALL_FINAL, CALL_UNSTARTED, JOB_ACTIVE, CallStatus, JobStatus
from agentq.store.codecs import decode_job, dumps, now_iso
from agentq.store.keys import JobKeys
from agentq.store.records import build_job_record
from agentq.store.replies import (
    Claim,
    ClaimCanceled,
    Claimed,
    ClaimFinished,
    ClaimLeased,
    ClaimMissing,
    ClaimNotReady,
    ClaimUnstarted,
    Commit,
    CommitDuplicate,
    CommitSuperseded,
    Committed,
    FinishInputs,
)
from agentq.store.state import CallTable, known_view, seen_activities

_FINAL = {s.value for s in CALL_FINAL}
_UNSTARTED = {s.value for s in CALL_UNSTARTED}
_ACTIVE = {s.value for s in JOB_ACTIVE}


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
class _Job:
    """Every key of one job (`JobKeys.all`, `done` and the leases), values in stored form."""

    job: dict[str, str] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)
    calls: dict[str, str] = field(default_factory=dict)
    status: dict[str, str] = field(default_factory=dict)
    waiting: dict[str, int] = field(default_factory=dict)
    attempts: dict[str, int] = field(default_factory=dict)
    lost: dict[str, int] = field(default_factory=dict)
    tools: dict[str, str] = field(default_factory=dict)
    events: list[tuple[str, str]] = field(default_factory=list)
    dependents: dict[str, str] = field(default_factory=dict)
    done: list[str] = field(default_factory=list)
    leases: dict[str, tuple[str, float]] = field(default_factory=dict)  # call id -> (token, expiry in seconds)
    expire_at_ms: int | None = None


def _sha1(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


def _carried(record: CallRecord | None) -> CallRecord:
    """The record a caller carried, when claim.lua leaves the stored one out of its reply (it is the same)."""
    assert record is not None, "only a record the caller carried is left out"
    return record


def _release_dependents(state: _Job, call_id: str, job_status: str) -> list[CallRecord]:
    """`release_dependents` of _committed.lua: the records of the dependents that became ready."""
    released: list[CallRecord] = []
    for dependent in json.loads(state.dependents.get(call_id) or "[]"):
        left = state.waiting[dependent] = state.waiting.get(dependent, 0) - 1
        if left <= 0 and state.status.get(dependent) == CallStatus.PENDING.value:
            if job_status == JobStatus.CANCELED.value:
                state.status[dependent] = CallStatus.CANCELED.value
            else:
                state.status[dependent] = CallStatus.READY.value
                released.append(CallRecord.from_dict(json.loads(state.calls[dependent])))
    return released


def _stream_id(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


class MemoryStore:
    """An in-memory state store with `StateStore`'s contract. Thread-safe (one lock)."""

    def __init__(self, *, clock: Callable[[], float] | None = None, namespace: str = "agentq"):
        self.clock = clock if clock is not None else ManualClock()
        self.namespace = namespace
        self.url = "memory://"
        self._jobs: dict[str, _Job] = {}
        self._workers: dict[str, tuple[str, float]] = {}  # id -> (announcement JSON, expiry)
        self._activities: dict[str, str] = {}  # name -> last announcement JSON with `last_seen` (FleetKeys.activities)
        self._tools: dict[str, str] = {}
        self._tool_conflicts: dict[str, str] = {}
        self._recent: dict[str, float] = {}
        self._stream_seq = 0
        self._changed = threading.Condition(threading.RLock())

    # ----------------------------------------------------------------------------------- helpers

    def keys(self, job_id: str) -> JobKeys:
        return JobKeys(self.namespace, job_id)  # checks the id, as every StateStore method does

    def _get(self, job_id: str) -> _Job | None:
        """The job's keys, or None once they expired (or never existed). Call with the lock held."""
        self.keys(job_id)
        state = self._jobs.get(job_id)
        if state is not None and state.expire_at_ms is not None and self.clock() * 1000 >= state.expire_at_ms:
            del self._jobs[job_id]
            return None
        return state

    def _lease(self, state: _Job, call_id: str) -> tuple[str, float] | None:
        lease = state.leases.get(call_id)
        if lease is not None and self.clock() >= lease[1]:
            del state.leases[call_id]
            return None
        return lease

    def _xadd(self, state: _Job, envelope_json: str) -> None:
        self._stream_seq += 1
        state.events.append((f"{self._stream_seq}-0", envelope_json))
        self._changed.notify_all()

    def _end(self, state: _Job, status: str) -> None:
        state.done[:] = [status]
        self._changed.notify_all()

    def ping(self) -> None:
        pass

    def close(self) -> None:
        pass

    # ----------------------------------------------------------------------------------- submission

    def create_job(self, plan: JobPlan, records: Sequence[CallRecord], *, submitted: Any,
                   events: Sequence[Envelope], parent: dict | None = None) -> bool:
        """submit.lua: all of the job or nothing when its id is taken."""
        self.keys(plan.id)
        waiting = {c.id: c.waiting for c in plan.calls}
        held = {c.id for c in plan.calls if c.approval and c.waiting == 0}
        with self._changed:
            current = self._get(plan.id)
            if current is not None and current.job:  # EXISTS job
                return False
            state = current if current is not None else _Job()  # keys without a job hash are written into
            state.job.update({
                "id": plan.id, "kind": plan.kind.value, "created_at": now_iso(), "awaiting": str(len(held)),
                "status": (JobStatus.AWAITING_APPROVAL if held else JobStatus.QUEUED).value,
                "open": str(sum(1 for c in plan.calls if c.awaited)), "ticks": "0",
                "options": dumps(plan.options), "output": dumps(plan.output),
                "solution": dumps(plan.solution), "submitted": dumps(submitted),
                "usage": dumps(empty_usage()),
            })
            state.expire_at_ms = int((self.clock() + plan.ttl_s) * 1000)
            state.job["expire_at_ms"] = str(state.expire_at_ms)
            state.log.extend(dumps(m) for m in plan.context)
            state.calls.update({r.id: dumps(r.to_dict()) for r in records})
            state.status.update({c: (CallStatus.PENDING if n else CallStatus.AWAITING_APPROVAL if c in held
                                     else CallStatus.READY).value for c, n in waiting.items()})
            if parent is not None:
                state.job["parent"] = dumps(parent)
            state.waiting.update({c: n for c, n in waiting.items() if n})
            state.tools.update({name: dumps(schema) for name, schema in plan.tools.items()})
            state.dependents.update({c.id: dumps(c.dependents) for c in plan.calls if c.dependents})
            self._jobs[plan.id] = state
            for envelope in events:
                self._xadd(state, dumps(envelope.to_dict()))
            self._recent[plan.id] = time.time()
            return True

    def record_rejection(self, job_id: str, error: dict, *, ttl_s: int) -> bool:
        now = now_iso()
        record = JobRecord(id=job_id, status=JobStatus.FAILED, error=error, created_at=now, finished_at=now)
        with self._changed:
            current = self._get(job_id)
            if current is not None and current.job:
                return False
            state = current or _Job()
            state.expire_at_ms = int((self.clock() + ttl_s) * 1000)
            state.job.update({"id": job_id, "status": JobStatus.FAILED.value, "kind": JobKind.PLAN.value,
                              "created_at": now, "finished_at": now, "error": dumps(error),
                              "record": dumps(record.to_dict()), "expire_at_ms": str(state.expire_at_ms)})
            self._jobs[job_id] = state
            self._end(state, JobStatus.FAILED.value)
            return True

    def save_record(self, job_id: str, record: JobRecord) -> None:
        with self._changed:
            state = self._get(job_id)
            if state is None:  # HSET creates the hash
                state = self._jobs[job_id] = _Job()
            state.job["record"] = dumps(record.to_dict())

    # ------------------------------------------------------------------------------------ execution

    def claim(self, job_id: str, call_id: str, *, token: str, lease_ms: int, log_offset: int = -1,
              job_started: Envelope | None = None, record: CallRecord | None = None, record_sha: str = "",
              tool_sha: str = "", start_events: Sequence[Envelope] = (), expect_started: bool = False) -> Claim:
        """claim.lua."""
        record_sha = record_sha if record is not None else ""
        with self._changed:
            state = self._get(job_id)
            status = state.status.get(call_id) if state is not None else None
            if state is None or status is None:
                return ClaimMissing()
            job_status = state.job.get("status")
            if job_status == JobStatus.CANCELED.value:
                if status == CallStatus.RUNNING.value:
                    lease = self._lease(state, call_id)
                    if lease is not None and lease[1] > self.clock():
                        return ClaimLeased(lease_left_ms=int((lease[1] - self.clock()) * 1000))
                if status in _UNSTARTED or status == CallStatus.RUNNING.value:
                    state.status[call_id] = CallStatus.CANCELED.value
                return ClaimCanceled()
            if status in _FINAL:
                return ClaimFinished(status=CallStatus(status))
            if expect_started and job_started is None and "started_at" not in state.job:
                return ClaimUnstarted()
            replay = False
            if status == CallStatus.RUNNING.value:
                lease = self._lease(state, call_id)
                if lease is not None and lease[0] == token:
                    replay = True  # the holder's own claim again (its reply was lost)
                elif lease is not None:
                    left = int((lease[1] - self.clock()) * 1000)
                    if left > 0:
                        return ClaimLeased(lease_left_ms=left)
            elif status != CallStatus.READY.value:
                return ClaimNotReady(status=CallStatus(status))

            if replay:
                attempt = state.attempts[call_id]
            else:
                attempt = state.attempts[call_id] = state.attempts.get(call_id, 0) + 1
                if status == CallStatus.RUNNING.value:  # a takeover: the previous attempt's process died
                    state.lost[call_id] = state.lost.get(call_id, 0) + 1
            state.status[call_id] = CallStatus.RUNNING.value
            state.leases[call_id] = (token, self.clock() + lease_ms / 1000)
            if job_status == JobStatus.QUEUED.value:
                state.job["status"] = JobStatus.RUNNING.value
            if "started_at" not in state.job:  # HSETNX: also a job awaiting approval since its submission
                state.job["started_at"] = now_iso()
                if job_started is not None:
                    self._xadd(state, dumps(job_started.to_dict()))
            stored = state.calls[call_id]
            record_current = record_sha != "" and _sha1(stored) == record_sha
            tool = state.tools.get(json.loads(stored)["tool"], "")
            tool_current = tool_sha != "" and tool != "" and _sha1(tool) == tool_sha
            announced = attempt == 1 and record_current and tool_current and len(start_events) > 0
            if announced and not replay:
                for envelope in start_events:
                    self._xadd(state, dumps(envelope.to_dict()))
            tail = [json.loads(m) for m in state.log[log_offset:]] if log_offset >= 0 else []
            sent_record = "" if record_current else stored
            sent_tool = "" if tool_current else tool
            return Claimed(
                record=CallRecord.from_dict(json.loads(sent_record)) if sent_record else _carried(record),
                record_replaced=bool(sent_record) and record is not None,
                tool=json.loads(sent_tool) if sent_tool else None,
                attempt=attempt,
                log_length=len(state.log),
                log_tail=tail,
                tool_sha=_sha1(sent_tool) if sent_tool else "",
                announced=announced,
                lost=state.lost.get(call_id, 0),
            )

    def add_events(self, job_id: str, envelopes: Sequence[Envelope]) -> None:
        if not envelopes:
            return
        with self._changed:
            state = self._get(job_id)
            if state is None:  # XADD creates the stream
                state = self._jobs[job_id] = _Job()
            for envelope in envelopes:
                self._xadd(state, dumps(envelope.to_dict()))

    def commit(self, job_id: str, call_id: str, *, token: str, status: CallStatus, messages: Sequence[dict] = (),
               events: Sequence[Envelope] = ()) -> Commit:
        """commit.lua."""
        with self._changed:
            state = self._get(job_id)
            if state is None or state.status.get(call_id) != CallStatus.RUNNING.value:
                return CommitDuplicate()
            holder = self._lease(state, call_id)
            if holder is not None and holder[0] != token:
                return CommitSuperseded()
            job_status = state.job.get("status", "")
            late = job_status == JobStatus.CANCELED.value  # marked as arriving after the cancel
            state.log.extend(dumps({**m, "_afterCancel": True} if late else m) for m in messages)
            state.status[call_id] = status.value
            state.leases.pop(call_id, None)
            for envelope in events:
                body = envelope.to_dict()
                self._xadd(state, dumps({**body, "after_cancel": True} if late else body))
            record = json.loads(state.calls[call_id])
            released = _release_dependents(state, call_id, job_status)
            open_calls = int(state.job.get("open") or 0)
            if record["awaited"]:
                open_calls -= 1
                state.job["open"] = str(open_calls)
            kind, ticking = JobKind(state.job["kind"]), state.job.get("ticking") == "1"
            last = open_calls <= 0 and kind is JobKind.PLAN and JobStatus(job_status).is_active and not ticking
            return Committed(open_calls=open_calls, job_status=JobStatus(job_status),
                          kind=kind, released=released, ticking=ticking,
                          finish_inputs=self.finish_inputs(job_id) if last else None)

    def release_for_retry(self, job_id: str, call_id: str, *, token: str, event: Envelope | None = None) -> bool:
        """retry.lua."""
        with self._changed:
            state = self._get(job_id)
            holder = self._lease(state, call_id) if state is not None else None
            if state is not None and state.status.get(call_id) == CallStatus.READY.value and holder is not None \
                    and holder[0] == token:
                return True  # a replay of this release
            if state is None or state.status.get(call_id) != CallStatus.RUNNING.value:
                return False
            if holder is not None and holder[0] != token:
                return False
            state.status[call_id] = CallStatus.READY.value
            state.leases[call_id] = (token, self.clock() + 60.0)  # the releasing token, as retry.lua keeps it
            if event is not None:
                self._xadd(state, dumps(event.to_dict()))
            return True

    def renew_leases(self, job_id: str, leases: dict[str, str], lease_ms: int) -> int:
        """renew.lua."""
        with self._changed:
            state = self._get(job_id)
            if state is None:
                return 0
            renewed = 0
            for call_id, token in leases.items():
                held = self._lease(state, call_id)
                lapsed = held is None and state.status.get(call_id) == CallStatus.RUNNING.value  # nobody took it
                if lapsed or (held is not None and held[0] == token):
                    state.leases[call_id] = (token, self.clock() + lease_ms / 1000)
                    renewed += 1
            return renewed

    def finalize(self, job_id: str, *, record: JobRecord, event: Envelope) -> bool:
        """finalize.lua."""
        with self._changed:
            state = self._get(job_id)
            if state is None or state.job.get("status") not in _ACTIVE:
                return False
            state.job.update({"status": record.status.value, "record": dumps(record.to_dict()),
                              "finished_at": record.finished_at or now_iso()})
            self._xadd(state, dumps(event.to_dict()))
            self._end(state, record.status.value)
            return True

    def cancel(self, job_id: str, *, event: Envelope) -> tuple[JobStatus, list[str]]:
        """cancel.lua."""
        with self._changed:
            state = self._get(job_id)
            status = state.job.get("status") if state is not None else None
            if state is None or status is None:
                raise _not_found(job_id)
            if status not in _ACTIVE:
                return JobStatus(status), []
            state.job.update({"status": JobStatus.CANCELED.value, "finished_at": now_iso()})
            ready, running = [], []
            for call_id, call_status in state.status.items():
                if call_status in _UNSTARTED:
                    state.status[call_id] = CallStatus.CANCELED.value
                    if call_status == CallStatus.READY.value:
                        ready.append(call_id)
                elif call_status == CallStatus.RUNNING.value:
                    running.append(call_id)
            body = event.to_dict()
            self._xadd(state, dumps({**body, "running": sorted(running)} if running else body))
            self._end(state, JobStatus.CANCELED.value)
            return JobStatus.CANCELED, ready

    # ---------------------------------------------------------------------------------------- reads

    def _fields(self, job_id: str) -> dict[str, str]:
        with self._changed:
            state = self._get(job_id)
            return dict(state.job) if state is not None else {}

    def job_info(self, job_id: str) -> JobInfo:
        fields = self._fields(job_id)
        if not fields:
            raise _not_found(job_id)
        return decode_job(fields)

    def job_status(self, job_id: str) -> JobStatus:
        status = self._fields(job_id).get("status")
        if status is None:
            raise _not_found(job_id)
        return JobStatus(status)

    def wait_finished(self, job_id: str, timeout_s: float) -> JobStatus | None:
        deadline = time.monotonic() + max(0.01, timeout_s)
        with self._changed:
            while True:
                state = self._get(job_id)
                if state is not None and state.done:
                    return JobStatus(state.done[-1])
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._changed.wait(left)

    def read_log(self, job_id: str, start: int = 0) -> list[dict]:
        with self._changed:
            state = self._get(job_id)
            messages = list(state.log[start:]) if state is not None else []
        return [json.loads(m) for m in messages]

    def call_records(self, job_id: str, call_ids: Sequence[str] | None = None) -> dict[str, CallRecord]:
        with self._changed:
            state = self._get(job_id)
            calls = dict(state.calls) if state is not None else {}
        wanted = list(calls) if call_ids is None else [c for c in call_ids if c in calls]
        return {c: CallRecord.from_dict(json.loads(calls[c])) for c in wanted}

    def finish_inputs(self, job_id: str) -> FinishInputs:
        with self._changed:
            state = self._get(job_id)
            if state is None or not state.job:
                raise _not_found(job_id)
            fields, log, statuses = dict(state.job), list(state.log), dict(state.status)
        return FinishInputs(decode_job(fields), [json.loads(m) for m in log],
                            {k: CallStatus(v) for k, v in statuses.items()})

    def dependents(self, job_id: str, call_id: str) -> list[str]:
        with self._changed:
            state = self._get(job_id)
            value = state.dependents.get(call_id) if state is not None else None
        return json.loads(value) if value else []

    def job_tools(self, job_id: str) -> dict[str, dict]:
        with self._changed:
            state = self._get(job_id)
            tools = dict(state.tools) if state is not None else {}
        return {k: json.loads(v) for k, v in tools.items()}

    def call_statuses(self, job_id: str) -> dict[str, CallStatus]:
        with self._changed:
            state = self._get(job_id)
            statuses = dict(state.status) if state is not None else {}
        return {k: CallStatus(v) for k, v in statuses.items()}

    def record(self, job_id: str) -> JobRecord:
        info = self.job_info(job_id)
        if info.record is not None and info.status.is_final and info.status is not JobStatus.CANCELED:
            return info.record
        # a canceled job's calls that were running may still end: its state is what its log says now
        return build_job_record(info, self.read_log(job_id))

    def relay_events(self, job_id: str) -> int:
        """Module child jobs (the only ones relayed) run against Redis only: nothing to relay here."""
        if self._fields(job_id).get("parent"):
            raise NotImplementedError("relaying a module's child job is exercised against Redis")
        return 0

    def read_events(self, job_id: str, after: str = "0-0", *, block_ms: int | None = None,
                    count: int | None = None) -> list[tuple[str, dict]]:
        start = _stream_id(after)
        deadline = None if block_ms in (None, 0) else time.monotonic() + block_ms / 1000
        with self._changed:
            while True:
                state = self._get(job_id)
                entries = [(i, e) for i, e in (state.events if state is not None else []) if _stream_id(i) > start]
                if entries or block_ms is None:
                    break
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                self._changed.wait(left)
        if count is not None:
            entries = entries[:count]
        return [(entry_id, json.loads(envelope)) for entry_id, envelope in entries]

    def call_table(self, job_id: str) -> CallTable:
        with self._changed:
            state = self._get(job_id)
            if state is None or not state.job:
                raise _not_found(job_id)
            calls, statuses = dict(state.calls), dict(state.status)
            attempts, dependents = dict(state.attempts), dict(state.dependents)
        return CallTable(records={k: CallRecord.from_dict(json.loads(v)) for k, v in calls.items()},
                         statuses={k: CallStatus(v) for k, v in statuses.items()},
                         attempts={k: int(v) for k, v in attempts.items()},
                         dependents={k: json.loads(v) for k, v in dependents.items()})

    def recent_jobs(self, limit: int = 50) -> list[str]:
        with self._changed:
            return sorted(self._recent, key=lambda j: self._recent[j], reverse=True)[:limit]

    # ---------------------------------------------------------------------------------------- fleet

    def announce_worker(self, worker_id: str, announcement: dict, ttl_s: float) -> None:
        with self._changed:
            now = self.clock()
            self._workers[worker_id] = (dumps(announcement), now + ttl_s)
            self._activities.update(seen_activities(announcement, now))

    def retire_worker(self, worker_id: str) -> None:
        with self._changed:
            self._workers.pop(worker_id, None)

    def live_workers(self) -> list[dict]:
        now = self.clock()
        with self._changed:
            for worker_id in [w for w, (_, expiry) in self._workers.items() if expiry <= now]:
                del self._workers[worker_id]
            live = sorted(self._workers.items(), key=lambda item: (item[1][1], item[0]))
        return [json.loads(value) for _, (value, _) in live]

    def live_activities(self) -> dict[str, dict]:
        activities: dict[str, dict] = {}
        for worker in self.live_workers():
            for activity in worker.get("activities", []):
                entry = activities.setdefault(activity["name"], {**activity, "workers": []})
                entry["workers"].append(worker.get("id"))
        return activities

    def known_activities(self, memory_s: float) -> dict[str, dict]:
        live = self.live_activities()
        now = self.clock()
        with self._changed:
            stored = {name: json.loads(value) for name, value in self._activities.items()}
            for name in [n for n, entry in stored.items() if float(entry.get("last_seen", 0)) < now - memory_s]:
                del self._activities[name]
        return known_view(stored, live, memory_s=memory_s, now=now)

    def forget_activity(self, name: str) -> bool:
        with self._changed:
            return self._activities.pop(name, None) is not None

    def publish_tools(self, schemas: dict[str, dict], *, publisher: str) -> list[str]:
        conflicts = []
        with self._changed:
            for name, schema in schemas.items():
                current = self._tools.get(name)
                if current is not None and json.loads(current) != schema:
                    conflicts.append(name)
                    self._tool_conflicts[name] = dumps({"publisher": publisher, "at": now_iso(), "schema": schema})
                self._tools[name] = dumps(schema)
        return conflicts

    def published_tools(self) -> dict[str, dict]:
        with self._changed:
            return {k: json.loads(v) for k, v in self._tools.items()}

    def tool_conflicts(self) -> dict[str, dict]:
        with self._changed:
            return {k: json.loads(v) for k, v in self._tool_conflicts.items()}


def _not_found(job_id: str) -> JobNotFoundError:
    return JobNotFoundError(f"no job {job_id!r} (never submitted, or expired)")
