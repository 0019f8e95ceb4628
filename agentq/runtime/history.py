"""A job's history message (docs/protocol.md#history, seed 004): `GET /v1/jobs/{id}/history`, `JobHandle.history()`.

    {"role": "assistant", "parts": [...], "activity_parts": [...]}

`parts` holds every part the job's event stream carries, in the order it was published (events relayed from
a module's child job included, with the module's name as their `source`), with each `tool_request` and its
`tool_result` consolidated into one `tool_call`, text chunks folded into `text_output`, and no technical
details (`agentq.protocol.history.build_history_message`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from agentq.protocol.history import build_history_message
from agentq.store.contracts import EventStore, JobReader

_BATCH = 1000


def history_of(events: Iterable[tuple[str, dict]]) -> dict:
    """The history message of a job's events (stream id, stored envelope), oldest first."""
    return build_history_message([envelope["part"] for _, envelope in events
                                  if isinstance(envelope.get("part"), dict)])


class HistoryStore(EventStore, JobReader, Protocol):
    """What a job's history reads."""


def job_history(store: HistoryStore, job_id: str) -> dict:
    """The history message of a job (raises `JobNotFoundError` for an unknown job)."""
    store.job_status(job_id)
    events: list[tuple[str, dict]] = []
    after = "0-0"
    while True:
        batch = store.read_events(job_id, after, count=_BATCH)
        events += batch
        if len(batch) < _BATCH:
            return history_of(events)
        after = batch[-1][0]
