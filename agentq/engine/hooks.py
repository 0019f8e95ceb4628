"""The engine's one hook point for cross-cutting work, as dramatiq's middleware: metrics today, tracing and
budgets later.

A `Hook` overrides the moments it cares about; the composition root installs its hooks as one `Hooks` (called
in order) in the executor and the job service (whose rejections and cancellations may end a module's call).
`after_call` is told only of an attempt whose outcome took effect (a commit that wrote it, a release for retry
that happened), so a redelivered duplicate is never counted twice. A hook's failure after a call ended is logged
and does not undo or repeat anything.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from agentq.protocol.records import CallRecord

log = logging.getLogger("agentq.hooks")


@dataclass(frozen=True)
class CallEnded:
    """One attempt of a call that ended: `status` is done, failed or retry (failed, and tried again)."""

    job_id: str
    record: CallRecord
    status: str
    seconds: float


class Hook:
    """A piece of cross-cutting work; every moment does nothing unless overridden."""

    def before_call(self, job_id: str, record: CallRecord, attempt: int) -> None:
        """A claimed attempt is about to run (after its claim, before its handler)."""

    def after_call(self, ended: CallEnded) -> None:
        """An attempt's outcome was recorded."""

    def after_tick(self, job_id: str, n: int) -> None:
        """An agent job's tick task `n` ran (whatever it did)."""


class Hooks(Hook):
    """The hooks a process installed, called in order."""

    def __init__(self, hooks: Sequence[Hook] = ()):
        self.hooks = tuple(hooks)

    def before_call(self, job_id: str, record: CallRecord, attempt: int) -> None:
        for hook in self.hooks:
            hook.before_call(job_id, record, attempt)

    def after_call(self, ended: CallEnded) -> None:
        for hook in self.hooks:
            try:
                hook.after_call(ended)
            except Exception:
                log.exception("hook %r failed after call %s ended", hook, ended.record.id)

    def after_tick(self, job_id: str, n: int) -> None:
        for hook in self.hooks:
            try:
                hook.after_tick(job_id, n)
            except Exception:
                log.exception("hook %r failed after tick %d of job %s", hook, n, job_id)


class CallCounter(Protocol):
    """What counts ended attempts (`agentq.metrics.Metrics`)."""

    def call_ended(self, record: CallRecord, status: str, seconds: float) -> None: ...


class CallMetrics(Hook):
    """Counts ended attempts into the process's metrics (`agentq_calls`, `agentq_call_duration_seconds`), which
    the composition root passes in."""

    def __init__(self, counter: CallCounter):
        self.counter = counter

    def after_call(self, ended: CallEnded) -> None:
        self.counter.call_ended(ended.record, ended.status, ended.seconds)
