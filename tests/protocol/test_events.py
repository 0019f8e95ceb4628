"""Tests of agentq.protocol.events against seed 004 (examples copied verbatim, correctly decoded UTF-8)."""

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest
from pydantic import ValidationError

from agentq.protocol.display_info import default_display_info
from agentq.protocol.events import (
    activity_part,
    error_part,
    format_timestamp,
    skill_loading_part,
    strip_technical_details,
    technical_details,
    text_part,
    thought_part,
    timestamp_now,
    tool_call_part,
    tool_request_part,
    tool_result_part,
)
from agentq.protocol.part_models import ActivityOutputPart, DisplayInfo, TechnicalDetails, TextOutputPart, parse_part

# Every JSON example of an ActivityOutputPart in the guide, in document order.
SEED_ACTIVITY_EXAMPLES = [
    r"""
{
  "type": "activity",
  "activity_type": "skill_loading",
  "source": "socrate",
  "content": "Capacité 'chart' chargée avec succès.\n\nInstructions chargées:\n...",
  "timestamp": "2024-01-15T10:30:00.000000",
  "display_info": {
    "id": "skill_loading_chart",
    "friendly_name": "Chargement de la capacité : chart",
    "description": "Affichage, génération et enregistrement en image des graphiques Chart.js",
    "icon": "📥",
    "category": "skills"
  }
}
""",
    r"""
{
  "type": "activity",
  "activity_type": "diagram_generation",
  "source": "james",
  "content": "project_timeline.png généré et enregistré en PNG avec le contenu suivant :\n\ngantt\n    title Project Timeline...",
  "timestamp": "2024-01-15T10:30:00.000000",
  "display_info": {
    "id": "diagram_gantt",
    "friendly_name": "Génération de diagramme Gantt",
    "description": "Enregistrement en image d'un diagramme généré",
    "icon": "📊",
    "category": "diagram"
  }
}
""",  # noqa: E501  (copied verbatim)
    r"""
{
  "type": "activity",
  "activity_type": "chart_generation",
  "source": "socrate",
  "content": "sales_chart.png généré et enregistré en PNG avec le contenu suivant :\n\n{\"type\": \"bar\", ...}",
  "timestamp": "2024-01-15T10:30:00.000000",
  "display_info": {
    "id": "chart_bar",
    "friendly_name": "Génération de graphique barres",
    "description": "Enregistrement en image d'un graphique généré",
    "icon": "📊",
    "category": "chart"
  }
}
""",
    r"""
{
  "type": "activity",
  "activity_type": "tool_request",
  "source": "llamaindex_agent",
  "content": null,
  "timestamp": "2024-01-15T10:30:00.000000",
  "tools": [
    {
      "name": "search_web",
      "arguments": {"query": "weather in Paris"},
      "id": "call_abc123"
    }
  ],
  "results": null,
  "display_info": {
    "id": "tool_request",
    "friendly_name": "🔍 Recherche web",
    "description": "Recherche d'informations sur le web",
    "icon": "🔍",
    "category": "search"
  }
}
""",
    r"""
{
  "type": "activity",
  "activity_type": "tool_result",
  "source": "llamaindex_agent",
  "content": null,
  "timestamp": "2024-01-15T10:30:01.500000",
  "tools": null,
  "results": [
    {
      "name": "search_web",
      "content": "Current weather in Paris: 18°C, partly cloudy",
      "is_error": false,
      "call_id": "call_abc123"
    }
  ],
  "display_info": {
    "id": "tool_result",
    "friendly_name": "✅ Résultat de recherche",
    "description": "Résultat de la recherche web",
    "icon": "✅",
    "category": "search"
  }
}
""",
    r"""
{
  "type": "activity",
  "activity_type": "thought",
  "source": "llamaindex_agent",
  "content": "I need to search for the current weather before providing an answer.",
  "timestamp": "2024-01-15T10:29:59.000000",
  "tools": null,
  "results": null,
  "display_info": {
    "id": "thought",
    "friendly_name": "💭 Réflexion",
    "description": "Raisonnement de l'agent",
    "icon": "💭",
    "category": "reasoning"
  }
}
""",
    r"""
{
  "type": "activity",
  "activity_type": "error",
  "source": "llamaindex_agent",
  "content": "Failed to connect to external API: timeout after 30s",
  "timestamp": "2024-01-15T10:30:05.000000",
  "tools": null,
  "results": null,
  "display_info": {
    "id": "error",
    "friendly_name": "❌ Erreur",
    "description": "Une erreur s'est produite",
    "icon": "❌",
    "category": "error"
  }
}
""",
]

# "Standard Display Info" and "Display Info for Skills".
SEED_DISPLAY_EXAMPLES = [
    r"""
{
  "id": "tool_request",
  "friendly_name": "🔧 Appel d'outil",
  "description": "L'agent appelle un outil",
  "icon": "🔧",
  "category": "tool",
  "color": null
}
""",
    r"""
{
  "id": "tool_request",
  "friendly_name": "⬇️ Chargement de compétence",
  "description": "Charge une compétence spécifique",
  "icon": "⬇️",
  "category": "skills",
  "skill_display_info": {
    "id": "skill:chart",
    "friendly_name": "📊 Graphiques",
    "description": "Affichage, génération et enregistrement en image des graphiques Chart.js",
    "icon": "📊",
    "category": "skill"
  }
}
""",
]

# "Common Display Info Values": activity type (":error" = failed result) -> (friendly_name, icon).
SEED_FRENCH_TABLE = {
    "activity": ("🧠 Raisonnement", "🧠"),
    "tool_request": ("🔧 Appel d'outil", "🔧"),
    "tool_result": ("✅ Résultat", "✅"),
    "tool_result:error": ("❌ Erreur", "❌"),
    "thought": ("💭 Réflexion", "💭"),
    "error": ("❌ Erreur", "❌"),
}


PART_KEYS = {"type", "activity_type", "source", "content", "timestamp", "tools", "results", "display_info",
             "technical_details"}
DISPLAY_KEYS = {"id", "friendly_name", "description", "icon", "category", "color"}
SEARCH_DISPLAY = {"friendly_name": "🔍 Recherche web", "description": "Recherche d'informations sur le web",
                  "icon": "🔍", "category": "search"}


# ---------------------------------------------------------------- seed examples


@pytest.mark.parametrize("raw", SEED_ACTIVITY_EXAMPLES)
def test_seed_activity_examples_round_trip(raw):
    example = json.loads(raw)
    part = ActivityOutputPart.model_validate(example)
    dumped = part.model_dump(mode="json")
    assert set(dumped) == PART_KEYS
    # every key the example gives comes back unchanged; display_info gains only the missing nulls
    for key, value in example.items():
        if key == "display_info":
            assert {k: v for k, v in dumped[key].items() if k in value} == value
            assert dumped[key]["color"] is None
        else:
            assert dumped[key] == value
    assert ActivityOutputPart.model_validate(dumped) == part


def test_seed_examples_lack_color_and_still_parse():
    missing = [json.loads(raw) for raw in SEED_ACTIVITY_EXAMPLES if "color" not in json.loads(raw)["display_info"]]
    assert len(missing) == len(SEED_ACTIVITY_EXAMPLES)
    for example in missing:
        assert ActivityOutputPart.model_validate(example).display_info.color is None


@pytest.mark.parametrize("raw", SEED_DISPLAY_EXAMPLES)
def test_seed_display_info_examples_round_trip(raw):
    example = json.loads(raw)
    info = DisplayInfo.model_validate(example)
    dumped = info.model_dump(mode="json")
    assert {k: v for k, v in dumped.items() if k in example} == example
    assert set(dumped) >= DISPLAY_KEYS


def test_skill_display_info_extra_is_kept():
    example = json.loads(SEED_DISPLAY_EXAMPLES[1])
    dumped = DisplayInfo.model_validate(example).model_dump(mode="json")
    assert dumped["skill_display_info"]["id"] == "skill:chart"
    assert dumped["skill_display_info"]["friendly_name"] == "📊 Graphiques"


def test_seed_emoji_and_french_text_are_exact():
    thought = json.loads(SEED_ACTIVITY_EXAMPLES[5])
    assert thought["display_info"]["friendly_name"] == "💭 Réflexion"
    result = json.loads(SEED_ACTIVITY_EXAMPLES[4])
    assert result["results"][0]["content"] == "Current weather in Paris: 18°C, partly cloudy"


def test_activity_part_validation():
    with pytest.raises(ValidationError):
        ActivityOutputPart.model_validate({"type": "text", "activity_type": "x", "source": "s", "timestamp": "t"})
    with pytest.raises(ValidationError):
        ActivityOutputPart.model_validate({"activity_type": "x", "source": "s"})  # no timestamp
    with pytest.raises(ValidationError):
        TechnicalDetails.model_validate({"function_name": "f", "arguments": {}, "execution_time_ms": 1,
                                         "timestamp": "t", "status": "maybe"})


def test_text_parts():
    assert text_part("hi") == {"type": "text_output_stream", "text": "hi"}
    assert text_part("hi", stream=False) == {"type": "text_output", "text": "hi"}
    assert isinstance(parse_part(text_part("hi")), TextOutputPart)
    assert isinstance(parse_part(json.loads(SEED_ACTIVITY_EXAMPLES[0])), ActivityOutputPart)
    with pytest.raises(ValidationError):
        TextOutputPart.model_validate({"type": "text", "text": "x"})


# ---------------------------------------------------------------- timestamps


def test_timestamp_format():
    assert format_timestamp(datetime(2024, 1, 15, 10, 30)) == "2024-01-15T10:30:00.000000"
    paris = timezone(timedelta(hours=1))
    assert format_timestamp(datetime(2024, 1, 15, 11, 30, 1, 500000, tzinfo=paris)) == "2024-01-15T10:30:01.500000"
    now = timestamp_now()
    parsed = datetime.strptime(now, "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=UTC)
    assert abs((datetime.now(UTC) - parsed).total_seconds()) < 5


# ---------------------------------------------------------------- default display info


@pytest.mark.parametrize("key", sorted(SEED_FRENCH_TABLE))
def test_french_defaults_match_the_seed_table(key):
    activity_type, _, error = key.partition(":")
    info = default_display_info(activity_type, "fr", is_error=bool(error))
    assert (info["friendly_name"], info["icon"]) == SEED_FRENCH_TABLE[key]
    assert info["id"] == activity_type
    assert set(info) == DISPLAY_KEYS


def test_french_standard_display_info_is_exact():
    assert default_display_info("tool_request", "fr") == json.loads(SEED_DISPLAY_EXAMPLES[0])
    assert default_display_info("thought", "fr") == {
        "id": "thought", "friendly_name": "💭 Réflexion", "description": "Raisonnement de l'agent",
        "icon": "💭", "category": "reasoning", "color": None}
    assert default_display_info("error", "fr") == {
        "id": "error", "friendly_name": "❌ Erreur", "description": "Une erreur s'est produite",
        "icon": "❌", "category": "error", "color": None}
    skill = default_display_info("skill_loading", "fr")
    assert (skill["icon"], skill["category"]) == ("📥", "skills")


def test_english_defaults():
    expected = {
        ("activity", False): ("🧠 Reasoning", "🧠"),
        ("tool_request", False): ("🔧 Tool call", "🔧"),
        ("tool_result", False): ("✅ Result", "✅"),
        ("tool_result", True): ("❌ Error", "❌"),
        ("thought", False): ("💭 Thought", "💭"),
        ("error", False): ("❌ Error", "❌"),
        ("skill_loading", False): ("📥 Skill loading", "📥"),
    }
    for (activity_type, is_error), (name, icon) in expected.items():
        info = default_display_info(activity_type, "en", is_error=is_error)
        assert (info["friendly_name"], info["icon"]) == (name, icon)
        assert info["description"] and info["category"]
    assert default_display_info("tool_request")["category"] == "tool"


def test_locale_variants_and_fallback():
    assert default_display_info("thought", "fr-FR") == default_display_info("thought", "fr")
    assert default_display_info("thought", "fr_CA") == default_display_info("thought", "fr")
    assert default_display_info("thought", "de") == default_display_info("thought", "en")
    assert default_display_info("thought", None) == default_display_info("thought", "en")


def test_unknown_activity_type():
    assert default_display_info("progress", "fr") == {
        "id": "progress", "friendly_name": "progress", "description": None, "icon": "⚙️",
        "category": None, "color": None}
    # is_error only changes types that have an error variant
    assert default_display_info("thought", is_error=True) == default_display_info("thought")


# ---------------------------------------------------------------- builders


def test_simple_builders_have_all_keys_and_defaults():
    for build, activity_type in ((activity_part, "activity"), (thought_part, "thought"), (error_part, "error")):
        part = build("something", source="agentq", locale="fr")
        assert set(part) == PART_KEYS
        assert part["type"] == "activity" and part["activity_type"] == activity_type
        assert part["content"] == "something" and part["source"] == "agentq"
        assert part["tools"] is None and part["results"] is None and part["technical_details"] is None
        assert part["display_info"] == default_display_info(activity_type, "fr")
        ActivityOutputPart.model_validate(part)
    assert activity_part("started", source="agentq")["display_info"]["friendly_name"] == "🧠 Reasoning"


def test_tool_request_part_defaults():
    part = tool_request_part(call_id="call_1", name="search_web", arguments={"query": "q"}, source="agentq")
    assert part["tools"] == [{"name": "search_web", "arguments": {"query": "q"}, "id": "call_1"}]
    assert part["display_info"] == default_display_info("tool_request")
    assert part["content"] is None and part["results"] is None


def test_x_display_overrides_defaults():
    part = tool_request_part(call_id="call_1", name="search_web", arguments={}, source="agentq", locale="fr",
                             display={**SEARCH_DISPLAY, "color": "#0af"})
    assert part["display_info"] == {"id": "search_web", **SEARCH_DISPLAY, "color": "#0af"}
    partial = tool_request_part(call_id="c", name="search_web", arguments={}, source="s", locale="fr",
                                display={"icon": "🔍", "description": None})
    assert partial["display_info"] == {**default_display_info("tool_request", "fr"), "id": "search_web",
                                       "icon": "🔍"}
    explicit_id = tool_request_part(call_id="c", name="t", arguments={}, source="s", display={"id": "x"})
    assert explicit_id["display_info"]["id"] == "x"


def test_tool_result_part():
    tech = technical_details("search_web", {"query": "q"}, {"temp": 18}, 100.0, 101.5, "success")
    part = tool_result_part(call_id="call_1", name="search_web", content="18°C", is_error=False,
                            source="agentq", locale="fr", technical=tech)
    assert part["results"] == [{"name": "search_web", "content": "18°C", "is_error": False, "call_id": "call_1"}]
    assert part["display_info"]["friendly_name"] == "✅ Résultat"
    assert part["technical_details"] == tech
    assert part["tools"] is None


def test_tool_result_content_is_text_and_error_keeps_failure_visible():
    part = tool_result_part(call_id="c", name="t", content={"a": "é"}, is_error=True, source="s",
                            display=SEARCH_DISPLAY)
    assert part["results"][0]["content"] == '{"a": "é"}'
    info = part["display_info"]
    assert (info["friendly_name"], info["icon"]) == ("❌ Error", "❌")
    assert (info["id"], info["category"]) == ("t", "search")
    ok = tool_result_part(call_id="c", name="t", content="x", is_error=False, source="s", display=SEARCH_DISPLAY)
    assert ok["display_info"]["friendly_name"] == "🔍 Recherche web"


def test_technical_details():
    tech = technical_details("f", {"x": 1}, object(), 1705314600.0, 1705314601.25, "error", "boom")
    assert tech["execution_time_ms"] == 1250.0
    assert tech["timestamp"] == "2024-01-15T10:30:01.250000"
    assert tech["status"] == "error" and tech["error_message"] == "boom"
    assert tech["raw_result"].startswith("<object")
    TechnicalDetails.model_validate(tech)


def test_tool_call_part_consolidates():
    request = tool_request_part(call_id="call_1", name="search_web", arguments={"q": 1}, source="agentq",
                                display=SEARCH_DISPLAY)
    request["timestamp"] = "2024-01-15T10:30:00.000000"
    tech = technical_details("search_web", {"q": 1}, "raw", 0.0, 0.002, "success")
    result = tool_result_part(call_id="call_1", name="search_web", content="ok", is_error=False,
                              source="agentq", technical=tech)
    result["timestamp"] = "2024-01-15T10:30:01.500000"
    call = tool_call_part(request, result)
    assert set(call) == PART_KEYS
    assert call["activity_type"] == "tool_call"
    assert call["timestamp"] == "2024-01-15T10:30:00.000000"
    assert call["tools"] == request["tools"] and call["results"] == result["results"]
    assert call["display_info"] == request["display_info"]
    assert call["technical_details"] == tech
    ActivityOutputPart.model_validate(call)


def test_tool_call_part_default_display_id():
    request = tool_request_part(call_id="c", name="t", arguments={}, source="s", locale="fr")
    result = tool_result_part(call_id="c", name="t", content="x", is_error=False, source="s")
    call = tool_call_part(request, result)
    assert call["display_info"] == {**default_display_info("tool_request", "fr"), "id": "tool_call"}
    assert call["technical_details"] is None
    assert request["display_info"]["id"] == "tool_request"  # inputs are not modified


def test_skill_loading_part_follows_seed():
    part = skill_loading_part(
        "chart", "Capacité 'chart' chargée avec succès.", source="socrate", locale="fr",
        display={"friendly_name": "📊 Graphiques", "icon": "📊", "category": "skill",
                 "description": "Affichage, génération et enregistrement en image des graphiques Chart.js"})
    seed = json.loads(SEED_ACTIVITY_EXAMPLES[0])["display_info"]
    info = part["display_info"]
    assert {k: info[k] for k in seed} == seed
    assert info["skill_display_info"]["id"] == "skill:chart"
    assert info["skill_display_info"]["friendly_name"] == "📊 Graphiques"
    bare = skill_loading_part("chart", None, source="s")
    assert bare["display_info"]["friendly_name"] == "Loading skill: chart"
    assert bare["display_info"]["description"] == "A skill is loaded"
    assert "skill_display_info" not in bare["display_info"]


# ---------------------------------------------------------------- stripping


def _with_details():
    tech = technical_details("t", {}, "raw", 0.0, 1.0, "success")
    return tool_result_part(call_id="c", name="t", content="x", is_error=False, source="s", technical=tech)


def test_strip_technical_details_returns_a_copy():
    part = _with_details()
    stripped = strip_technical_details(part)
    assert "technical_details" not in stripped
    assert set(stripped) == PART_KEYS - {"technical_details"}
    assert part["technical_details"] is not None
    stripped["results"][0]["content"] = "changed"
    assert part["results"][0]["content"] == "x"


def test_strip_technical_details_on_text_lists_and_messages():
    text = text_part("hi")
    assert strip_technical_details(text) == text
    parts = [text, _with_details()]
    assert [("technical_details" in p) for p in strip_technical_details(parts)] == [False, False]
    message = {"role": "assistant", "parts": parts, "activity_parts": [{"type": "x", "technical_details": {}}]}
    stripped = strip_technical_details(message)
    assert all("technical_details" not in p for p in stripped["parts"] + stripped["activity_parts"])
    # user data that happens to use the key is left alone
    nested = tool_request_part(call_id="c", name="t", arguments={"technical_details": 1}, source="s")
    assert strip_technical_details(nested)["tools"][0]["arguments"] == {"technical_details": 1}
