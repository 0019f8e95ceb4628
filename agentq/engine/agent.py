"""The agent loop (docs/protocol.md#jobs, docs/protocol.md#what-the-model-is-sent): one model request per tick, its
calls dispatched while the model streams.

A tick is an engine task, `agentq.engine.tick [job_id, n]`, where `n` is the number of model requests the
job has made so far: a task for a request that was made already finds a different number and does nothing.
The tick claims the job's tick lease (`begin_tick`: no awaited call may be open), composes the job's tools
against the activities known right now, asks the model, and writes each complete call of the streamed
solution as it arrives (`add_calls`), sending the ready ones to their queues at once. When the stream ends
it validates the whole solution: an invalid one is sent back once (the next request carries the problems in
an error tool_result); a second invalid answer becomes structural errors in the log. `end_tick` keeps the
exchange and its usage; whoever sees the job with no open call and no tick in flight takes the next step
(`JobProgress.advance`): the last commit, or the tick itself. Nothing ever waits on another task.

Transient model failures (429, overload, an `error` event mid-stream) are retried as Celery countdowns that
honour `retry-after`, up to `AGENTQ_LLM_MAX_ATTEMPTS`; calls already dispatched from the broken stream keep
their ids, so the retried stream cannot dispatch them again.

Stop reasons (docs/protocol.md#thinking-and-stop-reasons): an answer cut at max_tokens keeps the calls that came
whole (already written) as its solution, and the next request asks for the rest; cut again right after, the job
fails (`ModelOutputTruncated`). A refusal fails the job at once. A request the context window refuses is compacted
once (`Transcript.compact_all`) and made again within the same tick, then fails the job (`ContextWindowExceeded`).
When the refusal says the model's window ("prompt is too long: N tokens > M maximum"), it is kept for the model, for
the fleet (`engine/windows.py`, scaled by how the request's estimate compares with N): this job's conversation, and
every later one of that model, is compacted to stay under it, so a job whose window is smaller than assumed meets
one refusal. With thinking on (`options.thinking`), an answer without the solution tool is sent back once, and the
answer's thinking blocks stay in its exchange, to go back unchanged; their summaries become `thinking` events.
"""

from __future__ import annotations

import hashlib
import logging
import random
import uuid
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from agentq.engine.budget import stop_for_budget
from agentq.engine.caches import Transcripts
from agentq.engine.hooks import Hook, StartEvents
from agentq.engine.leases import LeaseKeeper
from agentq.engine.progress import Dispatch, JobProgress
from agentq.engine.requests import ModelRequests
from agentq.engine.routing import Routing
from agentq.engine.solutions import solution_part, solution_problems
from agentq.engine.tick_end import TickAnswer, TickEnding
from agentq.engine.windows import LearnedWindows
from agentq.errors import (
    BudgetExceeded,
    ContextWindowExceeded,
    LLMError,
    LLMRetryableError,
    ModelDeferred,
    ModelStopped,
)
from agentq.llm.base import LLMRequest, Usage
from agentq.protocol.compaction import estimated_tokens
from agentq.protocol.compose import compose, composed_tools
from agentq.protocol.context import MIN_INPUT_TOKENS
from agentq.protocol.envelopes import JobStarted, TickStarted
from agentq.protocol.events import activity_part
from agentq.protocol.instructions import job_system_texts, system_blocks
from agentq.protocol.jobs import PlannedCall
from agentq.protocol.records import TICK, ErrorInfo, JobInfo
from agentq.protocol.ticks import TickPlan
from agentq.protocol.transcript import Transcript
from agentq.settings import Settings
from agentq.store.contracts import BudgetStore, CallStore, EventStore, JobReader, LimitStore, TickStore
from agentq.store.replies import TickClaimed, TickLeased, TickStale
from agentq.store.views import AgentInputs


class AgentStore(TickStore, EventStore, BudgetStore, CallStore, JobReader, Protocol):
    """What the agent loop's ticks use."""

log = logging.getLogger("agentq.agent")


def backoff_s(attempt: int, retry_after_s: float | None) -> float:
    """The wait before the next attempt of a model request: the provider's `retry-after` when it gave one,
    else exponential from 1 s (jittered), at most 60 s."""
    if retry_after_s is not None:
        return min(max(retry_after_s, 0.0), 600.0)
    return min(60.0, 2.0 ** (attempt - 1)) * random.uniform(0.5, 1.0)


def call_ids(job_id: str, n: int) -> Callable[[int], str]:
    """The ids of the calls of a job's request number `n`, the same on every attempt of that request."""
    seed = hashlib.sha1(f"{job_id}\x00{n}".encode()).hexdigest()[:24]
    return lambda i: f"call_{seed}{i:04x}"


@dataclass(frozen=True)
class _Tick:
    """What one tick asks with: the job, its conversation, the solution schema and the tools composed for it."""

    job_id: str
    n: int
    token: str
    attempt: int
    info: JobInfo
    transcript: Transcript
    solution_schema: dict[str, Any]
    composed: dict[str, dict]
    known: Mapping[str, Mapping[str, Any]]


@dataclass
class _Run:
    """One request's stream: its plan, the complete calls that came (in order), how many were written."""

    plan: TickPlan
    streamed: list[dict] = field(default_factory=list)
    written: int = 0


KnownActivities = Callable[[Collection[str]], Mapping[str, Mapping[str, Any]]]
"""`known_activities(tool names)`: the known activities a tick of a job with those tools composes against."""


class AgentLoop(TickEnding):
    """Runs agent ticks for one process (any number of threads)."""

    store: AgentStore

    def __init__(self, store: AgentStore, model: ModelRequests | None, dispatch: Dispatch, *, routing: Routing,
                 settings: Settings, known_activities: KnownActivities,
                 progress: JobProgress, leases: LeaseKeeper, source: str = "agentq",
                 module_loader: Callable[[str], dict] | None = None, hooks: Hook | None = None,
                 limits: LimitStore | None = None):
        self.store = store
        self.hooks = hooks if hooks is not None else Hook()  # a tick runs inside `around_tick` (a tracing span)
        self.model = model  # the provider behind the hooks' gates (None: no LLM configured)
        self.dispatch = dispatch
        self.routing = routing
        self.settings = settings
        self.known_activities = known_activities
        self.progress = progress  # ends the job, or sends its next tick (and resumes a module's parent)
        self.leases = leases
        self.source = source
        self.module_loader = module_loader
        self.lease_ms = int(settings.lease_s * 1000)
        self.transcripts = Transcripts(settings.engine_concurrency)  # the conversations of the jobs it ticks
        # per model: what refusals taught the fleet (`limits`: the limits part; None: this process's own only)
        self.windows = LearnedWindows(limits, settings.heartbeat_s)

    # ---------------------------------------------------------------------------------------- a tick

    def tick(self, job_id: str, n: int = 0) -> float | None:
        """Make the job's request number `n`; returns seconds to wait before trying again, or None."""
        token = uuid.uuid4().hex
        started = JobStarted(job_id=job_id, part=activity_part("Job started", source=self.source))
        read_from = self.transcripts.read_from(job_id)  # the claim reads the tick's inputs from there
        claim = self.store.begin_tick(job_id, exchanges=n, token=token, lease_ms=self.lease_ms,
                                      job_started=started, read_from=read_from)
        match claim:
            case TickLeased(lease_left_ms=left):
                return max(left, 100) / 1000
            case TickClaimed():
                pass
            case TickStale():  # its request was made: a redelivered or duplicate task, whose first may have died (or
                # failed to publish) between that request's commit and sending its calls or the next tick: the calls
                # still ready sent again, and the job's next step, when due
                self.progress.resend_ready(job_id)
                self.progress.step_if_due(job_id)
                return None
            case _:
                log.info("tick %d of job %s not run: %s", n, job_id, claim.outcome)
                return None
        self.leases.hold(job_id, TICK, token)
        try:
            return self._tick(job_id, n, token, claim, read_from)
        finally:
            self.leases.release(job_id, TICK)

    def _tick(self, job_id: str, n: int, token: str, claim: TickClaimed, read_from: tuple[int, int]) -> float | None:
        inputs, transcript = self.transcripts.read(self.store, job_id, claim.inputs, read_from)
        attempt = claim.attempt
        try:
            with self.hooks.around_tick(inputs.info, n):
                return self._ask(job_id, n, token, attempt, inputs, transcript)
        finally:
            if inputs.info.parent is not None:
                self.progress.relay(job_id)  # a module's child job: its tick's events reach the parent's stream

    def _ask(self, job_id: str, n: int, token: str, attempt: int, inputs: AgentInputs,
             transcript: Transcript) -> float | None:
        info = inputs.info
        if info.has_final_output or info.ticks >= info.job_options.max_ticks:
            self.store.release_tick(job_id, token=token)  # nothing to ask: the job ends (see `advance`)
            self.store.end_ticking(job_id)
            self.progress.advance(job_id)
            return None
        if self.model is None:
            self._give_up(job_id, token, n, "LLMNotConfigured", "agent jobs (no `calls`) need an LLM: set "
                          "ANTHROPIC_API_KEY (or AGENTQ_LLM) for the dispatcher, or submit a plan job with calls")
            return None
        known = self.known_activities(tuple(inputs.registered))
        solution_schema = compose(list(inputs.registered.values()), tuple(known), info.output,
                                  plan=False, module_loader=self.module_loader)
        composed = {t["properties"]["_tool"]["const"]: t for t in composed_tools(solution_schema)}
        self.store.set_job_tools(job_id, composed)
        self.transcripts.keep(job_id, transcript)  # this tick only reads it from here on
        learned = self.windows.get(info.job_options.model or self.settings.model)
        if learned is not None:
            transcript.limit(learned)
        return self._solve_within_window(_Tick(job_id, n, token, attempt, info, transcript, solution_schema,
                                               composed, known))

    def _solve_within_window(self, tick: _Tick) -> float | None:
        """Ask the model; a request the context window refuses is compacted once (to the window the refusal
        taught, when it says it) and asked again, then fails the job."""
        for compacted in (False, True):
            outcome = self._solve(tick)
            if not isinstance(outcome, ContextWindowExceeded):
                return outcome
            fitted = not compacted and self._learn_window(tick, outcome)
            if compacted or not (tick.transcript.compact_all() or fitted):
                self._give_up(tick.job_id, tick.token, tick.n, "ContextWindowExceeded", f"{outcome}; " + (
                    "compacting the conversation once did not make it fit" if compacted
                    else "there is no earlier exchange left to compact"))
                return None
            log.warning("job %s: request %d does not fit the model's context window: compacted, asked again",
                        tick.job_id, tick.n)
        return None

    # one request and each way it ends (answered, deferred, over budget, refused, too long) read best together
    def _solve(self, tick: _Tick) -> float | ContextWindowExceeded | None:
        """Ask the model, writing each complete call of its streamed solution as it arrives; returns the wait
        before trying again (or None), or the context window's refusal (the caller compacts and asks again)."""
        info, job_id, token = tick.info, tick.job_id, tick.token
        request = self._request(info, tick.transcript, tick.solution_schema)
        saved = tick.transcript.saved_tokens  # what compaction kept out of this request
        exchanges = tick.transcript.exchanges
        corrective = bool(exchanges) and bool(exchanges[-1].problems)
        continued = bool(exchanges) and exchanges[-1].truncated  # asks for the rest of a cut solution
        tick_no = info.ticks + 1

        label = " (correction)" if corrective else " (continued)" if continued else ""
        starting = StartEvents(job_id, [TickStarted(
            job_id=job_id, tick=tick_no, attempt=tick.attempt, corrective=corrective or continued,
            part=activity_part(f"Tick {tick_no}{label}", source=self.source, locale=info.locale))])

        def started() -> None:  # once the gates let the request through: a deferred one has not started
            if not starting.written:  # the rate limits' step wrote it when it could (one round trip fewer)
                self.store.add_events(job_id, starting.envelopes)

        run = _Run(TickPlan(tick.composed, tick.transcript.index, options=info.options, ids=call_ids(job_id, tick.n)))

        def on_call(i: int, call: dict) -> None:
            if i == len(run.streamed):
                run.streamed.append(call)
            run.written += self._write(job_id, token, info, run.plan.add(i, call), tick.known)

        model = self.model
        assert model is not None  # `_ask` gave up without one
        try:
            answer = model.solve(info, request, on_call=on_call, place=f"{job_id}/tick/{tick.n}", on_send=started,
                                 starting=starting)
        except BudgetExceeded as error:  # not sent: the job (and its root job) fails
            self.store.release_tick(job_id, token=token)
            stop_for_budget(self.progress, info, error)
            return None
        except ModelDeferred as deferred:  # not sent: the rate limits keep its place; the task comes back then
            self.store.release_tick(job_id, token=token)
            return deferred.retry_after_s
        except LLMError as error:
            self._count_stopped(job_id, error, request.model)
            if isinstance(error, ContextWindowExceeded):
                return error
            return self._failed_request(job_id, token, tick.n, tick.attempt, error)
        ended = TickAnswer(answer, corrective=corrective, log_length=len(tick.transcript.log), tick_no=tick_no,
                           model=request.model, saved=saved)
        if answer.truncated:
            return self._truncated(tick, run, ended, continued=continued, max_tokens=request.max_tokens)
        run.written += self._write(job_id, token, info, run.plan.finish(solution_part(answer.solution, "calls")),
                                   tick.known)
        problems = solution_problems(run.plan, answer, tick.solution_schema["properties"]["output"])
        return self._end(job_id, token, info, ended, problems, written=run.written)

    def _truncated(self, tick: _Tick, run: _Run, ended: TickAnswer, *, continued: bool,
                   max_tokens: int) -> float | None:
        """An answer cut at max_tokens: its complete calls run (each once: they were written as they came), and
        the next request reports them and asks for the rest; cut again right after that, the job fails."""
        run.written += self._write(tick.job_id, tick.token, tick.info, run.plan.finish(run.streamed), tick.known)
        if continued:
            self.store.add_usage(tick.job_id, ended.answer.usage.counters(ended.model))
            self._give_up(tick.job_id, tick.token, tick.n, "ModelOutputTruncated",
                          f"the model's answer stopped at max_tokens ({max_tokens}) again after it was asked for the "
                          f"rest of a cut solution ({len(run.streamed)} complete call(s) came)")
            return None
        kept = replace(ended, answer=replace(ended.answer, solution={"calls": list(run.streamed), "output": None}))
        return self._end(tick.job_id, tick.token, tick.info, kept, list(run.plan.problems), written=run.written,
                         truncated=True)

    def _learn_window(self, tick: _Tick, refused: ContextWindowExceeded) -> bool:
        """Keep the window the refusal states for the request's model, in the estimate's tokens (scaled by the
        estimate of the refused request against the tokens the API counted), and keep this job's conversation
        under it; whether that compacted more of it."""
        if not refused.window:
            return False
        request = self._request(tick.info, tick.transcript, tick.solution_schema)
        estimate = estimated_tokens(request.system, request.messages, request.solution_schema)
        scale = min(1.0, estimate / refused.prompt_tokens) if refused.prompt_tokens else 1.0
        window = max(int(refused.window * scale), MIN_INPUT_TOKENS)
        window = self.windows.learn(request.model, window)
        log.warning("job %s: %s refused a prompt of %s tokens: its context window is %d tokens; conversations of "
                    "it are kept under that from now on", tick.job_id, request.model, refused.prompt_tokens,
                    refused.window)
        return tick.transcript.limit(window)

    def _count_stopped(self, job_id: str, error: LLMError, model: str) -> None:
        """A request the model answered unusably (a refusal, a full context window) was still paid for."""
        if isinstance(error, ModelStopped) and isinstance(error.usage, Usage):
            self.store.add_usage(job_id, error.usage.counters(model))

    def _request(self, info: JobInfo, transcript: Transcript, solution_schema: dict[str, Any]) -> LLMRequest:
        """The tick's model request: the job's system texts, the conversation so far, the solution's schema."""
        return LLMRequest(
            model=info.job_options.model or self.settings.model,
            system=system_blocks(job_system_texts(transcript.index)),
            messages=transcript.turns,
            solution_schema=solution_schema,
            max_tokens=self.settings.llm_max_tokens,
            purpose="module" if info.parent is not None else "tick",
            cache_ttl=info.job_options.cache_ttl,
            thinking=info.job_options.thinking,
        )

    def _failed_request(self, job_id: str, token: str, n: int, attempt: int, error: LLMError) -> float | None:
        """The model request failed: a transient failure is tried again after a backoff (returned) while
        attempts remain; any other failure, or the last attempt's, fails the job."""
        if not isinstance(error, LLMRetryableError):
            self._give_up(job_id, token, n, type(error).__name__, str(error))
            return None
        if attempt < self.settings.llm_max_attempts:
            wait = backoff_s(attempt, error.retry_after_s)
            log.warning("tick %d of job %s: attempt %d failed (%s); next in %.1f s", n, job_id, attempt, error, wait)
            self.store.release_tick(job_id, token=token)
            return wait
        self._give_up(job_id, token, n, type(error).__name__, f"{error} (after {attempt} attempts)")
        return None

    def _write(self, job_id: str, token: str, info: JobInfo, plans: list[PlannedCall],
               known: Mapping[str, Mapping[str, Any]]) -> int:
        """Write planned calls of the tick (routed against `known`, what the tick composed against) and send the
        ready ones; returns how many were written."""
        if not plans:
            return 0
        records = self.routing.route_calls(plans, known, info.tenant)
        if info.parent is not None:
            records = [replace(r, relay=info.parent.job) for r in records]
        ready = self.store.add_calls(job_id, token=token, records=records, plans=plans)
        if ready is None:
            return 0
        if ready:
            self.dispatch(job_id, ready)
        return len(plans)

    def _give_up(self, job_id: str, token: str, n: int, error_type: str, message: str) -> None:
        """The tick cannot be made: the job fails with the provider's (or the configuration's) error."""
        log.warning("job %s fails at request %d: %s: %s", job_id, n, error_type, message)
        self.store.release_tick(job_id, token=token)
        self.progress.finish(job_id, error=ErrorInfo(error_type, message))


__all__ = ["AgentLoop", "Usage", "backoff_s", "call_ids"]
