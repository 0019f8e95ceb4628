"""One representation of a part: the builders' dicts are exactly what the seed-004 models validate and dump."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from agentq.protocol import display_info
from agentq.protocol.events import (
    activity_part,
    error_part,
    technical_details,
    thought_part,
    tool_call_part,
    tool_request_part,
    tool_result_part,
)
from agentq.protocol.part_models import ActivityOutputPart, DisplayInfo, TechnicalDetails

SEARCH_DISPLAY = {"friendly_name": "🔍 Recherche web", "description": "Recherche", "icon": "🔍",
                  "category": "search"}
ARGUMENTS = [
    {},
    {"query": "q", "n": 3, "ratio": 0.5, "flag": True, "none": None},
    {"nested": {"a": [1, {"b": "é"}], "c": []}, "empty": {}},
]


def _model_part(part: dict) -> dict:
    """What the model makes of a part a builder made: it must be the part itself."""
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


def test_an_invalid_display_is_rejected_by_the_model():
    with pytest.raises(ValidationError):
        tool_request_part(call_id="c", name="n", arguments={}, source="s", display={"friendly_name": 3})


def test_display_info_is_not_shared_between_parts():
    first = tool_request_part(call_id="c", name="n", arguments={}, source="s", display=SEARCH_DISPLAY)
    first["display_info"]["icon"] = "changed"
    second = tool_request_part(call_id="c", name="n", arguments={}, source="s", display=SEARCH_DISPLAY)
    assert second["display_info"]["icon"] == "🔍"


def test_a_raw_result_that_is_not_json_is_kept_as_its_repr():
    tech = technical_details("f", {"x": 1}, {1, 2}, 1.0, 2.0, "success")
    assert tech["raw_result"] == "{1, 2}"
    assert tech == TechnicalDetails.model_validate(tech).model_dump(mode="json")


def test_cached_display_info_equals_a_fresh_one():
    fresh = DisplayInfo.model_validate({**display_info.default_display_info("tool_request", "fr"), "id": "search",
                                        **SEARCH_DISPLAY}).model_dump(mode="json")
    for _ in range(3):
        assert display_info.display_of("tool_request", "fr", SEARCH_DISPLAY, default_id="search") == fresh
