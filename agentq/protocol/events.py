"""Front-end event parts (seed 004): their builders, timestamps, and the stripping of technical details. The parts'
models are `part_models.py`'s, their default display info `display_info.py`'s.

Builders return plain JSON dicts shaped like ``ActivityOutputPart.model_dump(mode="json")``: all nine keys
present, ``None`` where unused, so the store keeps them as JSON and the runtime never converts back and forth.
``technical_details`` is kept with the job and removed by :func:`strip_technical_details` from everything
sent to a front end.
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any, Literal

from agentq.errors import ProtocolError
from agentq.protocol.display_info import default_display_info, display_of, language_of
from agentq.protocol.part_models import ActivityOutputPart, DisplayInfo, TextOutputPart

TIMESTAMP_FORMAT = "%Y-%m-%dT%H:%M:%S.%f"  # seed format: UTC, microseconds, no zone


# ---------------------------------------------------------------- timestamps


def format_timestamp(moment: datetime) -> str:
    """``2024-01-15T10:30:00.000000``: UTC (naive datetimes are taken as UTC), microseconds, no zone."""
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC).replace(tzinfo=None)
    if moment.year >= 1000:  # isoformat is the same text, several times faster
        return moment.isoformat(timespec="microseconds")
    return moment.strftime(TIMESTAMP_FORMAT)


def timestamp_now() -> str:
    """The current UTC time in the seed format."""
    return format_timestamp(datetime.now(UTC))


def _epoch_timestamp(seconds: float) -> str:
    return format_timestamp(datetime.fromtimestamp(seconds, UTC))


_SKILL_LOADING_NAME = {"fr": "Chargement de la capacité : {name}", "en": "Loading skill: {name}"}


# ---------------------------------------------------------------- builders


def _part(activity_type: str, *, source: str, content: str | None = None, timestamp: str | None = None,
          tools: list | None = None, results: list | None = None, display_info: dict | None = None,
          technical_details: dict | None = None) -> dict:
    """An ``ActivityOutputPart`` as its JSON dict: all nine keys, in the model's order, ``None`` where unused.

    The builders below are the only callers and pass JSON values agentq made (a call's arguments, a result it
    encoded, a display info :func:`display_of` validated), so the dict is assembled directly; parts that come
    from elsewhere (an activity's own parts) go through the model in :func:`complete_part`."""
    return {
        "type": "activity", "activity_type": activity_type, "source": source, "content": content,
        "timestamp": timestamp or timestamp_now(), "tools": tools, "results": results,
        "display_info": display_info, "technical_details": technical_details,
    }


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)
    return value


def text_part(text: str, *, stream: bool = True) -> dict:
    """A ``text_output_stream`` part (``stream=False``: a history ``text_output`` part)."""
    return {"type": "text_output_stream" if stream else "text_output", "text": text}


def activity_part(content: str | None, *, source: str, locale: str = "en") -> dict:
    """General activity, e.g. job or tick started."""
    return _part("activity", source=source, content=content, display_info=display_of("activity", locale, None))


def job_part(content: str, *, kind: str, source: str, locale: str = "en") -> dict:
    """A job's milestone part (`job.queued`, `job.started`, `job.finished`): an agent job's says the agent works,
    a plan job's that its planned calls run."""
    display = plan_display_info(locale) if kind == "plan" else display_of("activity", locale, None)
    return _part("activity", source=source, content=content, display_info=display)


def plan_display_info(locale: str = "en") -> dict:
    """The display info of a plan job's milestone parts in `locale`."""
    return display_of("activity", locale, _PLAN_DISPLAY[language_of(locale)], default_id="plan")


_PLAN_DISPLAY = {
    "en": {"friendly_name": "📋 Plan", "description": "The job runs its planned calls", "icon": "📋",
           "category": "plan"},
    "fr": {"friendly_name": "📋 Plan", "description": "Le travail exécute ses appels prévus", "icon": "📋",
           "category": "plan"},
}


def approval_part(tool: str, *, source: str, locale: str = "en") -> dict:
    """A call held for a reviewer (`call.awaiting_approval`)."""
    content = (f"{tool} attend la décision d'un relecteur" if language_of(locale) == "fr"
               else f"{tool} waits for a reviewer's decision")
    return _part("approval", source=source, content=content, display_info=display_of("approval", locale, None))


def thought_part(content: str, *, source: str, locale: str = "en") -> dict:
    """The agent's reasoning (``_reasoningForCall``, latent thoughts)."""
    return _part("thought", source=source, content=content, display_info=display_of("thought", locale, None))


def thinking_part(content: str, *, source: str, locale: str = "en") -> dict:
    """The summary of the model's extended thinking: a ``thought`` part whose display says it is the model's
    thinking (``id`` "thinking")."""
    return _part("thought", source=source, content=content,
                 display_info=display_of("thought", locale, _THINKING_DISPLAY[language_of(locale)],
                                         default_id="thinking"))


_THINKING_DISPLAY = {
    "en": {"friendly_name": "💭 Thinking", "description": "The model's thinking (a summary)"},
    "fr": {"friendly_name": "💭 Réflexion du modèle", "description": "Le raisonnement du modèle (résumé)"},
}


def error_part(content: str, *, source: str, locale: str = "en") -> dict:
    """An error during processing."""
    return _part("error", source=source, content=content, display_info=display_of("error", locale, None))


def tool_request_part(*, call_id: str, name: str, arguments: dict, source: str, locale: str = "en",
                      display: dict | None = None) -> dict:
    """A tool is called; ``display`` is the tool's ``x-display``."""
    return _part("tool_request", source=source,
                 tools=[{"name": name, "arguments": arguments, "id": call_id}],
                 display_info=display_of("tool_request", locale, display, default_id=name))


def tool_result_part(*, call_id: str, name: str, content: Any, is_error: bool, source: str,
                     locale: str = "en", display: dict | None = None, technical: dict | None = None) -> dict:
    """A tool's result (non-string content is JSON-encoded); ``technical`` from :func:`technical_details`."""
    return _part("tool_result", source=source,
                 results=[{"name": name, "content": _as_text(content), "is_error": is_error, "call_id": call_id}],
                 display_info=display_of("tool_result", locale, display, default_id=name, is_error=is_error),
                 technical_details=technical)


def tool_call_part(request_part: dict, result_part: dict, *more_results: dict) -> dict:
    """Consolidate a ``tool_request`` and its result(s) into one ``tool_call`` (history form).

    Keeps the request's timestamp, source, content and display info (a default ``tool_request`` id becomes
    ``tool_call``); results are concatenated; technical details come from the (last) result that has them.
    """
    results = [result_part, *more_results]
    display = _call_display(request_part)
    technical = next((r["technical_details"] for r in reversed(results) if r.get("technical_details")),
                     request_part.get("technical_details"))
    content = request_part.get("content")
    if content is None:
        content = next((r.get("content") for r in results if r.get("content") is not None), None)
    return _part("tool_call", source=request_part["source"], content=content,
                 timestamp=request_part["timestamp"], tools=copy.deepcopy(request_part.get("tools")),
                 results=[x for r in results for x in (r.get("results") or [])] or None,
                 display_info=display, technical_details=copy.deepcopy(technical))


def _call_display(request_part: dict) -> dict | None:
    """A tool request's display info as its `tool_call`'s (a default `tool_request` id becomes `tool_call`)."""
    display = copy.deepcopy(request_part.get("display_info"))
    if display and display.get("id") == "tool_request":
        display["id"] = "tool_call"
    return display


def skill_loading_part(name: str, content: str | None, *, source: str, locale: str = "en",
                       display: dict | None = None) -> dict:
    """A skill (module) is loaded; its own ``x-display`` is nested as ``skill_display_info``.

    The display info follows the seed: ``id`` ``skill_loading_<name>``, ``friendly_name``
    "Chargement de la capacité : <name>" (English: "Loading skill: <name>"), icon 📥, category ``skills``,
    description the skill's own description when it has one.
    """
    lang = language_of(locale)
    info = default_display_info("skill_loading", lang)
    info.update(id=f"skill_loading_{name}", friendly_name=_SKILL_LOADING_NAME[lang].format(name=name))
    if display:
        if display.get("description"):
            info["description"] = display["description"]
        info["skill_display_info"] = {"id": f"skill:{name}", "friendly_name": name,
                                      **{k: v for k, v in display.items() if v is not None}}
    return _part("skill_loading", source=source, content=content,
                 display_info=DisplayInfo.model_validate(info).model_dump(mode="json"))


def technical_details(function_name: str, arguments: dict, raw_result: Any, started: float, finished: float,
                      status: Literal["success", "error"], error_message: str | None = None) -> dict:
    """Technical details of one execution; ``started``/``finished`` are epoch seconds (``time.time()``).

    ``timestamp`` is the finish time; a raw result that is not JSON is kept as its ``repr``.
    """
    return {
        "function_name": function_name, "arguments": arguments, "raw_result": _jsonable(raw_result),
        "execution_time_ms": round(max(finished - started, 0.0) * 1000, 3), "timestamp": _epoch_timestamp(finished),
        "status": status, "error_message": error_message,
    }


# ---------------------------------------------------------------- stripping


def strip_technical_details(part: Any) -> Any:
    """A deep copy without ``technical_details``: of a part, a list of parts, or a history message."""
    if isinstance(part, list):
        return [strip_technical_details(p) for p in part]
    if not isinstance(part, dict):
        return copy.deepcopy(part)
    stripped = {k: copy.deepcopy(v) for k, v in part.items() if k != "technical_details"}
    for key in ("parts", "activity_parts"):  # a history message
        if isinstance(stripped.get(key), list):
            stripped[key] = strip_technical_details(stripped[key])
    return stripped


__all__ = [
    "activity_part",
    "approval_part",
    "complete_part",
    "error_part",
    "format_timestamp",
    "job_part",
    "plan_display_info",
    "skill_loading_part",
    "strip_technical_details",
    "technical_details",
    "text_part",
    "thinking_part",
    "thought_part",
    "timestamp_now",
    "tool_call_part",
    "tool_request_part",
    "tool_result_part",
]


def complete_part(part: Any, *, source: str, locale: str) -> dict:
    """A part an activity emits (through its context), completed to the seed-004 shape: a text part as given;
    an activity part with `type`, `source`, `timestamp` and the default display info of its `activity_type` in
    the job's locale filled in where the activity left them out (its own display info keys win)."""
    try:
        if isinstance(part, dict) and part.get("type") in ("text_output", "text_output_stream"):
            return TextOutputPart.model_validate(part).model_dump(mode="json")
        if not isinstance(part, dict) or not isinstance(part.get("activity_type"), str):
            raise ValueError("expected an activity part with an activity_type (or a text part)")
        display = {**default_display_info(part["activity_type"], locale), **(part.get("display_info") or {})}
        full = {"source": source, "timestamp": timestamp_now(), **part, "type": "activity", "display_info": display}
        return ActivityOutputPart.model_validate(full).model_dump(mode="json")
    except ValueError as error:  # pydantic's ValidationError is a ValueError
        raise ProtocolError(f"not an event part: {error}") from None
