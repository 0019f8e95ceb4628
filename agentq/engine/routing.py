"""Task names and queues, built from Settings in one place
(docs/architecture.md#runtime--the-only-place-that-knows-celery).

The activity `x` runs as task `agentq.activity.x` on its own queue (`agentq.activity.x`, or the queue the
activity declares); engine work (latent calls, modules, agent ticks, submission by task name) runs on the
engine queue (`AGENTQ_ENGINE_QUEUE`, default `agentq.engine`), so LLM-bound work scales separately. A version
other than "1" of an activity (docs/tenants.md) is an activity of its own key, `x@2`: task and queue
`agentq.activity.x@2` (or the queue it declares, suffixed `@2`); a tool's rollout rule (`protocol/rollouts.py`, read
through `rules`) decides which calls go to it before they are routed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from agentq.protocol.activities import DEFAULT_VERSION, ActivitySpec
from agentq.protocol.plans import PlannedCall
from agentq.protocol.records import ACTIVITY_TASK_PREFIX, CallMode, CallRecord
from agentq.protocol.rollouts import Rule, apply_rules
from agentq.settings import Settings

SUBMIT_TASK = "agentq.engine.submit"
TICK_TASK = "agentq.engine.tick"
LATENT_TASK = "agentq.engine.latent"
MODULE_TASK = "agentq.engine.module"
WAIT_TASK = "agentq.engine.wait"
# the engine's calls: a wait is opened by the engine, written `waiting`, and then holds nothing (docs/waits.md)
_ENGINE_TASKS = {CallMode.MODULE: MODULE_TASK, CallMode.LATENT: LATENT_TASK, CallMode.WAIT: WAIT_TASK}


def tick_task_id(job_id: str, n: int) -> str:
    """The id of an agent job's tick task number `n`: one id per tick, so a tick sent again is the same task."""
    return f"{job_id}.tick.{n}"


def activity_task(activity: str) -> str:
    """The Celery task name of an activity: calls are keyed by their `_activity`."""
    return ACTIVITY_TASK_PREFIX + activity


@dataclass(frozen=True)
class Routing:
    """Where each kind of task goes, for one deployment's settings."""

    engine_queue: str
    rules: Callable[[], Mapping[str, Rule]] | None = field(default=None, compare=False)  # the tools' rollout
    # rules, read for every routing of calls (`store/rollouts.py`); None: no rollouts

    @classmethod
    def from_settings(cls, settings: Settings, rules: Callable[[], Mapping[str, Rule]] | None = None) -> Routing:
        return cls(engine_queue=settings.engine_queue, rules=rules)

    @staticmethod
    def activity_queue(spec: ActivitySpec) -> str:
        """The queue an activity's workers consume: the one it declares (suffixed `@<version>` for a version
        other than "1"), else its own."""
        if spec.queue and spec.version != DEFAULT_VERSION:
            return f"{spec.queue}@{spec.version}"
        return spec.queue or activity_task(spec.name)

    def route_calls(self, calls: Sequence[PlannedCall], known: Mapping[str, Mapping[str, Any]],
                    tenant: str) -> list[CallRecord]:
        """The records of planned calls of `tenant`'s job, each given its tool's rollout route (the planned calls
        change with it, so what the job counts as awaited stays true) and routed against `known`."""
        if self.rules is not None and calls:
            rules = self.rules()
            if rules:
                apply_rules(calls, rules, tenant, known)
        return [self.route(c.record(), known, tenant=tenant) for c in calls]

    def announcement(self, spec: ActivitySpec) -> dict[str, Any]:
        """What a worker announces of an activity it serves: its options, task and queue."""
        return {**spec.to_announcement(), "task": activity_task(spec.name), "queue": self.activity_queue(spec)}

    def route(self, record: CallRecord, known: Mapping[str, Mapping[str, Any]], *,
              tenant: str | None = None) -> CallRecord:
        """The record with its task and queue (and `tenant`, when given, in the same copy): an explicit call goes to
        the queue its activity was announced on (or the activity's own queue), latent and module calls to the engine
        queue."""
        if record.mode is not CallMode.EXPLICIT:
            task, queue = _ENGINE_TASKS[record.mode], self.engine_queue
        else:
            task = activity_task(record.activity)
            queue = str((known.get(record.activity) or {}).get("queue") or task)
        return replace(record, task=task, queue=queue, tenant=record.tenant if tenant is None else tenant)
