"""Signals and events in (docs/waits.md): a signal sent to one job, kept with it until a `waitForSignal` of its
name takes it; an event sent to a tenant, delivered to every open `waitForEvent` of that tenant it matches. A mixin
of `JobService` (`runtime/service.py`); the woken waits are fired by a dispatcher's timer loop within a second."""

from __future__ import annotations

import uuid
from typing import Any

from agentq.engine.waits import deliver_event
from agentq.errors import ConflictError, InvalidInputError, JobNotFoundError, Problem
from agentq.protocol.digests import now_iso
from agentq.protocol.tenants import DEFAULT_TENANT
from agentq.protocol.waits import event_problems, received
from agentq.store.base import Store


class JobSignals:
    """Send a signal to a job; send an event to a tenant's waits."""

    store: Store

    def signal(self, job_id: str, name: Any, data: Any = None) -> dict:
        """Send the signal `name` with `data` to a job: taken by its oldest open `waitForSignal` of that name, else
        kept for the next one. Returns `{"signal": {"name", "data", "id", "time"}, "taken": bool}`.
        `InvalidInputError` for a bad name, `JobNotFoundError`, `ConflictError` when the job has ended."""
        if not isinstance(name, str) or not name or len(name) > 200:
            raise InvalidInputError("signal rejected", [Problem("/name", "a signal's name is a string of 1 to 200 "
                                                                         "characters")])
        signal = received(name, data, uuid.uuid4().hex, now_iso())
        outcome, detail = self.store.send_signal(job_id, name, signal)
        if outcome == "missing":
            raise JobNotFoundError(f"no job {job_id!r} (never submitted, or expired)")
        if outcome == "ended":
            raise ConflictError(f"job {job_id} has ended ({detail}): it takes no signal")
        return {"signal": signal, "taken": outcome == "woken"}

    def send_event(self, body: Any, *, tenant: str = DEFAULT_TENANT) -> dict:
        """Deliver an event `{"name", "data", "id"?}` of `tenant` to every open `waitForEvent` of that tenant it
        matches (none of another tenant's; none opened later). An id sent within a day is not delivered again.
        Returns `{"id", "woken"}`; `InvalidInputError` (nothing delivered) names every problem."""
        problems = event_problems(body)
        if problems:
            raise InvalidInputError("event rejected", problems)
        event_id, woken = deliver_event(self.store, tenant, body["name"], body.get("data"), body.get("id"))
        return {"id": event_id, "woken": woken}
