"""What planning produces: `JobPlan` and its `PlannedCall`s, the limits a job is checked against, and the
problems collected on the way (pure)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentq.errors import InvalidInputError, Problem
from agentq.protocol.envelopes import CallAwaitingApproval
from agentq.protocol.events import approval_part
from agentq.protocol.records import CallMode, CallRecord, JobKind

__all__ = ["JobLimits", "JobPlan", "PlannedCall", "Problems", "hold_for_approval", "needs_approval"]


@dataclass(frozen=True)
class JobLimits:
    max_job_bytes: int = 1_000_000
    max_calls: int = 10_000
    default_ttl_s: int = 7 * 24 * 3600
    default_budget: Mapping[str, Any] | None = None  # `options.budget` of a job that names none
    known_model: Callable[[str], bool] | None = None  # whether the price table prices a model (`x-model`)
    # checks `options.webhook` (value, pointer) -> problems; the runtime passes its allowlist's (None: a job may
    # name no webhook)
    webhook_problems: Callable[[Any, str], list[Problem]] | None = None
    max_output_tokens: int | None = 8192  # AGENTQ_LLM_MAX_TOKENS: a thinking budget must stay below it
    model: str | None = None  # AGENTQ_MODEL: the model of a job whose options name none


@dataclass
class PlannedCall:
    """One Call of a job while it is planned; `record()` is what the store keeps of it, beside `dependents`
    (the calls waiting on it) and `waiting` (how many unfinished calls it waits on)."""

    id: str
    index: int
    call: dict
    tool: str
    activity: str
    mode: CallMode
    awaited: bool
    instance: str | None
    scopes: list[str]
    dependents: list[str] = field(default_factory=list)
    waiting: int = 0  # unfinished calls it waits on
    needs_log: bool = False
    locale: str = "en"  # the job's locale, for the display info of this call's event parts
    approval: bool = False  # held in `awaiting_approval` once ready, until a reviewer decides
    depends_on: list[str] = field(default_factory=list)  # agent ticks: the calls of the solution it waits on
    route: str | None = None  # the rollout route its tool's rule gave it (`protocol/rollouts.py`)
    start_timeout_s: float | None = None  # its tool's `x-start-timeout-s`: fails StartTimedOut if no worker takes it

    def held_event(self, job_id: str, *, source: str = "agentq") -> CallAwaitingApproval:
        """The `call.awaiting_approval` event the store publishes when this call is held for a reviewer (at
        submission, or when the calls it waits on have finished)."""
        return CallAwaitingApproval(job_id=job_id, call_id=self.id, tool=self.tool, instance=self.instance,
                                    part=approval_part(self.tool, source=source, locale=self.locale))

    def record(self) -> CallRecord:
        return CallRecord(
            id=self.id, index=self.index, call=self.call, tool=self.tool, activity=self.activity, mode=self.mode,
            awaited=self.awaited, instance=self.instance, scopes=tuple(self.scopes), needs_log=self.needs_log,
            locale=self.locale, route=self.route, start_timeout_s=self.start_timeout_s,
        )


@dataclass
class JobPlan:
    id: str
    kind: JobKind
    context: list[dict]
    tools: dict[str, dict]  # composed tool schemas of this job, by name
    solution: dict
    output: dict | None
    options: dict
    calls: list[PlannedCall]
    registered: dict[str, dict] = field(default_factory=dict)  # the job's tools as registered (an agent job
    # composes them again at each tick, against the activities known then)
    start_ms: int | None = None  # when a job submitted for later starts (unix ms; `protocol/job_times.py`)

    @property
    def ready(self) -> list[PlannedCall]:
        """Calls that may start at once (not those held for approval)."""
        return [c for c in self.calls if c.waiting == 0 and not c.approval]

    @property
    def ttl_s(self) -> int:
        return int(self.options["ttl_s"])


class Problems:
    """Collects problems so a job is rejected once, with all of them."""

    def __init__(self) -> None:
        self.items: list[Problem] = []

    def add(self, pointer: str, message: str) -> None:
        self.items.append(Problem(pointer, message))

    def extend_from(self, error: Exception, pointer: str) -> None:
        if isinstance(error, InvalidInputError) and error.problems:
            for p in error.problems:
                self.items.append(Problem(pointer + p.pointer if not p.pointer.startswith(pointer) else p.pointer,
                                          p.message))
        else:
            self.add(pointer, str(error))


def needs_approval(tool_name: str, tool: Mapping[str, Any], options: Mapping[str, Any]) -> bool:
    """Calls of tools listed in `options.approval`, or marked `"x-approval": "required"`, wait for a reviewer."""
    return tool_name in (options.get("approval") or ()) or tool.get("x-approval") == "required"


def hold_for_approval(call: PlannedCall, tool: Mapping[str, Any], options: Mapping[str, Any]) -> None:
    """Mark `call` held for a reviewer when its tool needs approval. A held call is awaited even without an output
    path (fire-and-forget): its job does not end while the call waits for a decision, nor while it then runs.
    Its failure still does not decide a plan job's outcome (`CallRecord.decides_outcome`)."""
    call.approval = needs_approval(call.tool, tool, options)
    if call.approval:
        call.awaited = True
