"""Module relay: which of a module's child job's events reach its parent's stream, and how they are shown there.

The job-level events (`job.queued`, `job.started`, `job.finished`) stay with the child: the parent's own call
events tell them. Every other event is copied with `relayed_from` naming the child, its part marked with the
module's name as `source`; an event the child relayed from its own child (a grandchild's) keeps both. The store
only reads the child's new events and writes what it is given: `Store.write_relayed` moves the child's relay
cursor by compare-and-set in the same step, so each batch goes once whichever process relays it.
"""

from __future__ import annotations

from typing import Any

from agentq.protocol.envelopes import JobFinished, JobQueued, JobStarted
from agentq.store.contracts import EventStore

RELAY_BATCH = 500  # events copied per relay step
#: the envelopes a child keeps to itself: the parent's own call events tell its job's queueing, start and end
_NOT_RELAYED = frozenset(kind.name for kind in (JobQueued, JobStarted, JobFinished))


def relayed(envelope: dict[str, Any], *, child_id: str, source: str) -> dict[str, Any] | None:
    """A child job's envelope as its module's parent shows it, or None for an event that stays with the child."""
    if envelope.get("event") in _NOT_RELAYED:
        return None
    if envelope.get("relayed_from"):
        return envelope
    if isinstance(envelope.get("part"), dict):
        envelope = {**envelope, "part": {**envelope["part"], "source": source}}
    return {**envelope, "relayed_from": child_id}


def relay_events(store: EventStore, job_id: str) -> int:
    """Copy a module's child job's new events to its parent's stream, as `relayed` shows them. Returns how many
    were copied (0 for a job that is no module's child, or when another process relayed them first)."""
    position = store.relay_cursor(job_id)
    if position is None:
        return 0
    parent_id, source = position.parent.job, position.parent.module or "module"
    cursor, copied = position.cursor, 0
    while True:
        entries = store.read_events(job_id, cursor, count=RELAY_BATCH)
        if not entries:
            return copied
        shown = [e for e in (relayed(envelope, child_id=job_id, source=source) for _, envelope in entries)
                 if e is not None]
        if not store.write_relayed(job_id, parent_id=parent_id, cursor=cursor, to=entries[-1][0], envelopes=shown):
            return copied
        copied += len(shown)
        if len(entries) < RELAY_BATCH:
            return copied
        cursor = entries[-1][0]
