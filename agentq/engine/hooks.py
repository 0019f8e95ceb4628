"""The engine's one hook point for cross-cutting work, as dramatiq's middleware: metrics, budgets, later tracing.

A `Hook` overrides the moments it cares about; the composition root installs its hooks as one `Hooks` (called
in order) in the executor and the job service (whose rejections and cancellations may end a module's call).
`after_call` is told only of an attempt whose outcome took effect (a commit that wrote it, a release for retry
that happened), so a redelivered duplicate is never counted twice. A hook's failure after a call ended is logged
and does not undo or repeat anything.

Model requests pass two moments (`engine/requests.py` is the one place every request of the engine goes
through): `before_request` is a gate, run in order, each hook seeing the request the ones before it let through
and returning the request to send (a budget may lower its `max_tokens`) or raising to refuse it (`BudgetExceeded`:
the request is not sent); `after_request` is told of every request a hook let through, answered or not, so what a
gate reserved is settled exactly once — also when a later gate refused the request.

Two moments wrap work instead of following it: an agent job's tick runs inside `around_tick`, an activity's
handler inside `around_activity` (tracing's spans: `telemetry/hook.py`). The engine never imports a plug-in; the
composition root installs them here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from dataclasses import dataclass, replace
from typing import Any, Protocol

from agentq.llm.base import LLMAnswer, LLMRequest
from agentq.protocol.envelopes import Envelope
from agentq.protocol.records import CallRecord, JobInfo

log = logging.getLogger("agentq.hooks")


@dataclass(frozen=True)
class CallEnded:
    """One attempt of a call that ended: `status` is done, failed or retry (failed, and tried again)."""

    job_id: str
    record: CallRecord
    status: str
    seconds: float


@dataclass
class StartEvents:
    """The events a request starts with (a tick's `tick.started`), appended to `job_id`'s stream once every gate let
    it through: by the last gate that may refuse it (the rate limits) in its own store step when it can (`written`),
    else by the engine before it sends the request. A request a gate refused has not started."""

    job_id: str
    envelopes: Sequence[Envelope]
    written: bool = False


@dataclass(frozen=True)
class ModelRequest:
    """A model request about to be sent for `job` (a module's child job for its ticks and latent calls); `key` is
    unique to this attempt of the request, `place` names the request across its attempts (the job's request
    number, the call it answers: a request the rate limits defer keeps its place by it, and the budget holds its
    reservation under it, so the attempt that takes over from a killed one finds that one's reservation)."""

    job: JobInfo
    request: LLMRequest
    key: str
    place: str = ""
    batch: bool = False  # sent through the Message Batches API (the batch lane: no rate-limit buckets hold it)
    starting: StartEvents | None = None  # the events it starts with, once let through


@dataclass(frozen=True)
class RequestEnded:
    """A model request a hook let through: `asked.request` as sent, and its answer (None: it was refused by a
    later gate, or failed with no usage known), or what it failed with (`error`, when the provider raised)."""

    asked: ModelRequest
    answer: LLMAnswer | None
    error: BaseException | None = None


class Hook:
    """A piece of cross-cutting work; every moment does nothing unless overridden."""

    def before_request(self, asked: ModelRequest) -> LLMRequest:
        """A model request is about to be sent: return it (or a changed copy) to let it through, or raise to
        refuse it."""
        return asked.request

    def after_request(self, ended: RequestEnded) -> None:
        """A request this hook let through was answered, failed, or refused by a later hook."""

    def before_call(self, job_id: str, record: CallRecord, attempt: int) -> None:
        """A claimed attempt is about to run (after its claim, before its handler)."""

    def after_call(self, ended: CallEnded) -> None:
        """An attempt's outcome was recorded."""

    def after_tick(self, job_id: str, n: int) -> None:
        """An agent job's tick task `n` ran (whatever it did)."""

    def around_tick(self, info: JobInfo, n: int) -> AbstractContextManager[Any]:
        """What an agent job's tick `n` runs inside (its model request, the calls it sends)."""
        return _NOTHING

    def around_activity(self, name: str, call: Mapping[str, Any],
                        tool: Mapping[str, Any]) -> AbstractContextManager[Any]:
        """What an activity's handler runs inside, given the call as resolved and its tool."""
        return _NOTHING


_NOTHING: AbstractContextManager[None] = nullcontext()


def _wrapping(hooks: Sequence[Hook], moment: str) -> tuple[Hook, ...]:
    """The hooks that override the wrapping `moment` (the others would only add a context that does nothing)."""
    return tuple(hook for hook in hooks if getattr(type(hook), moment) is not getattr(Hook, moment))


def _nested(contexts: Sequence[AbstractContextManager[Any]]) -> AbstractContextManager[Any]:
    """The `contexts` entered in order (and left in reverse) as one."""
    return contexts[0] if len(contexts) == 1 else _entered(contexts)


@contextmanager
def _entered(contexts: Sequence[AbstractContextManager[Any]]) -> Iterator[None]:
    with ExitStack() as stack:
        for context in contexts:
            stack.enter_context(context)
        yield


class Hooks(Hook):
    """The hooks a process installed, called in order."""

    def __init__(self, hooks: Sequence[Hook] = ()):
        self.hooks = tuple(hooks)
        self._around_tick = _wrapping(self.hooks, "around_tick")
        self._around_activity = _wrapping(self.hooks, "around_activity")

    def around_tick(self, info: JobInfo, n: int) -> AbstractContextManager[Any]:
        if not self._around_tick:
            return _NOTHING
        return _nested([hook.around_tick(info, n) for hook in self._around_tick])

    def around_activity(self, name: str, call: Mapping[str, Any],
                        tool: Mapping[str, Any]) -> AbstractContextManager[Any]:
        if not self._around_activity:
            return _NOTHING
        return _nested([hook.around_activity(name, call, tool) for hook in self._around_activity])

    def before_call(self, job_id: str, record: CallRecord, attempt: int) -> None:
        for hook in self.hooks:
            hook.before_call(job_id, record, attempt)

    def before_request(self, asked: ModelRequest) -> LLMRequest:
        """Each hook's gate in order; when one refuses, those that let the request through are told it ended."""
        passed: list[Hook] = []
        request = asked.request
        try:
            for hook in self.hooks:
                request = hook.before_request(replace(asked, request=request))
                passed.append(hook)
        except BaseException:
            self._ended(passed, RequestEnded(replace(asked, request=request), None))
            raise
        return request

    def after_request(self, ended: RequestEnded) -> None:
        self._ended(self.hooks, ended)

    @staticmethod
    def _ended(hooks: Sequence[Hook], ended: RequestEnded) -> None:
        for hook in reversed(hooks):
            try:
                hook.after_request(ended)
            except Exception:
                log.exception("hook %r failed after a model request of job %s", hook, ended.asked.job.id)

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

    def call_ended(self, record: CallRecord, status: str, seconds: float, *, tenant: str = "default") -> None: ...


class CallMetrics(Hook):
    """Counts ended attempts into the process's metrics (`agentq_calls`, `agentq_call_duration_seconds`), which
    the composition root passes in; `tenant_label` gives the `tenant` label of a call's tenant (its record carries
    it; `agentq.metrics.tenants`)."""

    def __init__(self, counter: CallCounter, tenant_label: Callable[[str], str] | None = None):
        self.counter = counter
        self.tenant_label = tenant_label

    def after_call(self, ended: CallEnded) -> None:
        tenant = self.tenant_label(ended.record.tenant) if self.tenant_label is not None else "default"
        self.counter.call_ended(ended.record, ended.status, ended.seconds, tenant=tenant)
