"""The canonical forms every layer agrees on: stored JSON (compact, UTF-8), SHA-1 as Lua's `redis.sha1hex`
computes it, a call record's digest (what a claim compares a task's record with), and timestamps (ISO-8601 UTC with
microseconds, `Z`)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

from agentq.protocol.records import CallRecord

_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode  # one encoder, not one per call


def dumps(value: Any) -> str:
    """The stored JSON of `value` (what `json.dumps(value, ensure_ascii=False, separators=(",", ":"))` gives)."""
    return _encode(value)


#: the stored JSON of the call records of the submission in progress (`stored_forms`): call id -> (record, JSON)
_stored: ContextVar[dict[str, tuple[CallRecord, str]] | None] = ContextVar("agentq_stored_forms", default=None)


@contextmanager
def stored_forms() -> Iterator[None]:
    """Within it, a call record's stored JSON (`stored_json`) is encoded once: a submission signs its calls' tasks
    (their digest) and writes the same records (their stored form), one encoding for both."""
    token = _stored.set({})
    try:
        yield
    finally:
        _stored.reset(token)


def stored_json(record: CallRecord) -> str:
    """A call record's stored JSON form (`dumps(record.to_dict())`), made once per record within `stored_forms`."""
    memo = _stored.get()
    if memo is None:
        return dumps(record.to_dict())
    kept = memo.get(record.id)
    if kept is not None and kept[0] is record:
        return kept[1]
    text = dumps(record.to_dict())
    memo[record.id] = (record, text)
    return text


def record_digest(record: CallRecord | dict) -> str:
    """SHA-1 of a call record's stored JSON form (what `claim` compares a task's record with); `record` may be
    the record's `to_dict()` already."""
    return sha1(dumps(record) if isinstance(record, dict) else stored_json(record))


def sha1(text: str) -> str:
    """SHA-1 of a stored value, as Lua's `redis.sha1hex` computes it."""
    return hashlib.sha1(text.encode()).hexdigest()


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def iso_utc(unix_s: float) -> str:
    """ISO-8601 UTC of unix seconds, in `now_iso`'s form."""
    return datetime.fromtimestamp(unix_s, UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
