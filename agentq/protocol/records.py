"""The typed records layers hand each other: a call as planned and stored, a job's stored fields, and the
job record users receive (docs/protocol.md#the-job-record).

The store encodes and decodes these at its boundary (`to_dict` / `from_dict`); everything above it works on
the typed objects. All are frozen: a change of state is a new record written by an atomic store step.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from agentq.protocol.budgets import DEFAULT_CACHE_TTL, Budget
from agentq.protocol.concurrency import ConcurrencyKeys, concurrency_keys
from agentq.protocol.context import ContextOptions
from agentq.protocol.status import JobStatus
from agentq.protocol.tenants import DEFAULT_TENANT
from agentq.protocol.thinking import thinking_param
from agentq.protocol.usage import empty_usage


class CallMode(StrEnum):
    EXPLICIT = "explicit"  # runs an activity on a worker
    LATENT = "latent"  # answered by the LLM
    MODULE = "module"  # delegated to a clean-room child job
    WAIT = "wait"  # a wait (docs/waits.md): the engine writes it `waiting` until its due time, event or signal


class JobKind(StrEnum):
    PLAN = "plan"  # has `calls`
    AGENT = "agent"  # asks the LLM for calls, tick after tick


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One Call of a job with everything needed to run it without re-planning.

    `task` and `queue` are the routing the runtime chose at submission (the protocol leaves them empty).
    The calls waiting on this one are kept beside it by the store (only the commit step reads them), so the
    record stays small enough to travel in the call's task.
    """

    id: str
    index: int
    call: dict[str, Any]
    tool: str
    activity: str
    mode: CallMode
    awaited: bool
    instance: str | None = None
    scopes: tuple[str, ...] = ()
    needs_log: bool = False
    locale: str = "en"
    task: str = ""
    queue: str = ""
    relay: str | None = None  # a module's child job: the parent job its events are relayed to
    route: str | None = None  # the rollout route its tool's rule gave it (docs/rollouts.md): `<activity>@<version>`, ""
    # (latent) or "*" (the tool's usual resolution); None when the tool had no rule
    tenant: str = DEFAULT_TENANT  # its job's tenant (docs/tenants.md): the `tenant` label it is counted under
    start_timeout_s: float | None = None  # its tool's `x-start-timeout-s` (docs/waits.md#start-timeouts)
    run: int = 1  # the job's run it runs in (docs/resume.md): a resumed run's task has an id of its own

    def routed(self, task: str, queue: str) -> CallRecord:
        return replace(self, task=task, queue=queue)

    @property
    def decides_outcome(self) -> bool:
        """Whether its failure can fail its plan job: not a fire-and-forget call's (an activity's call without an
        output path), which is awaited only while a reviewer must approve it."""
        return self.mode is not CallMode.EXPLICIT or bool(self.call.get("_outputPath"))

    def to_dict(self) -> dict[str, Any]:
        """The stored JSON form (also what a call's task carries)."""
        return {
            "id": self.id, "index": self.index, "call": self.call, "tool": self.tool, "activity": self.activity,
            "mode": self.mode.value, "awaited": self.awaited, "instance": self.instance,
            "scopes": list(self.scopes), "needs_log": self.needs_log, "locale": self.locale,
            "task": self.task, "queue": self.queue,
        } | ({"relay": self.relay} if self.relay else {}) | ({"route": self.route} if self.route is not None else {}) \
            | ({"tenant": self.tenant} if self.tenant != DEFAULT_TENANT else {}) \
            | ({"start_timeout_s": self.start_timeout_s} if self.start_timeout_s is not None else {}) \
            | ({"run": self.run} if self.run > 1 else {})  # last: resume.lua sets it in the stored JSON

    def to_task(self, stored: dict[str, Any] | None = None) -> dict[str, Any]:
        """What a call's task carries: `to_dict()` (`stored`, when the caller made it already) without the optional
        fields that hold their default value, nor the task and queue of a call routed to its activity's own task and
        queue (`from_dict` gives them back), so a task message, and a parked call's payload, stay small."""
        stored = self.to_dict() if stored is None else stored
        carried = {k: v for k, v in stored.items() if k not in _TASK_DEFAULTS or v != _TASK_DEFAULTS[k]}
        if self.task and self.task == ACTIVITY_TASK_PREFIX + self.activity:
            del carried["task"]
            if self.queue == self.task:
                del carried["queue"]
        return carried

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CallRecord:
        task = data.get("task", ACTIVITY_TASK_PREFIX + data["activity"])  # left out: its activity's own
        return cls(
            id=data["id"], index=data["index"], call=data["call"], tool=data["tool"], activity=data["activity"],
            mode=CallMode(data["mode"]), awaited=data["awaited"], instance=data.get("instance"),
            scopes=tuple(data.get("scopes") or ()), needs_log=data.get("needs_log", False),
            locale=data.get("locale", "en"),
            task=task, queue=data.get("queue", task), relay=data.get("relay"),
            route=data.get("route"), tenant=data.get("tenant") or DEFAULT_TENANT,
            start_timeout_s=data.get("start_timeout_s"), run=int(data.get("run") or 1),
        )


#: the Celery task name of an activity is this prefix and its name: calls are keyed by their `_activity`
ACTIVITY_TASK_PREFIX = "agentq.activity."
TICK = "~tick"  # the name of an agent job's tick where a call's id would stand (its lease; no call id starts with `~`)

#: optional fields of a call record's stored form and the value `CallRecord.from_dict` gives one that is left out
_TASK_DEFAULTS: dict[str, Any] = {"instance": None, "scopes": [], "needs_log": False, "locale": "en"}


LINEAGE_FIELDS = ("continued_from", "thread", "forked_from", "fork")
"""A continued or forked job's record fields (docs/continue-and-fork.md)."""


@dataclass(frozen=True, slots=True)
class JobRecord:
    """The job record (docs/protocol.md#the-job-record; `to_dict()` is what the client, the CLI and the HTTP API
    return)."""

    id: str
    status: JobStatus
    result: Any = None
    state: Any = field(default_factory=dict)
    instances: dict[str, Any] = field(default_factory=dict)
    error: ErrorInfo | None = None
    usage: dict[str, Any] = field(default_factory=empty_usage)  # `agentq.protocol.usage.usage_record`'s form
    created_at: str | None = None
    finished_at: str | None = None
    tenant: str = DEFAULT_TENANT  # whose job it is (docs/tenants.md)
    lineage: dict[str, Any] | None = None  # a continued or forked job's links (docs/continue-and-fork.md)
    runs: tuple[dict[str, Any], ...] | None = None  # a resumed job's runs, oldest first (docs/resume.md)

    def to_dict(self) -> dict[str, Any]:
        data = {
            "id": self.id, "status": self.status.value, "tenant": self.tenant, "result": self.result,
            "state": self.state, "instances": self.instances,
            "error": self.error.to_dict() if self.error is not None else None, "usage": self.usage,
            "created_at": self.created_at, "finished_at": self.finished_at, **(self.lineage or {}),
        }
        if self.runs is not None:
            data["runs"] = [dict(run) for run in self.runs]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobRecord:
        return cls(
            id=data["id"], status=JobStatus(data["status"]), result=data.get("result"),
            state=data.get("state", {}), instances=data.get("instances") or {}, error=ErrorInfo.of(data.get("error")),
            usage={**empty_usage(), **(data.get("usage") or {})}, created_at=data.get("created_at"),
            finished_at=data.get("finished_at"), tenant=data.get("tenant") or DEFAULT_TENANT,
            lineage={k: data[k] for k in LINEAGE_FIELDS if k in data} or None,
            runs=tuple(data["runs"]) if isinstance(data.get("runs"), list) else None,
        )


@dataclass(frozen=True, slots=True)
class JobInfo:
    """What the store keeps of a job besides its log and calls (decoded from the job hash)."""

    id: str
    kind: JobKind
    status: JobStatus
    created_at: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    open_calls: int = 0
    options: dict[str, Any] = field(default_factory=dict)
    output: dict[str, Any] | None = None
    error: ErrorInfo | None = None
    usage: dict[str, int] = field(default_factory=dict)  # the stored counters (`agentq.protocol.usage`)
    record: JobRecord | None = None  # saved once the job ended
    ticks: int = 0  # agent jobs: model requests answered that counted as ticks
    final_output: Any = None  # agent jobs: the output of the solution that ended the job, once given
    has_final_output: bool = False
    parent: ParentLink | None = None  # a module's child job: the call it runs for
    ticking: bool = False  # agent jobs: a model request is in flight
    exchanges: int = 0  # agent jobs: model requests answered (ticks and corrective requests)
    traceparent: str | None = None  # the W3C context of its `submit job` span: its ticks continue it (docs/tracing.md)
    tenant: str = DEFAULT_TENANT  # whose job it is (docs/tenants.md) (a module's child job has its parent's)
    lineage: dict[str, Any] | None = None  # continued_from and thread, or forked_from and fork (a copied job)
    runs: tuple[dict[str, Any], ...] = ()  # a resumed job's ended runs, oldest first (docs/resume.md)
    resumed_at: str | None = None  # when its last resume began its current run
    record_stale: bool = False  # a late outcome reached the log after `record` was saved: computed until saved again
    job_options: JobOptions = field(init=False)  # `options` parsed once (the raw dict stays what is stored)

    def __post_init__(self) -> None:
        object.__setattr__(self, "job_options", JobOptions.of(self.options))

    @property
    def locale(self) -> str:
        return self.job_options.locale

    @property
    def root_job(self) -> str:
        """The job whose budget this job's model requests count against: itself, or a module child's root."""
        return self.parent.root_job if self.parent is not None else self.id


DEFAULT_MAX_TICKS = 8
"""How many model requests an agent job may make when its options do not say (`options.max_ticks`)."""


@dataclass(frozen=True, slots=True)
class JobOptions:
    """A job's options as the engine reads them, with the defaults of options a stored job may lack."""

    max_ticks: int = DEFAULT_MAX_TICKS
    model: str | None = None  # None: the runtime's default model
    approval: tuple[str, ...] = ()  # tools whose calls wait for a reviewer
    ttl_s: int | None = None  # None: the runtime's default job lifetime
    locale: str = "en"
    budget: Budget | None = None  # what the job's model requests may spend (None: no limit)
    cache_ttl: str = DEFAULT_CACHE_TTL  # the TTL of every prompt-cache breakpoint of its requests
    context: ContextOptions = field(default_factory=ContextOptions)  # how much of its data the model is sent
    thinking: dict[str, Any] | None = None  # the API's `thinking` of its ticks (`options.thinking`); None: off
    priority: str | None = None  # "batch": its model requests go through the Message Batches API
    # its concurrency keys and their limits (docs/tenants.md, `protocol/concurrency.py`)
    concurrency: ConcurrencyKeys = ()
    deadline_s: float | None = None  # the job fails with DeadlineExceeded this long after submission

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> JobOptions:
        """The options of a job's stored `options` object (a missing or empty value takes its default)."""
        ttl_s = raw.get("ttl_s")
        return cls(
            max_ticks=int(raw.get("max_ticks") or DEFAULT_MAX_TICKS), model=str(raw["model"]) if raw.get("model")
            else None, approval=tuple(raw.get("approval") or ()), ttl_s=int(ttl_s) if ttl_s else None,
            locale=str(raw.get("locale", "en")),
            budget=Budget.of(raw.get("budget")), cache_ttl=str(raw.get("cache_ttl") or DEFAULT_CACHE_TTL),
            context=ContextOptions.of(raw.get("context")), thinking=thinking_param(raw.get("thinking")),
            priority=str(raw["priority"]) if raw.get("priority") else None,
            concurrency=concurrency_keys(raw.get("concurrency")),
            deadline_s=float(raw["deadline_s"]) if raw.get("deadline_s") else None,
        )


@dataclass(frozen=True, slots=True)
class ParentLink:
    """A module's child job's link to the call it runs for (the job hash's `parent` field): the parent job, its
    call and the call's lease token, how deep the child nests and the modules on the way (`chain`), and the job
    at the top of the chain (`root`, whose budget the child's model requests count against)."""

    job: str
    call: str
    token: str
    depth: int = 1
    chain: tuple[str, ...] = ()
    module: str = ""  # the module reference the call named
    root: str = ""  # the job that is no module's child ("": the parent job itself)

    @property
    def root_job(self) -> str:
        return self.root or self.job

    def to_dict(self) -> dict[str, Any]:
        """The stored JSON form."""
        return {"job": self.job, "call": self.call, "token": self.token, "depth": self.depth,
                "chain": list(self.chain), "module": self.module, "root": self.root_job}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ParentLink:
        return cls(job=str(data.get("job")), call=str(data.get("call")), token=str(data.get("token")),
                   depth=int(data.get("depth", 0)), chain=tuple(data.get("chain") or ()),
                   module=str(data.get("module") or ""), root=str(data.get("root") or ""))


class OutcomeStatus(StrEnum):
    """What one delivery of a call's task came to (the engine's `Outcome`; the Celery task returns its value)."""

    DONE = "done"  # the attempt ran and was committed
    FAILED = "failed"  # committed as failed
    RETRY = "retry"  # released for a later attempt (`retry_in`)
    LEASED = "leased"  # another attempt holds the call (`retry_in`: when to look again)
    DUPLICATE = "duplicate"  # another delivery recorded this attempt's end first
    FINISHED = "finished"  # the call had ended already
    DELEGATED = "delegated"  # a module call: its child job was submitted
    WAITING = "waiting"  # a wait call: written `waiting` (docs/waits.md)
    CANCELED = "canceled"  # the call's job was canceled
    NOT_READY = "not_ready"  # the call still waits on other calls or on approval
    MISSING = "missing"  # no such call
    UNSTARTED = "unstarted"  # the job had not started
    ELSEWHERE = "elsewhere"  # the call is another task's (routed to another activity): left to that task


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """An error as recorded on a call or a job (`{"type", "message"}`); a job rejected at submission also lists
    its `problems` (each `{"pointer", "message"}`)."""

    type: str
    message: str
    problems: tuple[dict[str, str], ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The stored JSON form (what the job record, the API and the events show)."""
        data: dict[str, Any] = {"type": self.type, "message": self.message}
        if self.problems is not None:
            data["problems"] = [dict(problem) for problem in self.problems]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> ErrorInfo:
        data = data or {}
        problems = data.get("problems")
        return cls(type=str(data.get("type", "Error")), message=str(data.get("message", "")),
                   problems=tuple(problems) if isinstance(problems, list) else None)

    @classmethod
    def of(cls, data: Mapping[str, Any] | None) -> ErrorInfo | None:
        """The error of a stored job record or job hash (None when it has none)."""
        return cls.from_dict(data) if data else None


@dataclass(frozen=True, slots=True)
class WorkerAnnouncement:
    """What a worker's heartbeat announces (stored as JSON under the worker's key while it lives)."""

    id: str
    hostname: str = ""
    pid: int = 0
    heartbeat_s: float = 0.0
    queues: tuple[str, ...] = ()
    engine: bool = False
    started_at: float = 0.0
    activities: tuple[dict[str, Any], ...] = ()  # each activity's routing announcement (name, task, queue, ...)
    tools: tuple[str, ...] = ()
    node: str | None = None  # the node name it claimed, if any
    concurrency: int = 0  # the calls it runs at once (its pool's slots; 0: not announced)
    processes: int = 0  # the processes that run them (a prefork pool's children, else 1; 0: not announced)

    def to_dict(self) -> dict[str, Any]:
        """The stored JSON form."""
        return {"id": self.id, "hostname": self.hostname, "pid": self.pid, "heartbeat_s": self.heartbeat_s,
                "queues": list(self.queues), "engine": self.engine, "started_at": self.started_at,
                "activities": list(self.activities), "tools": list(self.tools), "node": self.node,
                "concurrency": self.concurrency, "processes": self.processes}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WorkerAnnouncement:
        return cls(id=str(data.get("id") or ""), hostname=str(data.get("hostname") or ""),
                   pid=int(data.get("pid") or 0), heartbeat_s=float(data.get("heartbeat_s") or 0),
                   queues=tuple(str(q) for q in data.get("queues") or ()), engine=bool(data.get("engine")),
                   started_at=float(data.get("started_at") or 0),
                   activities=tuple(data.get("activities") or ()), tools=tuple(data.get("tools") or ()),
                   node=data.get("node"), concurrency=int(data.get("concurrency", 0)),
                   processes=int(data.get("processes", 0)))
