"""Resuming an ended job in the store (docs/resume.md): `RedisResumes`, a part of `StateStore`, runs `resume.lua`, the
one atomic step that takes a failed or canceled job back to running (so of two resumes at once, one resumes it), and
the fleet-wide bookkeeping a job's end took back (the active jobs the metrics count), written after the step as
`create_job` writes a new job's.

The step's arguments are `ResumeArgs`; its contract (`ResumeStore`) and typed replies (`Resumed`, `ResumeConflict`,
`ResumeMissing`) are in `resume_contract.py`, which the job service and `base.py`'s `Store` know it by.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from typing import Any

from agentq.protocol.digests import dumps, now_iso
from agentq.protocol.envelopes import Envelope
from agentq.protocol.records import CallRecord, JobKind
from agentq.protocol.status import JobStatus
from agentq.store.boundary import map_store_errors
from agentq.store.codecs import entry
from agentq.store.part import StorePart
from agentq.store.resume_contract import ResumeConflict, Resumed, ResumeMissing, ResumeReply
from agentq.store.script_runner import ScriptRunner

log = logging.getLogger("agentq.store")

RESUME_SCRIPTS = ("resume",)


@dataclass(frozen=True)
class ResumeArgs:
    """resume.lua's ARGV[1] (see the script's header)."""

    now: str
    expire_at_ms: int
    status: str
    event: str
    lease_prefix: str
    options: str | None = None
    note: str | None = None

    def encode(self) -> str:
        return json.dumps({k: v for k, v in asdict(self).items() if v is not None}, ensure_ascii=False)


@map_store_errors
class RedisResumes(StorePart):
    """The resume step (a part of `StateStore`)."""

    _resume_scripts: ScriptRunner | None = None

    @property
    def _resumes(self) -> ScriptRunner:
        runner = self._resume_scripts
        if runner is None:
            runner = self._resume_scripts = ScriptRunner(self.redis, RESUME_SCRIPTS)
        return runner

    def resume_job(self, job_id: str, *, event: Envelope, expire_at_ms: int, waiting: bool,
                   options: dict[str, Any] | None, note: dict[str, Any] | None) -> ResumeReply:
        """resume.lua: take a failed or canceled job back to running (`waiting` for its concurrency keys), with
        `options` (the job's, overrides applied; None: unchanged), `note` appended to an agent job's log and
        `event` (job.resumed) on its stream; its keys expire at `expire_at_ms`. The job joins the active jobs again."""
        keys = self.keys(job_id)
        args = ResumeArgs(now=now_iso(), expire_at_ms=expire_at_ms,
                          status=(JobStatus.WAITING if waiting else JobStatus.RUNNING).value,
                          event=entry(event, job_id), lease_prefix=keys.leases,
                          options=dumps(options) if options is not None else None,
                          note=dumps(note) if note is not None else None)
        step_keys = [keys.job, keys.status, keys.calls, keys.waiting, keys.attempts, keys.lost, keys.dependents,
                     keys.approval, keys.events, keys.done, keys.log, keys.tick_lease, keys.exchanges, keys.tools,
                     keys.spec, keys.budget, keys.waits]
        reply = self._resumes.run("resume", step_keys, [args.encode()])
        outcome = _text(reply[0])
        if outcome == "missing":
            return ResumeMissing()
        if outcome == "conflict":
            return ResumeConflict(JobStatus(_text(reply[1])))
        resumed = Resumed(run=int(reply[1]), status=JobStatus(_text(reply[2])), open_calls=int(reply[3]),
                          exchanges=int(reply[4]), kind=JobKind(_text(reply[5])),
                          ready=[CallRecord.from_dict(json.loads(_text(r))) for r in reply[7:7 + int(reply[6])]])
        self._count_resumed(job_id, expire_at_ms, held=resumed.status is JobStatus.AWAITING_APPROVAL)
        return resumed

    def _count_resumed(self, job_id: str, expire_at_ms: int, *, held: bool) -> None:
        """A resumed job is active again for the metrics (its end takes it out again); best effort, as a job's end's
        bookkeeping is when it follows the step that ended it (`JobCounts.count_end`)."""
        try:
            pipe = self.redis.pipeline(transaction=False)
            pipe.zadd(self.fleet.active_jobs, {job_id: expire_at_ms / 1000})
            if held:
                pipe.zadd(self.fleet.approval_jobs, {job_id: self.clock()})
            pipe.execute()
        except Exception:
            log.warning("job %s was resumed, but the metrics' active jobs could not be updated", job_id,
                        exc_info=True)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
