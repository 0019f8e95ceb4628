"""Waits (docs/waits.md): the built-in tools `sleep`, `waitForEvent` and `waitForSignal`, what a wait call waits
for, and how an event finds the waits it matches: each wait is filed under its match's pointers (its shape) and the
values there (its digest), so an event reads its data at each shape's pointers and looks up those digests, never
every open wait (pure).

A wait is one more call of a job: composed only when the job lists its tool, planned and referenced like any call,
run by the engine (never by a worker): its call is written `waiting` with a due time, and whatever ends it (the due
time, a delivered event or signal) commits it as any call commits.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from agentq.errors import Problem

WAIT_ACTIVITY = "agentq-wait"  # the `_activity` of the wait tools: its calls are the engine's (`CallMode.WAIT`)
SLEEP, WAIT_FOR_EVENT, WAIT_FOR_SIGNAL = "sleep", "waitForEvent", "waitForSignal"
WAIT_TIMED_OUT = "WaitTimedOut"  # the error type of a wait that reached its timeout
MAX_PAST_S = 86_400  # a `sleep` `until` further in the past than this is a mistake, not a wait of zero
FOREVER = math.inf  # the due time of a wait without a timeout

_POINTER = re.compile(r"^(/([^~/]|~[01])*)*$")
_NAME = {"type": "string", "minLength": 1, "maxLength": 200}
_TIMEOUT = {"type": "number", "minimum": 0, "description": "Seconds to wait at most; then the call fails with "
            "WaitTimedOut. Without it the wait has no end of its own."}
_RECEIVED = {"type": "object", "properties": {"name": {"type": "string"}, "data": {}, "id": {"type": "string"},
                                              "time": {"type": "string"}},
             "required": ["name", "data", "id", "time"]}


def _tool(name: str, description: str, params: dict[str, Any], output: dict[str, Any], **extra: Any) -> dict:
    return {"type": "object", "description": description,
            "properties": {"_tool": {"type": "string", "const": name},
                           "_activity": {"type": "string", "const": WAIT_ACTIVITY},
                           **params, "_output": output}, **extra}


WAIT_TOOLS: dict[str, dict] = {
    SLEEP: _tool(SLEEP, "Wait a number of seconds, or until a time (RFC 3339); the output is when it woke.",
                 {"seconds": {"type": "number", "minimum": 0},
                  "until": {"type": "string", "description": "An RFC 3339 time, e.g. 2026-01-31T08:00:00Z."}},
                 {"type": "object", "properties": {"woke_at": {"type": "string"}}, "required": ["woke_at"]}),
    WAIT_FOR_EVENT: _tool(
        WAIT_FOR_EVENT, "Wait for an event sent to agentq (POST /v1/events) whose name is `event` and whose data "
        "has, at each JSON pointer of `match`, the value given; the output is the event.",
        {"event": _NAME,
         "match": {"type": "object", "propertyNames": {"pattern": _POINTER.pattern},
                   "description": "JSON pointer into the event's data -> the value it must have."},
         "timeout_s": _TIMEOUT}, _RECEIVED, required=["_tool", "event"]),
    WAIT_FOR_SIGNAL: _tool(
        WAIT_FOR_SIGNAL, "Wait for a signal sent to this job by name (POST /v1/jobs/{id}/signals/{name}); a signal "
        "sent before the wait is kept for it. The output is the signal.",
        {"name": _NAME, "timeout_s": _TIMEOUT}, _RECEIVED, required=["_tool", "name"]),
}


def is_wait_tool(tool: Mapping[str, Any]) -> bool:
    """Whether a (composed) tool schema is one of the wait tools."""
    activity = (tool.get("properties") or {}).get("_activity") or {}
    return isinstance(activity, Mapping) and activity.get("const") == WAIT_ACTIVITY


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 time with its offset, or None."""
    if not isinstance(value, str) or not re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$",
                                                  value, re.IGNORECASE):
        return None
    try:
        return datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
    except ValueError:
        return None


def wait_problems(call: Mapping[str, Any], tool: Mapping[str, Any], pointer: str,
                  now_s: float | None = None) -> list[Problem]:
    """What the schema cannot say about a call of a wait tool (none for another tool): a sleep's `seconds` or
    `until`, and `until` a real time no more than a day ago (a reference, resolved when the call opens, is not
    checked here)."""
    if call.get("_tool") != SLEEP or not is_wait_tool(tool):
        return []
    if ("seconds" in call) == ("until" in call):
        return [Problem(pointer, "sleep takes either seconds or until (one of them)")]
    until = call.get("until")
    if not isinstance(until, str) or until.startswith("\u2020"):
        return []
    when = parse_time(until)
    if when is None:
        return [Problem(f"{pointer}/until", f"{until!r} is not an RFC 3339 time (e.g. 2026-01-31T08:00:00Z)")]
    if when.timestamp() < (time.time() if now_s is None else now_s) - MAX_PAST_S:
        return [Problem(f"{pointer}/until", f"{until} is more than a day in the past")]
    return []


@dataclass(frozen=True)
class WaitSpec:
    """What an open wait call waits for: `kind` is its tool; `name` the event's or signal's name (sleep: "");
    `match` the resolved match of a `waitForEvent`; `due_ms` when it ends by itself (unix ms; `FOREVER`: never)."""

    kind: str
    name: str
    due_ms: float
    match: dict[str, Any]

    def to_json(self, token: str, opened_ms: int) -> str:
        """The wait as the store keeps it, with the token of the attempt that opened it (its commit's)."""
        return json.dumps({"kind": self.kind, "name": self.name, "match": self.match, "token": token,
                           "due_ms": None if self.due_ms == FOREVER else int(self.due_ms), "opened_ms": opened_ms},
                          separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> tuple[WaitSpec, str]:
        """(the wait, its token) as `to_json` kept them."""
        value = json.loads(text)
        due = FOREVER if value.get("due_ms") is None else float(value["due_ms"])
        return cls(value["kind"], value["name"], due, value.get("match") or {}), value["token"]

    @property
    def until(self) -> str | None:
        """When it ends by itself (RFC 3339), or None."""
        return None if self.due_ms == FOREVER else iso_ms(self.due_ms)

    def awaited(self) -> dict[str, Any]:
        """What `call.waiting` says it waits for."""
        if self.kind == SLEEP:
            return {"kind": SLEEP}
        if self.kind == WAIT_FOR_EVENT:
            return {"kind": "event", "event": self.name, "match": self.match}
        return {"kind": "signal", "signal": self.name}


def wait_spec(call: Mapping[str, Any], now_s: float) -> WaitSpec:
    """The wait a resolved wait call opens at `now_s`. Raises ValueError for parameters that cannot be waited on
    (only a reference resolved to something else than the schema allows gets here)."""
    tool = call.get("_tool")
    timeout = call.get("timeout_s")
    due = FOREVER if timeout is None else (now_s + float(timeout)) * 1000
    if tool == SLEEP:
        if call.get("until") is not None:
            when = parse_time(call["until"])
            if when is None:
                raise ValueError(f"until: {call['until']!r} is not an RFC 3339 time")
            return WaitSpec(SLEEP, "", max(when.timestamp(), now_s) * 1000, {})
        return WaitSpec(SLEEP, "", (now_s + float(call.get("seconds") or 0)) * 1000, {})
    if tool == WAIT_FOR_EVENT:
        return WaitSpec(WAIT_FOR_EVENT, str(call["event"]), due, dict(call.get("match") or {}))
    if tool == WAIT_FOR_SIGNAL:
        return WaitSpec(WAIT_FOR_SIGNAL, str(call["name"]), due, {})
    raise ValueError(f"{tool!r} is not a wait tool")


def iso_ms(unix_ms: float) -> str:
    return datetime.fromtimestamp(unix_ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


_MISSING = object()


def pointer_value(data: Any, pointer: str) -> Any:
    """The value at a JSON pointer (RFC 6901) in `data`, or a sentinel that equals nothing."""
    if pointer == "":
        return data
    value = data
    for token in pointer[1:].split("/"):
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(value, dict) and token in value:
            value = value[token]
        elif isinstance(value, list) and token.isdigit() and int(token) < len(value):
            value = value[int(token)]
        else:
            return _MISSING
    return value


def match_shape(match: Mapping[str, Any]) -> str:
    """The pointers a match reads, as the key its waits are grouped under (sorted, JSON)."""
    return json.dumps(sorted(match), separators=(",", ":"))


def match_digest(shape: str, values: list[Any]) -> str:
    """The key of the waits of one shape whose match has `values` (in the shape's order): an event's data read at
    those pointers gives the same key exactly when it matches them (JSON equality, as canonical JSON)."""
    text = json.dumps([shape, values], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()


def wait_digest(match: Mapping[str, Any]) -> tuple[str, str]:
    """(shape, digest) of an open wait's resolved match."""
    shape = match_shape(match)
    return shape, match_digest(shape, [match[p] for p in sorted(match)])


def event_digests(shapes: list[str], data: Any) -> list[str]:
    """The digests an event's data matches, one per shape its data has a value at every pointer of."""
    digests = []
    for shape in shapes:
        pointers = json.loads(shape)
        values = [pointer_value(data, p) for p in pointers]
        if not any(v is _MISSING for v in values):
            digests.append(match_digest(shape, values))
    return digests


def event_problems(body: Any) -> list[Problem]:
    """The problems of a sent event (`{"name", "data", "id"?}`), each at its pointer."""
    if not isinstance(body, Mapping):
        return [Problem("", "an event is a JSON object {\"name\", \"data\", \"id\"?}")]
    problems = [Problem(f"/{key}", "unknown field; an event has data, id, name")
                for key in sorted(set(body) - {"name", "data", "id"})]
    name = body.get("name")
    if not isinstance(name, str) or not name or len(name) > 200:
        problems.append(Problem("/name", "an event needs a name: a string of 1 to 200 characters"))
    if "id" in body and (not isinstance(body["id"], str) or not body["id"] or len(body["id"]) > 200):
        problems.append(Problem("/id", "the id is a string of 1 to 200 characters"))
    return problems


def received(name: str, data: Any, event_id: str, time: str) -> dict[str, Any]:
    """The output of a woken `waitForEvent` / `waitForSignal`."""
    return {"name": name, "data": data, "id": event_id, "time": time}
