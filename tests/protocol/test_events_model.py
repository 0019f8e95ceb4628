"""The part builders' fast path gives exactly what the pydantic models give, and defers to them otherwise."""

from __future__ import annotations

import json
import math

import pytest
from pydantic import ValidationError

from agentq.protocol import events
from agentq.protocol.events import (
    ActivityOutputPart,
    DisplayInfo,
    TechnicalDetails,
    activity_part,
    error_part,
    technical_details,
    thought_part,
    tool_call_part,
    tool_request_part,
    tool_result_part,
)

SEARCH_DISPLAY = {"friendly_name": "🔍 Recherche web", "description": "Recherche", "icon": "🔍",
                  "category": "search"}
ARGUMENTS = [
    {},
    {"query": "q", "n": 3, "ratio": 0.5, "flag": True, "none": None},
    {"nested": {"a": [1, {"b": "é"}], "c": []}, "empty": {}},
]


def _model_part(part: dict) -> dict:
    """What the model makes of a part built by the fast path: it must be the part itself."""
    return ActivityOutputPart.model_validate(part).model_dump(mode="json")


@pytest.mark.parametrize("arguments", ARGUMENTS)
@pytest.mark.parametrize("display", [None, SEARCH_DISPLAY, {"icon": "x", "color": None, "extra": "kept"}])
@pytest.mark.parametrize("locale", ["en", "fr"])
def test_tool_parts_equal_the_models_dump(arguments, display, locale):
    request = tool_request_part(call_id="call_1", name="search", arguments=arguments, source="agentq",
                                locale=locale, display=display)
    assert request == _model_part(request)
    assert json.dumps(request) == json.dumps(_model_part(request))
    tech = technical_details("search", arguments, {"r": arguments}, 100.0, 100.25, "success")
    assert tech == TechnicalDetails.model_validate(tech).model_dump(mode="json")
    for is_error in (False, True):
        result = tool_result_part(call_id="call_1", name="search", content={"r": 1}, is_error=is_error,
                                  source="agentq", locale=locale, display=display, technical=tech)
        assert json.dumps(result) == json.dumps(_model_part(result))
    call = tool_call_part(request, result)
    assert json.dumps(call) == json.dumps(_model_part(call))


def test_simple_parts_equal_the_models_dump():
    for build in (activity_part, thought_part, error_part):
        for locale in ("en", "fr", "de"):
            part = build("x", source="agentq", locale=locale)
            assert json.dumps(part) == json.dumps(_model_part(part))


def test_values_that_are_not_plain_json_go_through_the_model():
    part = tool_request_part(call_id="c", name="n", arguments={"t": (1, 2), "inf": math.inf}, source="s")
    assert part["tools"][0]["arguments"] == {"t": [1, 2], "inf": None}
    tech = technical_details("f", {"x": (1,)}, math.nan, 1.0, 2.0, "success")
    assert tech["arguments"] == {"x": [1]} and tech["raw_result"] is None
    with pytest.raises(ValidationError):
        tool_request_part(call_id="c", name="n", arguments={}, source="s", display={"friendly_name": 3})
    with pytest.raises(ValidationError):
        tool_result_part(call_id="c", name="n", content="x", is_error=False, source="s",
                         technical={"function_name": "f"})
    with pytest.raises(ValidationError):
        events._part("tool_request", source="s", tools=[{"name": 1, "arguments": {}, "id": "c"}])


def test_parts_are_copies_of_their_inputs():
    arguments = {"list": [1, 2], "obj": {"a": 1}}
    part = tool_request_part(call_id="c", name="n", arguments=arguments, source="s")
    arguments["list"].append(3)
    arguments["obj"]["b"] = 2
    assert part["tools"][0]["arguments"] == {"list": [1, 2], "obj": {"a": 1}}
    first = tool_request_part(call_id="c", name="n", arguments={}, source="s", display=SEARCH_DISPLAY)
    first["display_info"]["icon"] = "changed"
    second = tool_request_part(call_id="c", name="n", arguments={}, source="s", display=SEARCH_DISPLAY)
    assert second["display_info"]["icon"] == "🔍"


def test_cached_display_info_equals_a_fresh_one():
    fresh = DisplayInfo.model_validate({**events.default_display_info("tool_request", "fr"), "id": "search",
                                        **SEARCH_DISPLAY}).model_dump(mode="json")
    for _ in range(3):
        assert events._display("tool_request", "fr", SEARCH_DISPLAY, default_id="search") == fresh
