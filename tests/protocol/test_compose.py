"""Composition (docs/protocol.md#activities): property order, consts, nullable _output, solution shape, determinism,
caching."""

from __future__ import annotations

import copy
import json
import time

import pytest

from agentq.errors import DuplicateRegistrationError, ToolSchemaError
from agentq.protocol.compose import (
    REASONING_FOR_CALL,
    clear_cache,
    compose,
    compose_tool,
    composed_tools,
    solution_bytes,
)
from agentq.protocol.tools import ToolRegistry
from tests.protocol.test_tools import sentiment_analysis, tool, weather_check


def rich_tool() -> dict:
    """A tool whose meta fields and parameters are interleaved, to check the composed order."""
    return {
        "type": "object",
        "description": "Books a room.",
        "x-display": {"friendly_name": "Book a room", "icon": "bed"},
        "properties": {
            "city": {"type": "string"},
            "_outputPath": {"type": "string", "pattern": "^†"},
            "_tool": {"type": "string", "const": "bookRoom"},
            "nights": {"type": "integer", "minimum": 1},
            "_output": {"type": "object", "properties": {"ref": {"type": "string"}}},
            "_scopes": {"type": "array", "items": {"enum": ["state", "input"]}},
            "guests": {"type": "array", "items": {"type": "string"}},
            "_outputMethod": {"enum": ["set", "merge"]},
        },
        "required": ["city", "nights"],
        "additionalProperties": False,
    }


@pytest.fixture(autouse=True)
def _fresh_cache():
    clear_cache()
    yield
    clear_cache()


# -------------------------------------------------------------------------------------- compose_tool


def test_composed_property_order() -> None:
    composed = compose_tool(rich_tool(), {"bookRoom"})
    assert list(composed["properties"]) == [
        "_tool", "_activity", "_reasoningForCall",
        "_outputPath", "_scopes", "_outputMethod",
        "city", "nights", "guests",
        "_output",
    ]


def test_composed_consts_nullable_output_and_required() -> None:
    composed = compose_tool(weather_check(), ["weatherCheck"])
    props = composed["properties"]
    assert props["_tool"] == {"type": "string", "const": "weatherCheck"}
    assert props["_activity"] == {"type": "string", "const": "weatherCheck"}
    assert props["_reasoningForCall"] == REASONING_FOR_CALL
    assert props["_output"] == {"anyOf": [weather_check()["properties"]["_output"], {"type": "null"}]}
    assert composed["required"] == ["_tool", "location"]
    assert composed["description"] == "Gets the current weather for a location."


def test_top_level_keywords_kept_in_order() -> None:
    composed = compose_tool(rich_tool(), ())
    assert list(composed) == ["type", "description", "x-display", "properties", "required", "additionalProperties"]
    assert composed["x-display"] == {"friendly_name": "Book a room", "icon": "bed"}
    assert composed["additionalProperties"] is False
    assert composed["required"] == ["_tool", "city", "nights"]


def test_required_added_when_tool_has_none() -> None:
    composed = compose_tool(sentiment_analysis(), ())
    assert composed["required"] == ["_tool"]
    assert list(composed)[:3] == ["type", "description", "properties"]
    assert list(composed).index("required") == list(composed).index("properties") + 1


def test_activity_resolution() -> None:
    # (2) same-name rule
    assert compose_tool(weather_check(), {"weatherCheck"})["properties"]["_activity"]["const"] == "weatherCheck"
    # (3) latent fallback
    assert compose_tool(weather_check(), {"other"})["properties"]["_activity"]["const"] == ""
    assert compose_tool(weather_check())["properties"]["_activity"]["const"] == ""
    # (1) explicit non-empty _activity wins, live or not
    explicit = weather_check()
    explicit["properties"]["_activity"] = {"type": "string", "const": "weatherApi"}
    composed = compose_tool(explicit, {"weatherCheck"})
    assert composed["properties"]["_activity"] == {"type": "string", "const": "weatherApi"}
    assert compose_tool(explicit, ())["properties"]["_activity"]["const"] == "weatherApi"
    # an explicit empty _activity is not "non-empty": the usual rules apply
    explicit["properties"]["_activity"] = {"const": ""}
    assert compose_tool(explicit, {"weatherCheck"})["properties"]["_activity"]["const"] == "weatherCheck"


def test_tool_defined_reasoning_is_kept_in_third_place() -> None:
    schema = tool("t", _reasoningForCall={"type": "string", "description": "Say why."}, x={"type": "string"})
    composed = compose_tool(schema, ())
    assert list(composed["properties"])[:3] == ["_tool", "_activity", "_reasoningForCall"]
    assert composed["properties"]["_reasoningForCall"]["description"] == "Say why."


def test_compose_tool_does_not_touch_its_input() -> None:
    schema = rich_tool()
    original = copy.deepcopy(schema)
    composed = compose_tool(schema, ())
    composed["properties"]["city"]["type"] = "number"
    composed["x-display"]["icon"] = "x"
    assert schema == original


def test_compose_tool_needs_tool_and_output() -> None:
    with pytest.raises(ToolSchemaError, match="_tool"):
        compose_tool({"type": "object", "properties": {}}, ())
    bad = weather_check()
    del bad["properties"]["_output"]
    with pytest.raises(ToolSchemaError, match="tool 'weatherCheck' has no _output"):
        compose_tool(bad, ())


# ------------------------------------------------------------------------------------------ solution


def _registry(*schemas: dict) -> ToolRegistry:
    registry = ToolRegistry()
    for schema in schemas:
        registry.register(schema["properties"]["_tool"]["const"], schema)
    return registry


def test_solution_shape_agent_without_output() -> None:
    solution = compose(_registry(weather_check(), sentiment_analysis()), {"weatherCheck"})
    assert list(solution) == ["type", "properties", "required"]
    assert solution["type"] == "object"
    assert solution["required"] == ["calls", "output"]
    assert list(solution["properties"]) == ["calls", "output"]
    calls = solution["properties"]["calls"]
    assert calls["type"] == "array" and list(calls["items"]) == ["anyOf"]
    names = [t["properties"]["_tool"]["const"] for t in calls["items"]["anyOf"]]
    assert names == ["sentimentAnalysis", "weatherCheck"]
    activities = [t["properties"]["_activity"]["const"] for t in calls["items"]["anyOf"]]
    assert activities == ["", "weatherCheck"]
    assert solution["properties"]["output"] == {"anyOf": [{"type": "string"}, {"type": "null"}]}
    assert [t["properties"]["_tool"]["const"] for t in composed_tools(solution)] == names


def test_solution_output_forms() -> None:
    registry = _registry(weather_check())
    output = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    assert compose(registry, (), output)["properties"]["output"] == {"anyOf": [output, {"type": "null"}]}
    assert compose(registry, (), output, plan=True)["properties"]["output"] == {"anyOf": [output, {"type": "null"}]}
    assert compose(registry, (), None, plan=True)["properties"]["output"] == {"type": "null"}
    assert compose(registry, (), None, plan=False)["properties"]["output"] == {
        "anyOf": [{"type": "string"}, {"type": "null"}]
    }


def test_empty_tools() -> None:
    solution = compose([], ())
    # no empty anyOf (not a valid Draft 2020-12 schema, refused by the Messages API): an array that stays empty
    assert solution["properties"]["calls"] == {"type": "array", "maxItems": 0}
    assert composed_tools(solution) == []


def test_registry_list_and_mapping_compose_identically() -> None:
    live = {"weatherCheck"}
    from_registry = compose(_registry(weather_check(), sentiment_analysis()), live)
    from_list = compose([weather_check(), sentiment_analysis()], live)
    from_mapping = compose({"weatherCheck": weather_check(), "sentimentAnalysis": sentiment_analysis()}, live)
    assert solution_bytes(from_registry) == solution_bytes(from_list) == solution_bytes(from_mapping)


def test_bytes_equal_across_registration_orders() -> None:
    schemas = [weather_check(), sentiment_analysis(), rich_tool()] + [tool(f"t{i}") for i in range(20)]
    one = compose(_registry(*schemas), ["t3", "weatherCheck"])
    two = compose(_registry(*reversed(schemas)), ("weatherCheck", "t3"))
    three = compose(list(reversed(schemas)), frozenset({"t3", "weatherCheck"}))
    assert one is not two
    assert solution_bytes(one) == solution_bytes(two) == solution_bytes(three)


def test_solution_bytes_is_compact_ordered_utf8() -> None:
    schema = tool("fr", ville={"type": "string", "description": "Ville à vérifier"})
    solution = compose([schema], ())
    data = solution_bytes(solution)
    assert isinstance(data, bytes)
    text = data.decode("utf-8")
    assert "Ville à vérifier" in text
    assert ", " not in text and ": " not in text
    assert text.startswith('{"type":"object","properties":{"calls":')
    assert json.loads(text) == solution
    assert solution_bytes(solution) == data  # remembered for cached solutions


def test_solution_bytes_of_a_plain_dict() -> None:
    assert solution_bytes({"b": 1, "a": "é"}) == '{"b":1,"a":"é"}'.encode()


# --------------------------------------------------------------------------------------------- cache


def test_registry_cache_returns_the_same_object_until_a_change() -> None:
    registry = _registry(weather_check())
    first = compose(registry, {"weatherCheck"})
    assert compose(registry, {"weatherCheck"}) is first
    assert compose(registry, ["weatherCheck"]) is first  # live activities are a set
    assert compose(registry, ()) is not first
    registry.register("sentimentAnalysis", sentiment_analysis())
    second = compose(registry, {"weatherCheck"})
    assert second is not first
    assert len(composed_tools(second)) == 2
    assert len(composed_tools(first)) == 1  # an old result is never changed
    registry.unregister("sentimentAnalysis")
    assert compose(registry, {"weatherCheck"}) is not second


def test_cache_distinguishes_output_and_plan() -> None:
    registry = _registry(weather_check())
    out_a = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}}}
    out_b = {"type": "object", "properties": {"b": {"type": "string"}, "a": {"type": "string"}}}
    a = compose(registry, (), out_a)
    b = compose(registry, (), out_b)
    assert a is not b and solution_bytes(a) != solution_bytes(b)
    assert compose(registry, (), copy.deepcopy(out_a)) is a
    assert compose(registry, (), None, plan=True) is not compose(registry, (), None)


def test_list_cache_follows_content() -> None:
    schemas = [weather_check(), sentiment_analysis()]
    first = compose(schemas, ())
    assert compose([sentiment_analysis(), weather_check()], ()) is first
    schemas[0]["description"] = "changed in place"
    second = compose(schemas, ())
    assert second is not first
    assert composed_tools(second)[1]["description"] == "changed in place"


def test_clear_cache() -> None:
    registry = _registry(weather_check())
    first = compose(registry, ())
    clear_cache()
    again = compose(registry, ())
    assert again is not first and again == first


def test_list_errors() -> None:
    with pytest.raises(ToolSchemaError, match="_tool"):
        compose([{"type": "object", "properties": {"x": {}}}], ())
    other = weather_check()
    other["description"] = "different"
    with pytest.raises(DuplicateRegistrationError, match="weatherCheck"):
        compose([weather_check(), other], ())
    assert composed_tools(compose([weather_check(), weather_check()], ())) == [compose_tool(weather_check())]
    with pytest.raises(ToolSchemaError, match=r"'weather'.*'weatherCheck'"):
        compose({"weather": weather_check()}, ())


def test_composition_speed() -> None:
    # 250 tools keep the test fast (registration checks a Draft 2020-12 schema, ~2 ms per tool);
    # benchmarks/protocol.py measures 1,000 tools against the 100 ms cold / 1 ms cached targets.
    registry = ToolRegistry()
    for i in range(250):
        registry.register(f"tool{i:04d}", tool(f"tool{i:04d}", city={"type": "string"}, n={"type": "integer"}))
    live = {f"tool{i:04d}" for i in range(0, 250, 2)}
    start = time.perf_counter()
    first = compose(registry, live)
    cold = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(100):
        assert compose(registry, live) is first
    cached = (time.perf_counter() - start) / 100
    # generous bounds against CI noise
    assert cold < 0.25, cold
    assert cached < 0.005, cached


# ------------------------------------------------------------------------------------ upfront modules


def module_tool(resolution: str | None = "upfront", module: str = "summarize") -> dict:
    schema = {
        "type": "object",
        "description": "Summarize a text in a clean room.",
        "properties": {
            "_tool": {"type": "string", "const": "summarize"},
            "_module": {"type": "string", "const": module},
            "text": {"type": "string"},
            "style": {"type": "string"},
            "_output": {"type": "string"},
        },
        "required": ["text"],
    }
    if resolution:
        schema["x-module-resolution"] = resolution
    return schema


MODULE = {
    "context": [{"type": "text", "text": "You summarize."}],
    "input": {
        "type": "object",
        "properties": {
            "text": {"type": "string", "minLength": 1},
            "maxWords": {"type": "integer"},
            "_hidden": {"type": "string"},
        },
        "required": ["text", "maxWords"],
    },
    "output": {"type": "object", "properties": {"summary": {"type": "string"}}, "required": ["summary"]},
}


def test_upfront_module_merges_input_and_output() -> None:
    calls: list[str] = []

    def loader(name: str) -> dict:
        calls.append(name)
        return MODULE

    composed = compose_tool(module_tool(), (), module_loader=loader)
    assert calls == ["summarize"]
    props = composed["properties"]
    assert list(props) == ["_tool", "_activity", "_reasoningForCall", "_module", "text", "style", "maxWords", "_output"]
    assert props["text"] == {"type": "string", "minLength": 1}  # the module's contract wins
    assert props["_output"] == {"anyOf": [MODULE["output"], {"type": "null"}]}
    assert composed["required"] == ["_tool", "text", "maxWords"]


def test_module_loader_only_for_upfront_named_modules() -> None:
    def loader(name: str) -> dict:
        raise AssertionError("loader must not be called")

    assert compose_tool(module_tool(None), (), module_loader=loader) == compose_tool(module_tool(None), ())
    assert compose_tool(module_tool("execution"), (), module_loader=loader)["properties"]["_output"] == {
        "anyOf": [{"type": "string"}, {"type": "null"}]
    }
    compose_tool(module_tool(module="anonymous"), (), module_loader=loader)
    # without a loader an upfront tool is composed unchanged
    assert "maxWords" not in compose_tool(module_tool(), ())["properties"]


def test_compositions_that_load_modules_are_not_cached() -> None:
    calls: list[str] = []

    def loader(name: str) -> dict:
        calls.append(name)
        return MODULE

    registry = _registry(module_tool())
    compose(registry, (), module_loader=loader)
    compose(registry, (), module_loader=loader)
    assert calls == ["summarize", "summarize"]
