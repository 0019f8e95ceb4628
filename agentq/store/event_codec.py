"""The stored form of a job's event envelopes (kept lean in Redis).

`pack` gives the JSON text of an envelope's stream entry, `unpack` the envelope back, exactly as
`Envelope.to_dict()` made it (key order included), for every envelope. A packed entry is a JSON object whose
first key is `"~"` (the event's short code); it leaves out what `unpack` derives from the rest of the entry:

- `job_id` when it is the stream's job (an event relayed from a child job keeps its own);
- the activity part's `type`, its keys whose value is None, its `source` when it is `agentq`, its
  `activity_type` when it is the usual one of the event (`tool_request` for `call.started`, ...);
- a display info equal to the default one of the activity type (English or French, failed result or not):
  a marker (`"d": "en"`), and so is a plan job's milestone display (`"d": "en plan"`);
- a call's single tool request or result whose name and id are the envelope's `tool` and `call_id`: only its
  arguments (`"A"`) or content (`"C"`, `"E"` when it is an error) are kept;
- in the technical details: `function_name` equal to `tool`, `execution_time_ms` equal to `duration_ms`,
  `status` `success`, `error_message` None, and a `raw_result` that the result's content is the text of (the
  content itself, or its JSON);
- timestamps in the seed format are kept as integer microseconds since the epoch; the technical details'
  one as its difference from the part's.

Every elision is exact: a value is left out only when it equals, with its JSON type, what `unpack` will derive,
and an envelope the packed form cannot express is stored as it is (as older agentq versions stored every
envelope, which `unpack` returns unchanged). The store's scripts may append keys before an entry's closing
brace (`after_cancel`, `running`): keys `unpack` does not know are kept with their names.
"""

from __future__ import annotations

import functools
import json
from datetime import datetime, timedelta
from typing import Any

from agentq.protocol.display_info import default_display_info
from agentq.protocol.events import plan_display_info

MARK = "~"  # the first key of a packed entry; no envelope field is named so
_ESCAPED = ""  # code of an envelope that has a "~" key of its own: stored whole under "v"

_CODES = {
    "job.queued": "jq", "job.started": "js", "job.finished": "jf", "call.started": "cs", "call.retrying": "cr",
    "call.finished": "cf", "thought": "th", "tick.started": "ts", "tick.finished": "tf", "part": "pt",
}
_EVENTS = {code: event for event, code in _CODES.items()}
#: the activity type a part of the event has unless it says otherwise
_ACTIVITY_TYPES = {"jq": "activity", "js": "activity", "jf": "activity", "cs": "tool_request",
                   "cf": "tool_result", "th": "thought"}
_SHORT = {"call_id": "c", "tool": "t", "attempt": "n", "status": "s", "duration_ms": "d"}
_LONG = {short: name for name, short in _SHORT.items()}
_RESERVED = frozenset({MARK, "j", "p", "v", *_LONG})  # top-level keys an envelope cannot keep as they are

_PART_KEYS = ("type", "activity_type", "source", "content", "timestamp", "tools", "results", "display_info",
              "technical_details")
_TOOL_KEYS = ("name", "arguments", "id")
_RESULT_KEYS = ("name", "content", "is_error", "call_id")
_TECHNICAL_KEYS = ("function_name", "arguments", "raw_result", "execution_time_ms", "timestamp", "status",
                   "error_message")
_DISPLAYS = {"en": ("en", False), "fr": ("fr", False), "en!": ("en", True), "fr!": ("fr", True)}
_PLAN_DISPLAYS = {"en plan": "en", "fr plan": "fr"}  # an `activity` part's, a plan job's milestones (`job_part`)
_SOURCE = "agentq"

_EPOCH = datetime(1970, 1, 1)
_SECOND = timedelta(seconds=1)
_NOTHING: Any = object()


_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode  # `state.dumps`, one encoder
_result_text = json.JSONEncoder(ensure_ascii=False).encode  # how `tool_result_part` encodes a result's content


# ---------------------------------------------------------------------------------------------- pack


def pack(envelope: dict, job_id: str) -> str:
    """The JSON text stored for `envelope` in the event stream of job `job_id`."""
    packed = _pack_envelope(envelope, job_id)
    if packed is None:
        packed = {MARK: _ESCAPED, "v": envelope} if MARK in envelope else envelope
    return _dumps(packed)


# one branch per envelope key the packed form shortens or leaves out, inline for speed (module docstring)
def _pack_envelope(envelope: dict, job_id: str) -> dict | None:
    event = envelope.get("event")
    code = _CODES.get(event) if type(event) is str else None
    keys = list(envelope)
    if code is None or keys[1:2] != ["job_id"] or keys[0] != "event":
        return None
    packed: dict[str, Any] = {MARK: code}
    if not _same_str(envelope["job_id"], job_id):
        packed["j"] = envelope["job_id"]
    for key in keys[2:]:
        value = envelope[key]
        if key == "part":
            part = _pack_part(value, envelope, code)
            packed["part" if part is None else "p"] = value if part is None else part
        elif key in _SHORT:
            packed[_SHORT[key]] = value
        elif key in _RESERVED:
            return None
        else:
            packed[key] = value
    return packed


# one branch per part key the packed form leaves out when derivable, inline for speed (module docstring)
def _pack_part(part: Any, envelope: dict, code: str) -> dict | None:
    """The compact form of an activity part (None: the part is stored as it is)."""
    if type(part) is not dict or tuple(part) != _PART_KEYS or part["type"] != "activity":
        return None
    activity_type, timestamp = part["activity_type"], part["timestamp"]
    if type(activity_type) is not str or type(timestamp) is not str:
        return None
    packed: dict[str, Any] = {}
    if activity_type != _ACTIVITY_TYPES.get(code):
        packed["a"] = activity_type
    source = part["source"]
    if source != _SOURCE or type(source) is not str:
        packed["s"] = source
    if part["content"] is not None:
        packed["c"] = part["content"]
    moment = _timestamp_us(timestamp)
    packed["m"] = timestamp if moment is None else moment
    content = _pack_exchange(part, envelope, packed)
    display = part["display_info"]
    if display is not None:
        _pack_display(display, activity_type, packed)
    technical = part["technical_details"]
    if technical is not None:
        compact = _pack_technical(technical, envelope, moment, content)
        if compact is None:
            packed["X"] = technical
        else:
            packed["x"] = compact
    return packed


def _pack_exchange(part: dict, envelope: dict, packed: dict[str, Any]) -> Any:
    """Pack the part's tool requests and results; the content of the envelope's own single result, if that is
    what the results are (else `_NOTHING`)."""
    if part["tools"] is not None:
        arguments = _single_call_arguments(part["tools"], envelope)
        if arguments is _NOTHING:
            packed["T"] = part["tools"]
        else:
            packed["A"] = arguments
    if part["results"] is None:
        return _NOTHING
    result = _single_result(part["results"], envelope)
    if result is None:
        packed["R"] = part["results"]
        return _NOTHING
    content = packed["C"] = result["content"]
    if result["is_error"]:
        packed["E"] = True
    return content


def _pack_display(display: Any, activity_type: str, packed: dict[str, Any]) -> None:
    marker = _display_marker(display, activity_type)
    if marker is None:
        packed["D"] = display
    else:
        packed["d"] = marker


def _single_call_arguments(tools: Any, envelope: dict) -> Any:
    """The arguments of a request for the envelope's own call alone (else `_NOTHING`)."""
    if type(tools) is not list or len(tools) != 1:
        return _NOTHING
    call = tools[0]
    if (type(call) is not dict or tuple(call) != _TOOL_KEYS or not _same_str(call["name"], envelope.get("tool"))
            or not _same_str(call["id"], envelope.get("call_id"))):
        return _NOTHING
    return call["arguments"]


def _single_result(results: Any, envelope: dict) -> dict | None:
    """The one result of the envelope's own call, with a text content (else None)."""
    if type(results) is not list or len(results) != 1:
        return None
    result = results[0]
    if (type(result) is not dict or tuple(result) != _RESULT_KEYS or type(result["content"]) is not str
            or type(result["is_error"]) is not bool or not _same_str(result["name"], envelope.get("tool"))
            or not _same_str(result["call_id"], envelope.get("call_id"))):
        return None
    return result


def _display_marker(display: Any, activity_type: str) -> str | None:
    """The marker of the default display info `display` is, if it is one."""
    if type(display) is not dict:
        return None
    items = tuple(display.items())
    for marker, (lang, is_error) in _DISPLAYS.items():
        if items == _default_display(activity_type, lang, is_error):
            return marker
    if activity_type == "activity":
        for marker, lang in _PLAN_DISPLAYS.items():
            if items == _plan_display(lang):
                return marker
    return None


# one branch per technical detail the packed form leaves out when derivable (module docstring)
def _pack_technical(technical: Any, envelope: dict, part_us: int | None, content: Any) -> dict | None:
    """The compact form of a part's technical details (None: stored as they are)."""
    if type(technical) is not dict or tuple(technical) != _TECHNICAL_KEYS:
        return None
    packed: dict[str, Any] = {}
    if not _same_str(technical["function_name"], envelope.get("tool")):
        packed["f"] = technical["function_name"]
    packed["a"] = technical["arguments"]
    raw = technical["raw_result"]
    derivation = None if content is _NOTHING else _raw_derivation(raw, content)
    if derivation is None:
        packed["r"] = raw
    elif derivation == "text":
        packed["rt"] = 1
    if not _same_value(technical["execution_time_ms"], envelope.get("duration_ms", _NOTHING)):
        packed["e"] = technical["execution_time_ms"]
    moment = _timestamp_us(technical["timestamp"])
    if moment is not None and part_us is not None:
        packed["w"] = moment - part_us
    else:
        packed["t"] = technical["timestamp"]
    if not _same_str(technical["status"], "success"):
        packed["k"] = technical["status"]
    if technical["error_message"] is not None:
        packed["g"] = technical["error_message"]
    return packed


def _raw_derivation(raw: Any, content: str) -> str | None:
    """How `raw` derives from the result's `content`: "text" (it is the content), "json" (the content is its
    JSON, as `tool_result_part` encodes a result that is not a string), or None."""
    if type(raw) is str:
        return "text" if raw == content else None
    try:
        text = int.__repr__(raw) if type(raw) is int else _result_text(raw)  # an int's JSON is its repr
    except (TypeError, ValueError):  # not JSON; an int too long to write
        return None
    return "json" if text == content else None


# -------------------------------------------------------------------------------------------- unpack


def unpack(text: str, job_id: str) -> dict:
    """The envelope stored as `text` in the event stream of job `job_id` (packed or not)."""
    data = json.loads(text)
    code = data.get(MARK) if type(data) is dict else None
    if code is None:
        return data  # stored as it is (also every entry written before entries were packed)
    if code == _ESCAPED:
        return _unescape(data)
    envelope: dict[str, Any] = {"event": _EVENTS[code], "job_id": data.get("j", job_id)}
    part = _NOTHING
    for key, value in data.items():
        if key == "p":
            part = value
            envelope["part"] = None  # its place among the keys; filled in below, once `tool` and the rest are known
        elif key != MARK and key != "j":
            envelope[_LONG.get(key, key)] = value
    if part is not _NOTHING:
        envelope["part"] = _unpack_part(part, envelope, code)
    return envelope


def _unescape(data: dict) -> dict:
    envelope = dict(data["v"])
    envelope.update((key, value) for key, value in data.items() if key != MARK and key != "v")
    return envelope


def _unpack_part(packed: dict, envelope: dict, code: str) -> dict:
    activity_type = packed["a"] if "a" in packed else _ACTIVITY_TYPES[code]
    moment = packed["m"]
    timestamp = _timestamp_text(moment) if type(moment) is int else moment
    tools: Any
    results: Any
    if "A" in packed:
        tools = [{"name": envelope["tool"], "arguments": packed["A"], "id": envelope["call_id"]}]
    else:
        tools = packed.get("T")
    if "C" in packed:
        results = [{"name": envelope["tool"], "content": packed["C"], "is_error": "E" in packed,
                    "call_id": envelope["call_id"]}]
    else:
        results = packed.get("R")
    display = _marked_display(activity_type, packed["d"]) if "d" in packed else packed.get("D")
    technical = _unpack_technical(packed["x"], envelope, moment, packed.get("C")) if "x" in packed else packed.get("X")
    return {"type": "activity", "activity_type": activity_type, "source": packed.get("s", _SOURCE),
            "content": packed.get("c"), "timestamp": timestamp, "tools": tools, "results": results,
            "display_info": display, "technical_details": technical}


def _unpack_technical(packed: dict, envelope: dict, part_us: Any, content: Any) -> dict:
    raw = packed["r"] if "r" in packed else content if "rt" in packed else json.loads(content)
    return {
        "function_name": packed["f"] if "f" in packed else envelope["tool"],
        "arguments": packed["a"],
        "raw_result": raw,
        "execution_time_ms": packed["e"] if "e" in packed else envelope["duration_ms"],
        "timestamp": _timestamp_text(part_us + packed["w"]) if "w" in packed else packed["t"],
        "status": packed.get("k", "success"),
        "error_message": packed.get("g"),
    }


# ------------------------------------------------------------------------------------------- helpers


def _same_str(value: Any, expected: Any) -> bool:
    return type(value) is str and value == expected


def _same_value(value: Any, expected: Any) -> bool:
    """Equal with the same JSON type (1, 1.0 and True are equal in Python but not in JSON)."""
    return type(value) is type(expected) and value == expected


def _timestamp_us(text: Any) -> int | None:
    """Microseconds since the epoch of a timestamp in the seed format (`2024-01-15T10:30:00.000000`), or None
    for any other value (kept as it is)."""
    if type(text) is not str or len(text) != 26 or text[19] != ".":
        return None
    fraction = text[20:]
    if not (fraction.isascii() and fraction.isdigit()):
        return None
    seconds = _epoch_seconds(text[:19])
    return None if seconds is None else seconds * 1_000_000 + int(fraction)


def _timestamp_text(microseconds: int) -> str:
    seconds, fraction = divmod(microseconds, 1_000_000)
    return f"{_seconds_text(seconds)}.{fraction:06d}"


@functools.lru_cache(maxsize=256)  # a job's events come seconds apart: most share their second with another
def _epoch_seconds(text: str) -> int | None:
    """Seconds since the epoch of `YYYY-MM-DDTHH:MM:SS` (exactly as `_seconds_text` writes it), else None."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is not None or moment.isoformat(timespec="seconds") != text:
        return None
    return (moment - _EPOCH) // _SECOND


@functools.lru_cache(maxsize=256)
def _seconds_text(seconds: int) -> str:
    return (_EPOCH + timedelta(seconds=seconds)).isoformat(timespec="seconds")


def _marked_display(activity_type: str, marker: str) -> dict:
    if marker in _PLAN_DISPLAYS:
        return dict(_plan_display(_PLAN_DISPLAYS[marker]))
    return dict(_default_display(activity_type, *_DISPLAYS[marker]))


@functools.lru_cache(maxsize=4)
def _plan_display(lang: str) -> tuple[tuple[str, Any], ...]:
    return tuple(plan_display_info(lang).items())


@functools.lru_cache(maxsize=1024)
def _default_display(activity_type: str, lang: str, is_error: bool) -> tuple[tuple[str, Any], ...]:
    """The default display info's items, in order (values are str or None)."""
    return tuple(default_display_info(activity_type, lang, is_error=is_error).items())


__all__ = ["MARK", "pack", "unpack"]
