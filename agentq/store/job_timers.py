"""A job's own timers (docs/waits.md#deadlines): its deadline, the start of a job submitted for later, and the check
that a job sent its first tasks (`@unstarted`, written with the job by `create_job`).

They live in the fleet's `{timers}:due` sorted set beside the waits' (`store/waits.py`), as the member
`<job> @<kind>` (a call id never starts with `@`), so the dispatchers' one timer loop (`runtime/timers.py`) takes
them with the waits' and under the same claim. The job's side is decided in its own keys, once.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from agentq.protocol.digests import dumps, now_iso
from agentq.protocol.envelopes import Envelope
from agentq.protocol.records import JobRecord
from agentq.protocol.status import JobStatus
from agentq.store.boundary import map_store_errors
from agentq.store.codecs import entry
from agentq.store.connection import StoreConnection
from agentq.store.core import not_found
from agentq.store.part import StorePart
from agentq.store.script_runner import ScriptRunner
from agentq.store.stats import JobCounts
from agentq.store.step_args import StartCheck
from agentq.store.views import DeadlineEnd

JOB_TIMER_SCRIPTS = ("deadline", "start_timeout")
JOB_TIMER_PREFIX = "@"  # `<job> @deadline`: a job's timer, not a call's
DEADLINE = "deadline"
START = "start"
UNSTARTED = "unstarted"  # a job whose first tasks only its submitter sends: started again if still unstarted
UNTAKEN = "untaken:"  # `<job> @untaken:<call>`: a ready call's `x-start-timeout-s`
DECIDED = "decided:"  # `<job> @decided:<call>`: an approved call, sent again if still ready (runtime/decisions.py)
REJECTED = "rejected:"  # `<job> @rejected:<call>`: a rejected call, what follows its failure taken again (same)


def job_timer_member(job_id: str, kind: str) -> str:
    return f"{job_id} {JOB_TIMER_PREFIX}{kind}"


def unstarted_check(job_id: str, *, timers: str, cluster: bool) -> StartCheck | None:
    """The job's `@unstarted` timer in the fleet's `timers`, for the step that starts the job to drop it in its own
    round trip (it would fire a lease later, find the job started and do nothing): on one Redis only; None on a
    cluster, where the timers are in another slot than the job's keys."""
    return None if cluster else StartCheck(timers, job_timer_member(job_id, UNSTARTED))


@map_store_errors
class RedisJobTimers(StorePart):
    """Set and drop a job's timers; end a job at its deadline (a part of `StateStore`)."""

    def __init__(self, conn: StoreConnection, counts: JobCounts):
        super().__init__(conn)
        self.counts = counts  # the metrics' bookkeeping of jobs as they end (a part it is given)

    _job_timer_scripts: ScriptRunner | None = None

    @property
    def _job_timers(self) -> ScriptRunner:
        runner = self._job_timer_scripts
        if runner is None:
            runner = self._job_timer_scripts = ScriptRunner(self.redis, JOB_TIMER_SCRIPTS)
        return runner

    def set_job_timer(self, job_id: str, kind: str, due_ms: int, *, nx: bool = False) -> None:
        """Bring the job's timer `kind` due at `due_ms` (unix ms); with `nx`, only when it has none."""
        self.redis.zadd(self.fleet.timers, {job_timer_member(job_id, kind): due_ms}, nx=nx)

    def set_start_timeouts(self, job_id: str, due_ms: Mapping[str, int]) -> None:
        """The start timeouts of a job's calls just made ready (call id -> due, unix ms); a call's first one stays
        (a call published again keeps the time it became ready)."""
        members = {job_timer_member(job_id, UNTAKEN + call_id): due for call_id, due in due_ms.items()}
        self.redis.zadd(self.fleet.timers, members, nx=True)

    def take_untaken(self, job_id: str, call_id: str, *, token: str, lease_ms: int) -> bool:
        """start_timeout.lua: a call still `ready` becomes `running` under `token` (to commit its StartTimedOut);
        False when it was claimed or ended."""
        keys = self.keys(job_id)
        return bool(self._job_timers.run("start_timeout", [keys.status, keys.lease(call_id)],
                                         [call_id, token, lease_ms]))

    def drop_job_timer(self, job_id: str, kind: str) -> None:
        self.redis.zrem(self.fleet.timers, job_timer_member(job_id, kind))

    def start_scheduled(self, job_id: str, *, waiting: bool, event: Callable[[JobStatus], Envelope]) -> bool:
        """A scheduled job's start: `scheduled` -> `waiting` (it has concurrency keys to wait for) or the status it
        was written for, with the `event` of that status; False when it is not scheduled (started by another
        dispatcher, canceled, ended)."""
        keys = self.keys(job_id)

        def flip(pipe: Any) -> None:
            status, start_status = pipe.hmget(keys.job, "status", "start_status")
            pipe.multi()
            if status == JobStatus.SCHEDULED:
                started = JobStatus.WAITING if waiting else JobStatus(start_status or JobStatus.QUEUED)
                pipe.hset(keys.job, "status", started.value)
                pipe.xadd(keys.events, {"e": entry(event(started), job_id)})

        return bool(self.redis.transaction(flip, keys.job))

    def end_by_deadline(self, job_id: str, *, record: JobRecord, event: Envelope, log_length: int) -> DeadlineEnd:
        """deadline.lua: fail an active job with `record` (built from a log of `log_length` messages), cancel its
        open calls; `DeadlineEnd.outcome` is 'ended', 'final' (it had ended) or 'moved' (its log grew: build the
        record again)."""
        keys = self.keys(job_id)
        reply = self._job_timers.run("deadline", [keys.job, keys.status, keys.events, keys.done, keys.log,
                                                  keys.tick_lease],
                                     [dumps(record.to_dict()), record.finished_at or now_iso(),
                                      entry(event, job_id), log_length])
        outcome = _text(reply[0])
        if outcome == "missing":
            raise not_found(job_id)
        if outcome != "ended":
            return DeadlineEnd(outcome)
        self.counts.count_end(job_id, JobStatus.FAILED, record.tenant)
        ready, running, waiting = (_ids(reply[i]) for i in (1, 2, 3))
        return DeadlineEnd("ended", ready=ready, running=running, waiting=waiting)


def _ids(value: Any) -> tuple[str, ...]:
    decoded = json.loads(_text(value))
    return tuple(decoded) if isinstance(decoded, list) else ()  # cjson encodes an empty table as {}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
