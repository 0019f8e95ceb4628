"""Finding a watched job's new webhook events and storing one delivery per event (docs/webhooks.md).

The watcher reads what the engine already keeps — the job's status and record, its event stream after the
cursor it saved, the calls held for a reviewer — so nothing on the path of a call or a job changes for
webhooks. Each event gets a stable delivery id (`signing.message_id` of the job and the event), so a scan
repeated after a crash stores nothing twice; the cursor moves only after the deliveries are stored, and a
job is unwatched only once its `job.finished` delivery is.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from agentq.engine.call_views import CallViewStore
from agentq.protocol.status import JobStatus
from agentq.store.contracts import JobReader, WebhookStore
from agentq.store.views import StoredDelivery
from agentq.webhooks.records import Delivery, iso
from agentq.webhooks.signing import message_id
from agentq.webhooks.targets import webhook_of

log = logging.getLogger("agentq.webhooks")

SCAN_BATCH = 200  # watched jobs looked at per scan (the least recently looked at first)
EVENT_BATCH = 500  # events read per job and scan
MISSING_GRACE_MS = 60_000  # a watched job not written yet (its submitter is between the two steps) is kept this long


class WatchedStore(CallViewStore, JobReader, Protocol):
    """What the watcher reads of a job: its events, its calls and its record."""


@dataclass(frozen=True)
class Found:
    """An event found for a webhook: its delivery key (unique within the job), type and data, when it happened."""

    key: str
    type: str
    at: float
    data: Callable[[], Any]  # built only for an event not stored yet


class Watcher:
    def __init__(self, store: WatchedStore, deliveries: WebhookStore, *, clock: Callable[[], float] = time.time):
        self.store = store
        self.deliveries = deliveries
        self.clock = clock

    def scan(self) -> int:
        """Look at the least recently seen watched jobs once; returns how many deliveries were found."""
        job_ids = self.deliveries.watched(SCAN_BATCH)
        if not job_ids:
            return 0
        now_ms = int(self.clock() * 1000)
        seen, found = [], 0
        for job_id, state in zip(job_ids, self.deliveries.job_states(job_ids), strict=True):
            try:
                if state.status is None:
                    self._missing(job_id, now_ms)
                    continue
                seen.append(job_id)
                found += self._job(job_id, JobStatus(state.status), state.options, state.cursor, now_ms)
            except Exception:
                log.warning("could not look for the webhook events of job %s", job_id, exc_info=True)
        self.deliveries.looked_at(seen, now_ms)
        return found

    def _missing(self, job_id: str, now_ms: int) -> None:
        """A watched job that is not written (yet, or any more: it expired)."""
        since = self.deliveries.watched_since(job_id)
        if since is None or now_ms - since > MISSING_GRACE_MS:
            self.deliveries.unwatch(job_id)

    def _job(self, job_id: str, status: JobStatus, options: Any, cursor: str, now_ms: int) -> int:
        webhook = webhook_of(options)
        if webhook is None:
            self.deliveries.unwatch(job_id)
            return 0
        url, events = webhook
        found, cursor_after, caught_up = self._call_events(job_id, events, cursor)
        ended = status.is_final and caught_up
        if ended and "job.finished" in events:
            found.append(Found(self._end_key(job_id), "job.finished", self.clock(),
                               lambda: self.store.record(job_id).to_dict()))
        stored = self._store(job_id, url, found, now_ms)
        if cursor_after != cursor:
            self.deliveries.set_cursor(job_id, cursor_after)
        if ended:
            self.deliveries.unwatch(job_id)
        return stored

    def _end_key(self, job_id: str) -> str:
        """What tells the job's end apart: `job.finished`, and for a resumed job (docs/resume.md) its run's number,
        so the end of each run is delivered once."""
        count = len(self.store.job_info(job_id).runs)
        return "job.finished" if count == 0 else f"job.finished {count + 1}"

    def _call_events(self, job_id: str, events: tuple[str, ...], cursor: str) -> tuple[list[Found], str, bool]:
        """The call events after `cursor`, the cursor after them, and whether the stream was read to its end."""
        found: list[Found] = []
        calls = _CallsView(self.store, job_id)
        if "call.awaiting_approval" in events:
            found += [Found(f"call.awaiting_approval {call_id}", "call.awaiting_approval", self.clock(),
                            calls.getter(call_id)) for call_id in self.deliveries.awaiting_approval(job_id)]
        if "call.finished" not in events:
            return found, cursor, True
        entries = self.store.read_events(job_id, cursor, count=EVENT_BATCH)
        for entry_id, envelope in entries:
            if envelope.get("event") == "call.finished" and "relayed_from" not in envelope:
                found.append(Found(f"event {entry_id}", "call.finished", _entry_time(entry_id),
                                   calls.getter(str(envelope.get("call_id")))))
        return found, entries[-1][0] if entries else cursor, len(entries) < EVENT_BATCH

    def _store(self, job_id: str, url: str, found: list[Found], now_ms: int) -> int:
        ids = {message_id(job_id, f.key): f for f in found}
        new = [(i, f) for i, f in ids.items() if i not in self.deliveries.existing(job_id, list(ids))]
        if not new:
            return 0
        now = now_ms / 1000
        built = [StoredDelivery(job_id=job_id, id=i, body=_body(f.type, f.at, f.data()),
                                data=Delivery(id=i, job_id=job_id, type=f.type, url=url, created_at=now,
                                              next_attempt_at=now).to_dict()) for i, f in new]
        self.deliveries.enqueue(built, now_ms)
        log.info("job %s: %d webhook deliveries stored", job_id, len(built))
        return len(built)


class _CallsView:
    """The job's calls view (`engine/call_views.py`), read once per scan and only when a new call event needs it."""

    def __init__(self, store: WatchedStore, job_id: str):
        self.store, self.job_id = store, job_id
        self._items: dict[str, dict] | None = None

    def getter(self, call_id: str) -> Callable[[], dict]:
        return lambda: {"job_id": self.job_id, **self.items().get(call_id, {"id": call_id})}

    def items(self) -> dict[str, dict]:
        if self._items is None:
            from agentq.engine.call_views import job_calls

            self._items = {item["id"]: item for item in job_calls(self.store, self.job_id)}
        return self._items


def _body(event_type: str, at: float, data: Any) -> bytes:
    """The body every attempt of a delivery sends (Standard Webhooks' payload: type, timestamp, data)."""
    finished = data.get("finished_at") if isinstance(data, dict) and event_type == "job.finished" else None
    timestamp = finished if isinstance(finished, str) and finished else iso(at)  # when the job ended, if known
    return json.dumps({"type": event_type, "timestamp": timestamp, "data": data}, separators=(",", ":"),
                      ensure_ascii=False).encode()


def _entry_time(entry_id: str) -> float:
    return int(entry_id.split("-", 1)[0]) / 1000
