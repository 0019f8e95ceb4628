"""Wait calls (docs/waits.md): `sleep`, `waitForEvent`, `waitForSignal`, run by the engine and holding nothing while
they wait.

`open` runs in the call's task (the engine queue's, like a latent or module call): the claimed call, its
parameters resolved (references in a match included), is written `waiting` with its due time (`store/waits.py`)
and a `call.waiting` event; the task ends, and so does the call's hold on any thread. `fire` ends a wait when its
timer comes due (the dispatcher's `runtime/timers.py` loop) or something woke it (an event, a signal: they bring
its timer due now): the store decides once how it ends (`take_wait`), and the call commits through the one commit
step every call uses — a sleep's `{"woke_at"}`, the event or signal received, or the failure `WaitTimedOut` that a
`||` branch takes like any failure — then the job-progress step releases its dependents, ends the job or sends
an agent's next tick. `deliver_event` finds the waits of a sender's tenant an event matches.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import Any, Protocol

from agentq.engine.commits import Shown, commit_failure
from agentq.engine.failures import CallFailure
from agentq.engine.render import done_event
from agentq.protocol.digests import iso_utc, now_iso
from agentq.protocol.envelopes import CallWaiting
from agentq.protocol.records import CallRecord
from agentq.protocol.status import CallStatus
from agentq.protocol.waits import (
    SLEEP,
    WAIT_FOR_EVENT,
    WAIT_TIMED_OUT,
    WaitSpec,
    received,
    wait_spec,
)
from agentq.protocol.writes import output_messages
from agentq.store.contracts import CallStore, EventStore, JobReader, JobStore, WaitStore
from agentq.store.replies import Commit, Committed

log = logging.getLogger("agentq.waits")

OPENING_RECHECK_MS = 500  # a timer taken before its wait opened is due again this much later


class WaitsStore(WaitStore, CallStore, EventStore, JobStore, JobReader, Protocol):
    """What opening, firing and waking waits use."""


class Progress(Protocol):
    """The job-progress step (`engine/progress.py` `JobProgress`): after a commit, and after a commit whose step a
    dead process may have skipped."""

    def committed(self, job_id: str, commit: Commit | None, call_id: str | None = None) -> None: ...

    def recover(self, job_id: str, call_id: str) -> None: ...


class Waits:
    """Opens wait calls, fires them when due or woken, and delivers events to them."""

    def __init__(self, store: WaitsStore, progress: Progress, *, source: str = "agentq",
                 ended: Callable[[str, CallRecord, str, float, Commit], None] | None = None):
        self.store = store
        self.progress = progress
        self.source = source
        self.ended = ended  # tells the hooks of a wait whose commit took effect (`Executor._ended`)

    def open(self, job_id: str, call_id: str, token: str, record: CallRecord, resolved: dict) -> None:
        """Write the claimed wait call `waiting` (see the module docstring); a waitForSignal that finds a signal
        kept for it is fired at once."""
        now = time.time()
        try:
            spec = wait_spec(resolved, now)
        except (ValueError, TypeError, KeyError) as error:
            raise CallFailure("InvalidWait", str(error), retryable=False) from None
        tenant = self.store.job_info(job_id).tenant
        event = CallWaiting(job_id=job_id, call_id=call_id, tool=record.tool, awaits=spec.awaited(),
                            until=spec.until, instance=record.instance)
        opened = self.store.open_wait(job_id, call_id, token=token, spec=spec, opened_ms=round(now * 1000),
                                      tenant=tenant, event=event)
        if opened == "woken":
            self.fire(job_id, call_id)

    def fire(self, job_id: str, call_id: str) -> str:
        """End a wait if it is due or woken, through the commit step: 'done', 'early' (back to its timer, which
        keeps its due time), 'opening' (its call still runs: the timer, written before the wait opens, is due
        again shortly) or 'gone' (it does not wait: its timer is dropped)."""
        now = time.time()
        taken = self.store.take_wait(job_id, call_id, now_ms=round(now * 1000),
                                     sleep_output={"woke_at": iso_utc(now)})
        if taken.outcome == "early" and taken.spec is not None:
            self.store.retime_wait(job_id, call_id, taken.spec.due_ms)
            return "early"
        if taken.outcome == "opening":
            # a due timer taken between its write and the wait's open (a sleep of 0 s, an open retried across a
            # store restart after its due time): dropping it would leave the wait open with no timer, for good.
            # An attempt that dies before opening leaves its call to be run again, which writes the timer anew.
            self.store.retime_wait(job_id, call_id, now * 1000 + OPENING_RECHECK_MS)
            return "opening"
        if taken.outcome != "woken" or taken.spec is None or taken.ended is None:
            self.store.close_wait(job_id, call_id, tenant=None, spec=None)
            # it may have been committed by a dispatcher that died before the job's step: finish that step
            self.progress.recover(job_id, call_id)
            return "gone"
        records = self.store.call_records(job_id, [call_id])
        record = records.get(call_id)
        tenant = self.store.job_info(job_id).tenant
        if record is not None:
            self._commit(job_id, call_id, record, taken.spec, taken.token, taken.ended)
        self.store.close_wait(job_id, call_id, tenant=tenant, spec=taken.spec)
        return "done"

    def _commit(self, job_id: str, call_id: str, record: CallRecord, spec: WaitSpec, token: str,
                ended: dict) -> None:
        tool = self.store.job_tools(job_id).get(record.tool) or {}
        now = time.time()
        if "output" in ended:
            output = ended["output"]
            messages = output_messages(record.call, output, call_id=call_id, date=now_iso())
            done = done_event(job_id, call_id, record, tool, record.call, output, now, now, source=self.source)
            commit = self.store.commit(job_id, call_id, token=token, status=CallStatus.DONE, messages=messages,
                                       events=[done], awaited=record.awaited)
            status = CallStatus.DONE
        else:
            commit, _ = commit_failure(self.store, job_id, call_id, token=token, record=record,
                                       error_type=WAIT_TIMED_OUT, message=timed_out_message(spec),
                                       source=self.source, shown=Shown())
            status = CallStatus.FAILED
        if self.ended is not None and isinstance(commit, Committed):
            self.ended(job_id, record, status.value, 0.0, commit)
        self.progress.committed(job_id, commit, call_id)


def deliver_event(store: WaitStore, tenant: str, name: str, data: Any, event_id: str | None) -> tuple[str, int]:
    """Deliver a sent event to every open waitForEvent of `tenant` it matches (each woken wait is fired by a
    dispatcher within a second). Returns (the event's id, how many waits it woke); an id seen within a day is not
    delivered again (0)."""
    if event_id is not None and not store.first_sight(tenant, event_id):
        return event_id, 0
    event_id = event_id or uuid.uuid4().hex
    event = received(name, data, event_id, now_iso())
    woken = 0
    for digest, member in store.event_waiters(tenant, name, data):
        job_id, _, call_id = member.partition(" ")
        if store.wake_wait(job_id, call_id, event_name=name, event=event):
            woken += 1
        else:  # its call no longer waits (a crash after it ended left the entry): dropped
            store.drop_event_wait(tenant, name, digest, member)
    return event_id, woken


def timed_out_message(spec: WaitSpec) -> str:
    if spec.kind == WAIT_FOR_EVENT:
        return f"no event {spec.name!r} matching {spec.match} came before the timeout"
    if spec.kind == SLEEP:
        return "the sleep ended"
    return f"no signal {spec.name!r} came before the timeout"
