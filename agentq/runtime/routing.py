"""Task names and queues, built from Settings in one place (SPEC §10).

The activity `x` runs as task `agentq.activity.x` on its own queue (`agentq.activity.x`, or the queue the
activity declares); engine work (latent calls, modules, agent ticks, submission by task name) runs on the
engine queue (`AGENTQ_ENGINE_QUEUE`, default `agentq.engine`), so LLM-bound work scales separately.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentq.protocol.activities import ActivitySpec
from agentq.protocol.records import CallMode, CallRecord
from agentq.settings import Settings

ACTIVITY_TASK_PREFIX = "agentq.activity."
SUBMIT_TASK = "agentq.engine.submit"
TICK_TASK = "agentq.engine.tick"
LATENT_TASK = "agentq.engine.latent"
MODULE_TASK = "agentq.engine.module"


def activity_task(activity: str) -> str:
    """The Celery task name of an activity: calls are keyed by their `_activity`."""
    return ACTIVITY_TASK_PREFIX + activity


@dataclass(frozen=True)
class Routing:
    """Where each kind of task goes, for one deployment's settings."""

    engine_queue: str

    @classmethod
    def from_settings(cls, settings: Settings) -> Routing:
        return cls(engine_queue=settings.engine_queue)

    @staticmethod
    def activity_queue(spec: ActivitySpec) -> str:
        """The queue an activity's workers consume: the one it declares, else its own."""
        return spec.queue or activity_task(spec.name)

    def announcement(self, spec: ActivitySpec) -> dict[str, Any]:
        """What a worker announces of an activity it serves: its options, task and queue."""
        return {**spec.to_announcement(), "task": activity_task(spec.name), "queue": self.activity_queue(spec)}

    def route(self, record: CallRecord, known: Mapping[str, Mapping[str, Any]]) -> CallRecord:
        """The record with its task and queue: an explicit call goes to the queue its activity was announced
        on (or the activity's own queue), latent and module calls to the engine queue."""
        if record.mode is CallMode.MODULE:
            return record.routed(MODULE_TASK, self.engine_queue)
        if record.mode is CallMode.LATENT:
            return record.routed(LATENT_TASK, self.engine_queue)
        task = activity_task(record.activity)
        queue = (known.get(record.activity) or {}).get("queue") or task
        return record.routed(task, str(queue))
