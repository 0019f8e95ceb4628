"""After a restart of the state store, the admitted calls whose tasks it lost are published again: `StoreRestarts`.

With the broker on the state store's own Redis (the admission step pushes the tasks it admits, `runtime/pushed.py`),
a restart can lose the task of an admitted call: a worker took it off its queue in the instant the server stopped
and never recorded it as unacknowledged, so the broker never gives it back. Its call stays `ready`, holding its
admission place and its job's concurrency key, and the admission sweep would publish it again only after
`AGENTQ_ADMISSION_REPUBLISH_S`.

A restart changes the server's run id. The admission's sweep (one process of the fleet per heartbeat) compares it
with the run id it last looked at the queues for, kept in the store (the fleet's first sweep only notes it); on a
change, it looks at each call admitted before the restart and still `ready`, and publishes again those whose task
is neither on its queue nor unacknowledged. The engine's own tasks (ticks; latent, module and wait calls) are not
admitted: on the same restart, `runtime/engine_restarts.py` looks at the active jobs for those the restart lost. So a
job moves again within a heartbeat of the store's return. A task taken for lost while a worker held it (between taking
it off the queue and recording it as unacknowledged) runs nothing twice: a call is claimed once, and the copy finds it
claimed; a tick is claimed once by its number.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from agentq.protocol.admission import admission_member, split_member
from agentq.protocol.records import CallRecord
from agentq.protocol.status import CallStatus
from agentq.runtime.app import task_id
from agentq.runtime.engine_restarts import EngineWork, EngineWorkReads, lost_engine_work
from agentq.store.contracts import AdmissionStore, Connection

log = logging.getLogger("agentq.admission")

ADMITTED = 100_000  # the most admitted calls looked at (the windows hold far fewer)
SKEW_MS = 2000  # a call admitted this long after the restart (by another host's clock) still counts as before it


class RestartReads(EngineWorkReads, AdmissionStore, Connection, Protocol):
    """What finding the tasks a restart lost reads and writes: the server's runs, the broker's tasks on it, the
    admitted calls and their records, the active jobs' heads."""


class StoreRestarts:
    """Finds, after a restart of the state store, the admitted calls and the engine's tasks whose tasks the broker
    no longer holds."""

    def __init__(self, store: RestartReads, lists: Callable[[str], list[str]], unacked: str, engine_queue: str):
        self.store = store  # the state store, whose server is also the broker
        self.lists = lists  # the broker's lists of a queue
        self.unacked = unacked  # the broker's hash of unacknowledged tasks
        self.engine_queue = engine_queue

    @classmethod
    def of(cls, store: RestartReads, app: Any, engine_queue: str) -> StoreRestarts | None:
        """For a store whose server is the broker of `app` (a Redis of kombu's transport); None: another broker."""
        if not store.single_server(str(app.conf.broker_url or "")):
            return None
        from kombu.transport.redis import Channel

        options = app.conf.broker_transport_options or {}
        sep, steps = options.get("sep", Channel.sep), options.get("priority_steps", Channel.priority_steps)

        def lists(queue: str) -> list[str]:  # as kombu's `Channel._q_for_pri` names them
            return [queue, *(f"{queue}{sep}{step}" for step in steps if step)]

        return cls(store, lists, options.get("unacked_key", Channel.unacked_key), engine_queue)

    def lost(self, *, died: bool = False) -> EngineWork:
        """On a restart not looked at yet: the admitted calls still `ready` whose tasks the broker lost, counted as
        admitted now, with the engine's lost calls and ticks (their publication is the caller's). When a process of
        the fleet `died` (no restart): the engine's lost calls and ticks (a dispatcher killed between taking a task
        off its queue and recording it lost it; admitted calls are the sweep's, `lost_tasks`). Else nothing (one
        round trip)."""
        run, seen, uptime_ms = self.store.admission_runs()
        if run == seen and died and seen is not None:
            engine = lost_engine_work(self.store, self._holds, self.engine_queue, task_id)
            log.warning("a process of the fleet is gone: of %d active jobs, %d engine call(s) and %d tick(s) had lost "
                        "their task and are published again, %d plan job(s) due their end are sent an ended call's "
                        "task", engine.looked_at, len(engine.calls), len(engine.ticks), len(engine.ends))
            return engine
        if run == seen:
            return EngineWork()
        if seen is None:  # the fleet's first sweep on this store (or one that lost everything): nothing to repair
            self.store.note_admission_run(run)
            return EngineWork()
        began = time.monotonic()
        before_ms = int(time.time() * 1000) - uptime_ms + SKEW_MS
        ready = self._ready(self.store.admitted_before(before_ms, limit=ADMITTED))
        lost = self.lost_tasks(ready)
        engine = lost_engine_work(self.store, self._holds, self.engine_queue, task_id)
        self.store.note_admission_run(run)
        log.warning("the state store restarted (run %s, up %d s): %d admitted call(s) still ready, %d of them had "
                    "lost their task and are published again; of %d active jobs, %d engine call(s) and %d tick(s) "
                    "had lost their task and are published again, %d plan job(s) due their end are sent an ended "
                    "call's task (looked at in %.0f ms)", run[:8], uptime_ms // 1000, len(ready), len(lost),
                    engine.looked_at, len(engine.calls), len(engine.ticks), len(engine.ends),
                    1000 * (time.monotonic() - began))
        return EngineWork(lost + engine.calls, engine.ticks, engine.looked_at, engine.activity, engine.ends)

    def lost_tasks(self, ready: Sequence[tuple[str, CallRecord]]) -> list[tuple[str, CallRecord]]:
        """Of admitted calls still `ready`, those whose task the broker holds nowhere (neither queued nor
        unacknowledged), counted as admitted now: their publication is the caller's. One read of the broker."""
        held = self._held(ready)
        lost = [(job_id, record) for job_id, record in ready if task_id(job_id, record.id, record.run) not in held]
        if lost:
            self.store.touch_admitted([admission_member(job_id, record.id) for job_id, record in lost])
        return lost

    def _held(self, ready: Sequence[tuple[str, CallRecord]]) -> set[str]:
        """The ids of the tasks the broker still holds on the queues of the `ready` calls (queued or unacked)."""
        if not ready:
            return set()
        return self._holds(sorted({record.queue for _, record in ready}))

    def _holds(self, queues: Sequence[str]) -> set[str]:
        """The ids of the tasks the broker holds on `queues` (queued or unacked)."""
        return self.store.broker_holds([key for queue in queues for key in self.lists(queue)], self.unacked)

    def _ready(self, members: Sequence[str]) -> list[tuple[str, CallRecord]]:
        """The records of the `members` whose calls are still ready."""
        by_job: dict[str, list[str]] = defaultdict(list)
        for member in members:
            job_id, call_id = split_member(member)
            by_job[job_id].append(call_id)
        ready: list[tuple[str, CallRecord]] = []
        for job_id, call_ids in by_job.items():
            statuses = self.store.call_statuses(job_id, call_ids)
            waiting = [c for c in call_ids if statuses.get(c) is CallStatus.READY]
            if waiting:
                ready += [(job_id, r) for r in self.store.call_records(job_id, waiting).values()]
        return ready
