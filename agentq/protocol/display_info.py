"""The display info of an event part: the defaults of each activity type in the job's locale (French or English),
and a tool's ``x-display`` laid over them (`display_of`, cached: a part is built for every call a worker runs).
"""

from __future__ import annotations

from typing import Any

from agentq.protocol.cache import LRU
from agentq.protocol.part_models import DisplayInfo

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
        "approval": ("✋ Validation", "Un appel attend la décision d'un relecteur", "✋", "approval"),
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
        "approval": ("✋ Approval", "A call waits for a reviewer's decision", "✋", "approval"),
        "diagram_generation": ("📊 Diagram generation", "A generated diagram saved as an image", "📊", "diagram"),
        "chart_generation": ("📊 Chart generation", "A generated chart saved as an image", "📊", "chart"),
    },
}
_DISPLAY_KEYS = ("friendly_name", "description", "icon", "category", "color")


def language_of(locale: str | None) -> str:
    """``"fr"``, ``"fr-FR"``, ``"fr_CA"`` → ``"fr"``; anything unknown → ``"en"``."""
    lang = (locale or "en").replace("_", "-").split("-")[0].lower()
    return lang if lang in _DEFAULTS else "en"


def default_display_info(activity_type: str, locale: str = "en", *, is_error: bool = False) -> dict:
    """Default display info of an activity type in the locale (English fallback; ⚙️ for unknown types)."""
    table = _DEFAULTS[language_of(locale)]
    key = f"{activity_type}:error" if is_error and f"{activity_type}:error" in table else activity_type
    name, description, icon, category = table.get(key, (activity_type, None, "⚙️", None))
    return {"id": activity_type, "friendly_name": name, "description": description,
            "icon": icon, "category": category, "color": None}


def display_of(activity_type: str, locale: str, display: dict | None, *, default_id: str | None = None,
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
        return (activity_type, language_of(locale), None, default_id, is_error)
    if type(display) is not dict:
        return None
    items = []
    for k, v in display.items():
        if type(k) is not str or not (v is None or type(v) is str):
            return None
        items.append((k, v))
    return (activity_type, language_of(locale), tuple(sorted(items)), default_id, is_error)


__all__ = ["default_display_info", "display_of", "language_of"]
