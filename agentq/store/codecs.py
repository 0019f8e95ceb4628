"""The store's value codecs, independent of any key: JSON as stored, packed envelopes, timestamps, digests,
and the typed job of its stored hash fields."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any

from agentq.protocol.envelopes import Envelope
from agentq.protocol.records import CallRecord, ErrorInfo, JobInfo, JobKind, JobRecord, ParentLink, empty_usage
from agentq.protocol.status import JobStatus
from agentq.store.event_codec import pack

USAGE_PREFIX = "usage."  # job hash fields `usage.<counter>`, summed with HINCRBY


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def entry(envelope: Envelope, job_id: str) -> str:
    """The stored (packed) form of an envelope in the event stream of job `job_id` (see `store/event_codec.py`)."""
    return pack(envelope.to_dict(), job_id)


def record_digest(record: CallRecord | dict) -> str:
    """SHA-1 of a call record's stored JSON form (what `claim` compares a task's record with); `record` may be
    the record's `to_dict()` already."""
    body = record if isinstance(record, dict) else record.to_dict()
    return sha1(dumps(body))


def sha1(text: str) -> str:
    """SHA-1 of a stored value, as Lua's `redis.sha1hex` computes it."""
    return hashlib.sha1(text.encode()).hexdigest()


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def iso_utc(unix_s: float) -> str:
    """ISO-8601 UTC of unix seconds, in `now_iso`'s form."""
    return datetime.fromtimestamp(unix_s, UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def decode_job(fields: dict[str, str]) -> JobInfo:
    """The typed job of its stored hash fields."""

    def loads(name: str, default: Any = None) -> Any:
        value = fields.get(name)
        return json.loads(value) if value else default

    record, parent = loads("record"), loads("parent")
    return JobInfo(
        id=fields["id"], kind=JobKind(fields.get("kind") or JobKind.PLAN), status=JobStatus(fields["status"]),
        created_at=fields.get("created_at"), started_at=fields.get("started_at") or None,
        finished_at=fields.get("finished_at") or None, open_calls=_count(fields, "open"),
        options=loads("options", {}), output=loads("output"), error=ErrorInfo.of(loads("error")),
        usage={name: _count(fields, USAGE_PREFIX + name) for name in empty_usage()},
        record=JobRecord.from_dict(record) if record else None,
        ticks=_count(fields, "ticks"), final_output=loads("final_output"),
        has_final_output="final_output" in fields, parent=ParentLink.from_dict(parent) if parent else None,
        ticking=fields.get("ticking") == "1",
        exchanges=_count(fields, "exchanges"),
    )


def _count(fields: dict[str, str], name: str) -> int:
    """A counter of the job hash (0 while it was never written)."""
    return int(fields.get(name) or 0)


def saved_record(status: str | None, saved: str | None) -> JobRecord | None:
    """The record saved when the job ended, if it stands: a canceled job's is computed anew (a call that was
    running at the cancel may still write its outcome)."""
    if saved and status is not None and JobStatus(status).is_final and status != JobStatus.CANCELED:
        return JobRecord.from_dict(json.loads(saved))
    return None
