"""History messages and legacy stream markers (seed 004).

A *legacy activity dict* (the ``activity_parts`` entries and the ``__STREAM_ACTIVITY__`` marker payload) is
the activity part with ``"type"`` set to its ``activity_type`` and no ``activity_type`` key, e.g.
``{"type": "tool_request", "source": ..., "content": ..., "timestamp": ..., "tools": ..., "results": ...,
"display_info": ...}``; technical details are never included.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from agentq.protocol.events import strip_technical_details, tool_call_part

STREAM_MARKER_PREFIX = "__STREAM_ACTIVITY__"


def _is_activity(part: dict) -> bool:
    return part.get("type") == "activity"


def is_stream_marker(part: dict) -> bool:
    """True for a ``text_output_stream`` part carrying a legacy ``__STREAM_ACTIVITY__`` marker."""
    return part.get("type") == "text_output_stream" and str(part.get("text", "")).startswith(
        STREAM_MARKER_PREFIX)


def legacy_activity(part: dict) -> dict:
    """The legacy raw activity dict of an activity part (see the module docstring)."""
    legacy = {k: v for k, v in strip_technical_details(part).items() if k not in ("type", "activity_type")}
    return {"type": part["activity_type"], **legacy}


def stream_marker(part: dict) -> dict:
    """The legacy ``__STREAM_ACTIVITY__<compact json>`` text part for an activity part."""
    payload = json.dumps(legacy_activity(part), ensure_ascii=False, separators=(",", ":"))
    return {"type": "text_output_stream", "text": STREAM_MARKER_PREFIX + payload}


def parse_stream_marker(text: str) -> dict | None:
    """The legacy activity dict inside a marker text, or None if ``text`` is not a valid marker."""
    if not isinstance(text, str) or not text.startswith(STREAM_MARKER_PREFIX):
        return None
    try:
        payload = json.loads(text[len(STREAM_MARKER_PREFIX):])
    except ValueError:
        return None
    return payload if isinstance(payload, dict) else None


def stream_parts(part: dict, *, markers: bool = True) -> list[dict]:
    """What to send to a stream for one part: the part stripped, then its legacy marker (activities only)."""
    sent = [strip_technical_details(part)]
    if markers and _is_activity(part):
        sent.append(stream_marker(part))
    return sent


def _call_ids(part: dict, key: str, field: str) -> list[str]:
    return [item[field] for item in part.get(key) or [] if field in item]


def _consolidate(parts: list[dict]) -> list[dict]:
    """Replace each ``tool_request`` + its later ``tool_result`` part(s) by one ``tool_call`` in place."""
    out: list[dict] = []
    consumed: set[int] = set()
    for i, part in enumerate(parts):
        if i in consumed:
            continue
        if _is_activity_of(part, "tool_request"):
            ids = set(_call_ids(part, "tools", "id"))
            matches = _results_for(ids, parts, i + 1, consumed)
            if ids and matches:
                consumed.update(matches)
                part = tool_call_part(part, *(parts[j] for j in matches))
        out.append(part)
    return out


def _is_activity_of(part: dict, activity_type: str) -> bool:
    return _is_activity(part) and part.get("activity_type") == activity_type


def _results_for(ids: set[str], parts: list[dict], start: int, consumed: set[int]) -> list[int]:
    """The positions, from `start` on, of the not yet consumed `tool_result` parts of any of the calls `ids`."""
    return [j for j in range(start, len(parts)) if j not in consumed and _is_activity_of(parts[j], "tool_result")
            and ids & set(_call_ids(parts[j], "results", "call_id"))]


def _fold_text(parts: list[dict]) -> list[dict]:
    """Drop legacy markers and fold consecutive ``text_output_stream`` chunks into one ``text_output``."""
    out: list[dict] = []
    folding = False  # the last part of `out` is a text_output built from stream chunks
    for part in parts:
        if is_stream_marker(part):
            continue
        if part.get("type") == "text_output_stream":
            if folding:
                out[-1] = {"type": "text_output", "text": out[-1]["text"] + part.get("text", "")}
            else:
                out.append({"type": "text_output", "text": part.get("text", "")})
            folding = True
            continue
        out.append(part)
        folding = False
    return out


def chronological(parts: list[dict]) -> list[dict]:
    """The parts in the order of their timestamps. A job's stream holds them in the order they were appended, which
    can differ by a few ms from the order they were made in: calls running in parallel threads or processes each
    stamp a part, then append it. A part without a timestamp (a text chunk) keeps its place after the part it
    followed; parts of the same moment keep their stream order (the sort is stable)."""
    keyed, moment = [], ""
    for n, part in enumerate(parts):
        stamp = part.get("timestamp")
        if isinstance(stamp, str) and stamp:
            moment = _utc(stamp) or moment
        keyed.append((moment, n, part))
    keyed.sort(key=lambda item: (item[0], item[1]))
    return [part for _, _, part in keyed]


def _utc(stamp: str) -> str | None:
    """A comparable form of an ISO 8601 timestamp (UTC, microseconds), or None when it does not parse."""
    try:
        moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC).replace(tzinfo=None)
    return moment.isoformat(timespec="microseconds")


def build_history_message(parts: list[dict], *, role: str = "assistant") -> dict:
    """One history message from a job's stored parts, put in chronological order (`chronological`).

    ``tool_request`` + matching ``tool_result`` (by call id) become one ``tool_call`` at the request's
    position (an unmatched request stays a ``tool_request``, an unmatched result stays a ``tool_result``);
    stream chunks are folded into ``text_output``; markers are dropped; technical details are stripped.
    ``activity_parts`` holds the legacy dicts of the same activities in the same order.
    """
    history_parts = strip_technical_details(_fold_text(_consolidate(chronological(list(parts)))))
    return {"role": role, "parts": history_parts,
            "activity_parts": [legacy_activity(p) for p in history_parts if _is_activity(p)]}


__all__ = [
    "STREAM_MARKER_PREFIX",
    "build_history_message",
    "is_stream_marker",
    "legacy_activity",
    "parse_stream_marker",
    "stream_marker",
    "stream_parts",
]
