"""The canonical forms every layer agrees on: stored JSON (compact, UTF-8), SHA-1 as Lua's `redis.sha1hex`
computes it, a call record's digest (what a claim compares a task's record with), and timestamps (ISO-8601 UTC with
microseconds, `Z`)."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any

from agentq.protocol.records import CallRecord


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


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
