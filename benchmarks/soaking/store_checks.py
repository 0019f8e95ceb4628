"""The invariants read from what agentq wrote, held against the ledger: each job's event stream, each committed
output written once (by a run the ledger saw end), the counters that must be back at zero once the load stopped,
and the TTLs of the jobs' keys."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from agentq.runtime.redis_transport import noted_at
from agentq.store.state import StateStore
from benchmarks.soaking.checks import Check
from benchmarks.soaking.jobs import SoakJob
from benchmarks.soaking.ledger import Run

TERMINAL_CALL = "call.finished"


def _stream_problems(job: SoakJob, events: list[dict[str, Any]], status: str) -> list[str]:
    names = [e.get("event") for e in events]
    problems = []
    if not names or names[0] != "job.queued":
        problems.append(f"starts with {names[:1]}, not job.queued")
    if names.count("job.finished") != 1 or names[-1] != "job.finished":
        problems.append(f"job.finished {names.count('job.finished')} times, last event {names[-1:]}")
    elif events[-1].get("status") != status:
        problems.append(f"job.finished says {events[-1].get('status')}, the record {status}")
    started = {str(e.get("call_id")) for e in events if e.get("event") == "call.started"}
    finished = Counter(str(e.get("call_id")) for e in events if e.get("event") == TERMINAL_CALL)
    problems += [f"call {c} started and never finished" for c in sorted(started - set(finished))]
    problems += [f"call {c} finished {n} times" for c, n in sorted(finished.items()) if n > 1]
    return [f"{job.tag} ({job.job_id}): {p}" for p in problems]


def where_stuck(store: StateStore, job: SoakJob) -> str:
    """Where a job that never ended stands: its status, each call's status, its last events, its open waits."""
    status = store.redis.hget(store.keys(job.job_id).job, "status")
    calls = {str(c): str(s) for c, s in store.call_statuses(job.job_id).items()}
    events = [f"{e.get('event')}:{e.get('call_id') or ''}" for _, e in store.read_events(job.job_id)][-4:]
    waits = store.redis.hgetall(store.keys(job.job_id).waits)
    open_calls = [c for c, s in calls.items() if s not in ("done", "failed", "canceled", "skipped")]
    return (f"status {status}, calls {calls}, last events {events}, waits {waits}, "
            f"tasks {_tasks_held(store, job.job_id, open_calls)}")


def _tasks_held(store: StateStore, job_id: str, calls: list[str]) -> str:
    """Where the broker (kombu's Redis transport on this server) holds the open calls' tasks: on a queue's list,
    or unacknowledged (how long ago it was taken), and whether kombu's restore of unacknowledged tasks is locked."""
    redis, found = store.redis, dict.fromkeys(calls, "nowhere")
    for key in redis.scan_iter(count=1000, _type="list"):
        for message in redis.lrange(key, 0, -1):
            found.update({c: f"queued on {key}" for c in calls if f"{job_id}.{c}" in str(message)})
    for tag, entry in redis.hgetall("unacked").items():
        for call in [c for c in calls if f"{job_id}.{c}" in str(entry)]:
            # when it was noted: in the entry (agentq's Redis transport), else in kombu's index
            score = noted_at(entry) or redis.zscore("unacked_index", tag)
            found[call] = f"unacked, taken {time.time() - score:.0f} s ago" if score else "unacked, not indexed"
    return f"{found}, unacked_mutex ttl {redis.ttl('unacked_mutex')}"


def event_streams(store: StateStore, jobs: list[SoakJob]) -> Check:
    """Every job's stream starts with job.queued, ends with its one job.finished (the record's status), and every
    call that started finished exactly once."""
    check = Check("every event stream complete, ending with job.finished", len(jobs))
    events_read, failed = 0, dict[str, str]()
    for job in jobs:
        events = [e for _, e in store.read_events(job.job_id)]
        events_read += len(events)
        check.violations += _stream_problems(job, events, job.status)
        if job.status == "failed" and events and len(failed) < 10:
            failed[job.tag] = str((events[-1].get("error") or {}).get("message", ""))[:160]
    check.figures["events"] = events_read
    if failed:
        check.figures["failed_jobs"] = failed
    return check


def _output_problems(value: Any, where: str, ledger: dict[str, list[Run]]) -> list[str]:
    if not isinstance(value, dict) or "tag" not in value:
        return []
    runs = {r.run: r for r in ledger.get(str(value["tag"]), [])}
    run = runs.get(str(value.get("run")))
    if run is None or run.end is None or run.failed:
        return [f"{where}: output of run {value.get('run')} of {value['tag']}, which the ledger never saw end"]
    return []


def outputs_once(store: StateStore, jobs: list[SoakJob], ledger: dict[str, list[Run]]) -> Check:
    """Each committed output was written once (no tag twice in a pushed list) by a run the ledger saw end; a
    `&&` fan-out wrote the same value to both paths."""
    check = Check("each committed output written once, by a run that ended", len(jobs))
    outputs = 0
    for job in jobs:
        record = store.record(job.job_id)
        state = record.state if isinstance(record.state, dict) else {}
        pushed = state.get("runs") or []
        tags = Counter(str(v.get("tag")) for v in pushed if isinstance(v, dict))
        check.violations += [f"{job.tag}: {t} pushed {n} times" for t, n in tags.items() if n > 1]
        values = [(f"{job.tag} runs[{i}]", v) for i, v in enumerate(pushed)]
        values += [(f"{job.tag} {k}", state.get(k)) for k in ("a", "b", "step")]
        values += [(f"{job.tag} {i}.item", (s or {}).get("item")) for i, s in sorted(record.instances.items())]
        for where, value in values:
            outputs += value is not None
            check.violations += _output_problems(value, where, ledger)
        if "a" in state and state.get("a") != state.get("b"):
            check.violations.append(f"{job.tag}: the fan-out wrote {state.get('a')} and {state.get('b')}")
    check.figures["outputs"] = outputs
    return check


def _left_over(store: StateStore, jobs: list[SoakJob]) -> list[str]:
    redis, fleet = store.redis, store.fleet
    counts = store.admission_counts()  # the counts hash also keeps each queue's virtual time and parked priorities
    left = [f"admission counts: {counts}"] if counts else []
    left += [f"admission {part}: {n} fields" for part in ("info", "parked") if (n := redis.hlen(fleet.admission(part)))]
    for tenant in ("acme", "globex", "default"):
        if n := redis.hlen(fleet.concurrency(tenant)):
            left.append(f"concurrency keys of {tenant}: {n} jobs hold or wait")
        for key in redis.scan_iter(match=f"{fleet.concurrency_prefix(tenant)}h:*", count=500):
            if n := redis.zcard(key):
                left.append(f"{key!r}: {n} holders")
    for job in jobs:
        budget = redis.hgetall(store.keys(job.job_id).budget)
        held = {k: v for k, v in budget.items() if (k.startswith("held.") and int(v)) or k.startswith("r:")}
        if held:
            left.append(f"budget of {job.tag}: {held}")
    return left


def counters_zero(store: StateStore, jobs: list[SoakJob], timeout_s: float) -> Check:
    """Once the load stopped: admission places, concurrency keys and budget reservations all given back (waited
    for up to `timeout_s`: a sweep runs each heartbeat)."""
    check = Check("admission places, concurrency keys, budget reservations back to zero", len(jobs))
    deadline = time.monotonic() + timeout_s
    began = time.monotonic()
    while (left := _left_over(store, jobs)) and time.monotonic() < deadline:
        time.sleep(0.5)
    check.violations = left
    check.figures["zero_after_s"] = round(time.monotonic() - began, 1)
    return check


def keys_expire(store: StateStore, jobs: list[SoakJob]) -> Check:
    """Every key of an ended job expires (no key outlives its job's TTL)."""
    check = Check("every ended job's keys carry a TTL", len(jobs))
    pipe = store.redis.pipeline(transaction=False)
    names = [(job, key) for job in jobs if job.ended_at for key in store.keys(job.job_id).all]
    for _, key in names:
        pipe.ttl(key)
    for (job, key), ttl in zip(names, pipe.execute(), strict=True):
        if ttl == -1:
            check.violations.append(f"{job.tag}: {key} has no TTL")
    return check
