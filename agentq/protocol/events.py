"""Front-end event parts (seed 004): `ActivityOutputPart`, text parts, builders, default display info.

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

from pydantic import BaseModel, ConfigDict

from agentq.errors import ProtocolError
from agentq.protocol.cache import LRU

TIMESTAMP_FORMAT = "%Y-%m-%dT%H:%M:%S.%f"  # seed format: UTC, microseconds, no zone


class ToolCall(BaseModel):
    """One tool call of a `tool_request` / `tool_call` activity."""

    name: str
    arguments: dict[str, Any]
    id: str


class ToolResult(BaseModel):
    """One tool result of a `tool_result` / `tool_call` activity."""

    name: str
    content: str
    is_error: bool
    call_id: str


class DisplayInfo(BaseModel):
    """UI metadata; extra keys (e.g. ``skill_display_info``) are kept."""

    model_config = ConfigDict(extra="allow")

    id: str
    friendly_name: str
    description: str | None = None
    icon: str | None = None
    category: str | None = None
    color: str | None = None


class TechnicalDetails(BaseModel):
    """Raw execution data: stored with the job, never sent to a front end."""

    function_name: str
    arguments: dict[str, Any]
    raw_result: Any = None
    execution_time_ms: float
    timestamp: str
    status: Literal["success", "error"]
    error_message: str | None = None


class ActivityOutputPart(BaseModel):
    """An agent activity in a stream or history ``parts`` array (unknown keys are dropped)."""

    type: Literal["activity"] = "activity"
    activity_type: str
    source: str
    content: str | None = None
    timestamp: str
    tools: list[ToolCall] | None = None
    results: list[ToolResult] | None = None
    display_info: DisplayInfo | None = None
    technical_details: TechnicalDetails | None = None


class TextOutputPart(BaseModel):
    """Text: ``text_output_stream`` while streaming, ``text_output`` in history."""

    type: Literal["text_output", "text_output_stream"]
    text: str


def parse_part(part: dict) -> ActivityOutputPart | TextOutputPart:
    """Validate a part dict into its model (by ``type``)."""
    if part.get("type") == "activity":
        return ActivityOutputPart.model_validate(part)
    return TextOutputPart.model_validate(part)


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


# ---------------------------------------------------------------- default display info

# activity type -> (friendly_name, description, icon, category); "tool_result:error" is a failed result.
_DEFAULTS: dict[str, dict[str, tuple[str, str | None, str, str]]] = {
    "fr": {
        "activity": ("🧠 Raisonnement", "L'agent travaille", "🧠", "reasoning"),
        "thought": ("💭 Réflexion", "Raisonnement de l'agent", "💭", "reasoning"),
        "tool_request": ("🔧 Appel d'outil", "L'agent appelle un outil", "🔧", "tool"),
        "tool_call": ("🔧 Appel d'outil", "L'agent appelle un outil", "🔧", "tool"),
        "tool_result": ("✅ Résultat", "Résultat de l'outil", "✅", "tool"),
        "tool_result:error": ("❌ Erreur", "Une erreur s'est produite", "❌", "tool"),
        "error": ("❌ Erreur", "Une erreur s'est produite", "❌", "error"),
        "skill_loading": ("📥 Chargement de capacité", "Chargement d'une capacité", "📥", "skills"),
        "diagram_generation": (
            "📊 Génération de diagramme", "Enregistrement en image d'un diagramme généré", "📊", "diagram"),
        "chart_generation": (
            "📊 Génération de graphique", "Enregistrement en image d'un graphique généré", "📊", "chart"),
    },
    "en": {
        "activity": ("🧠 Reasoning", "The agent is working", "🧠", "reasoning"),
        "thought": ("💭 Thought", "The agent's reasoning", "💭", "reasoning"),
        "tool_request": ("🔧 Tool call", "The agent calls a tool", "🔧", "tool"),
        "tool_call": ("🔧 Tool call", "The agent calls a tool", "🔧", "tool"),
        "tool_result": ("✅ Result", "The tool's result", "✅", "tool"),
        "tool_result:error": ("❌ Error", "An error occurred", "❌", "tool"),
        "error": ("❌ Error", "An error occurred", "❌", "error"),
        "skill_loading": ("📥 Skill loading", "A skill is loaded", "📥", "skills"),
        "diagram_generation": ("📊 Diagram generation", "A generated diagram saved as an image", "📊", "diagram"),
        "chart_generation": ("📊 Chart generation", "A generated chart saved as an image", "📊", "chart"),
    },
}
_SKILL_LOADING_NAME = {"fr": "Chargement de la capacité : {name}", "en": "Loading skill: {name}"}
_DISPLAY_KEYS = ("friendly_name", "description", "icon", "category", "color")


def _language(locale: str | None) -> str:
    """``"fr"``, ``"fr-FR"``, ``"fr_CA"`` → ``"fr"``; anything unknown → ``"en"``."""
    lang = (locale or "en").replace("_", "-").split("-")[0].lower()
    return lang if lang in _DEFAULTS else "en"


def default_display_info(activity_type: str, locale: str = "en", *, is_error: bool = False) -> dict:
    """Default display info of an activity type in the locale (English fallback; ⚙️ for unknown types)."""
    table = _DEFAULTS[_language(locale)]
    key = f"{activity_type}:error" if is_error and f"{activity_type}:error" in table else activity_type
    name, description, icon, category = table.get(key, (activity_type, None, "⚙️", None))
    return {"id": activity_type, "friendly_name": name, "description": description,
            "icon": icon, "category": category, "color": None}


def _display(activity_type: str, locale: str, display: dict | None, *, default_id: str | None = None,
             is_error: bool = False) -> dict:
    """Defaults for the type, overridden by the non-null keys of an ``x-display`` dict.

    With a display the ``id`` defaults to ``default_id`` (the tool name). For a failed result the default
    ``friendly_name`` and ``icon`` (❌) are kept so the failure stays visible.

    Results are cached (a part is built for every call a worker runs): displays whose values are all
    strings or null are keyed by their items; any other display is validated anew each time.
    """
    key = _display_key(activity_type, locale, display, default_id, is_error)
    if key is not None:
        cached = _DISPLAYS.get(key)
        if cached is not None:
            return dict(cached)  # values are str or None: a shallow copy is a full copy
    info = default_display_info(activity_type, locale, is_error=is_error)
    if display:
        info["id"] = default_id or activity_type
        keep = ("friendly_name", "icon") if is_error else ()
        info.update({k: v for k, v in display.items() if v is not None and k not in keep})
    result = DisplayInfo.model_validate(info).model_dump(mode="json")
    if key is not None:
        _DISPLAYS.put(key, dict(result))
    return result


_DISPLAYS: LRU[tuple, dict] = LRU(4096)


# a cache key only for arguments of exactly the JSON types it can hold: one check per argument
def _display_key(activity_type: Any, locale: Any, display: Any, default_id: Any, is_error: Any) -> tuple | None:
    if not (type(activity_type) is str and (locale is None or type(locale) is str)
            and (default_id is None or type(default_id) is str) and type(is_error) is bool):
        return None
    if not display:
        return (activity_type, _language(locale), None, default_id, is_error)
    if type(display) is not dict:
        return None
    items = []
    for k, v in display.items():
        if type(k) is not str or not (v is None or type(v) is str):
            return None
        items.append((k, v))
    return (activity_type, _language(locale), tuple(sorted(items)), default_id, is_error)


# ---------------------------------------------------------------- builders


def _part(activity_type: str, *, source: str, content: str | None = None, timestamp: str | None = None,
          tools: list | None = None, results: list | None = None, display_info: dict | None = None,
          technical_details: dict | None = None) -> dict:
    """An ``ActivityOutputPart`` as its JSON dict: all nine keys, in the model's order, ``None`` where unused.

    The builders below are the only callers and pass JSON values agentq made (a call's arguments, a result it
    encoded, a display info :func:`_display` validated), so the dict is assembled directly; parts that come
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
    return _part("activity", source=source, content=content, display_info=_display("activity", locale, None))


def thought_part(content: str, *, source: str, locale: str = "en") -> dict:
    """The agent's reasoning (``_reasoningForCall``, latent thoughts)."""
    return _part("thought", source=source, content=content, display_info=_display("thought", locale, None))


def thinking_part(content: str, *, source: str, locale: str = "en") -> dict:
    """The summary of the model's extended thinking: a ``thought`` part whose display says it is the model's
    thinking (``id`` "thinking")."""
    return _part("thought", source=source, content=content,
                 display_info=_display("thought", locale, _THINKING_DISPLAY[_language(locale)], default_id="thinking"))


_THINKING_DISPLAY = {
    "en": {"friendly_name": "💭 Thinking", "description": "The model's thinking (a summary)"},
    "fr": {"friendly_name": "💭 Réflexion du modèle", "description": "Le raisonnement du modèle (résumé)"},
}


def error_part(content: str, *, source: str, locale: str = "en") -> dict:
    """An error during processing."""
    return _part("error", source=source, content=content, display_info=_display("error", locale, None))


def tool_request_part(*, call_id: str, name: str, arguments: dict, source: str, locale: str = "en",
                      display: dict | None = None) -> dict:
    """A tool is called; ``display`` is the tool's ``x-display``."""
    return _part("tool_request", source=source,
                 tools=[{"name": name, "arguments": arguments, "id": call_id}],
                 display_info=_display("tool_request", locale, display, default_id=name))


def tool_result_part(*, call_id: str, name: str, content: Any, is_error: bool, source: str,
                     locale: str = "en", display: dict | None = None, technical: dict | None = None) -> dict:
    """A tool's result (non-string content is JSON-encoded); ``technical`` from :func:`technical_details`."""
    return _part("tool_result", source=source,
                 results=[{"name": name, "content": _as_text(content), "is_error": is_error, "call_id": call_id}],
                 display_info=_display("tool_result", locale, display, default_id=name, is_error=is_error),
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
    lang = _language(locale)
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
    "ActivityOutputPart",
    "DisplayInfo",
    "TechnicalDetails",
    "TextOutputPart",
    "ToolCall",
    "ToolResult",
    "activity_part",
    "complete_part",
    "default_display_info",
    "error_part",
    "format_timestamp",
    "parse_part",
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
