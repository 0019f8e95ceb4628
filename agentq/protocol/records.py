"""The typed records layers hand each other: a call as planned and stored, a job's stored fields, and the
job record users receive (SPEC §12).

The store encodes and decodes these at its boundary (`to_dict` / `from_dict`); everything above it works on
the typed objects. All are frozen: a change of state is a new record written by an atomic store step.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from agentq.protocol.status import JobStatus


class CallMode(StrEnum):
    EXPLICIT = "explicit"  # runs an activity on a worker
    LATENT = "latent"  # answered by the LLM
    MODULE = "module"  # delegated to a clean-room child job


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

    def routed(self, task: str, queue: str) -> CallRecord:
        return replace(self, task=task, queue=queue)

    def to_dict(self) -> dict[str, Any]:
        """The stored JSON form (also what a call's task carries)."""
        return {
            "id": self.id, "index": self.index, "call": self.call, "tool": self.tool, "activity": self.activity,
            "mode": self.mode.value, "awaited": self.awaited, "instance": self.instance,
            "scopes": list(self.scopes), "needs_log": self.needs_log, "locale": self.locale,
            "task": self.task, "queue": self.queue,
        } | ({"relay": self.relay} if self.relay else {})

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CallRecord:
        return cls(
            id=data["id"], index=data["index"], call=data["call"], tool=data["tool"], activity=data["activity"],
            mode=CallMode(data["mode"]), awaited=data["awaited"], instance=data.get("instance"),
            scopes=tuple(data.get("scopes") or ()), needs_log=data.get("needs_log", False),
            locale=data.get("locale", "en"),
            task=data.get("task", ""), queue=data.get("queue", ""), relay=data.get("relay"),
        )


def empty_usage() -> dict[str, int]:
    """The usage counters of SPEC §13, all zero."""
    return {"requests": 0, "input_tokens": 0, "output_tokens": 0, "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0}


@dataclass(frozen=True, slots=True)
class JobRecord:
    """The job record of SPEC §12 (`to_dict()` is what the client, the CLI and the HTTP API return)."""

    id: str
    status: JobStatus
    result: Any = None
    state: Any = field(default_factory=dict)
    instances: dict[str, Any] = field(default_factory=dict)
    error: dict[str, str] | None = None
    usage: dict[str, int] = field(default_factory=empty_usage)
    created_at: str | None = None
    finished_at: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "status": self.status.value, "result": self.result, "state": self.state,
            "instances": self.instances, "error": self.error, "usage": self.usage,
            "created_at": self.created_at, "finished_at": self.finished_at,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobRecord:
        return cls(
            id=data["id"], status=JobStatus(data["status"]), result=data.get("result"),
            state=data.get("state", {}), instances=data.get("instances") or {}, error=data.get("error"),
            usage={**empty_usage(), **(data.get("usage") or {})}, created_at=data.get("created_at"),
            finished_at=data.get("finished_at"),
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
    error: dict[str, str] | None = None
    usage: dict[str, int] = field(default_factory=empty_usage)
    record: JobRecord | None = None  # saved once the job ended
    ticks: int = 0  # agent jobs: model requests answered that counted as ticks
    final_output: Any = None  # agent jobs: the output of the solution that ended the job, once given
    has_final_output: bool = False
    parent: dict[str, Any] | None = None  # a module's child job: {"job", "call", "token", "depth", "chain"}
    ticking: bool = False  # agent jobs: a model request is in flight
    exchanges: int = 0  # agent jobs: model requests answered (ticks and corrective requests)

    @property
    def locale(self) -> str:
        return str(self.options.get("locale", "en"))
