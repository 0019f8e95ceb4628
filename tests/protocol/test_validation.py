"""Call validation (docs/protocol.md#calls): tool lookup, every error with its JSON pointer, skip pointers, prefixes."""

from __future__ import annotations

from typing import Any

import pytest

from agentq.errors import CallValidationError, InvalidInputError, Problem, UnknownToolError
from agentq.protocol.compose import compose
from agentq.protocol.validation import call_errors, tool_schema_for, validate_call, validator_for
from tests.protocol.test_tools import sentiment_analysis, weather_check


def order_tool() -> dict:
    return {
        "type": "object",
        "description": "Places an order.",
        "properties": {
            "_tool": {"type": "string", "const": "placeOrder"},
            "customer": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "email": {"type": "string"}},
                "required": ["name", "email"],
            },
            "items": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"sku": {"type": "string"}, "qty": {"type": "integer", "minimum": 1}},
                    "required": ["sku", "qty"],
                },
            },
            "note": {"anyOf": [{"type": "string", "maxLength": 5}, {"type": "null"}]},
            "a/b~c": {"type": "number"},
            "_output": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]},
        },
        "required": ["customer", "items"],
        "additionalProperties": False,
    }


@pytest.fixture(scope="module")
def solution() -> dict:
    return compose([weather_check(), sentiment_analysis(), order_tool()], {"weatherCheck"})


def pointers(problems: list[Problem]) -> list[str]:
    return [p.pointer for p in problems]


def good_order() -> dict:
    return {
        "_tool": "placeOrder",
        "customer": {"name": "Ada", "email": "ada@example.com"},
        "items": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 2}, {"sku": "c", "qty": 3}],
    }


# ------------------------------------------------------------------------------------------- valid


def test_valid_calls_return_their_composed_tool(solution: dict) -> None:
    matched = validate_call({"_tool": "weatherCheck", "location": "Paris"}, solution)
    assert matched["properties"]["_tool"]["const"] == "weatherCheck"
    assert matched is tool_schema_for({"_tool": "weatherCheck"}, solution)
    assert validate_call({"_tool": "sentimentAnalysis"}, solution)["properties"]["_activity"]["const"] == ""
    validate_call(good_order(), solution)
    assert call_errors(good_order(), solution) == []


def test_meta_fields_on_calls(solution: dict) -> None:
    call: dict[str, Any] = {
        "_tool": "weatherCheck",
        "_activity": "weatherCheck",
        "_reasoningForCall": "The user asked for the weather.",
        "location": "Paris",
        "_output": None,
    }
    validate_call(call, solution)
    call["_output"] = {"temperature": 21, "conditions": "sunny"}
    validate_call(call, solution)


# ------------------------------------------------------------------------------------------ lookup


def test_unknown_tool_lists_known_tools(solution: dict) -> None:
    with pytest.raises(UnknownToolError) as info:
        validate_call({"_tool": "weatherChek", "location": "Paris"}, solution)
    message = str(info.value)
    assert "/_tool" in message and "did you mean 'weatherCheck'" in message
    assert "placeOrder, sentimentAnalysis, weatherCheck" in message
    [problem] = call_errors({"_tool": "nope"}, solution, pointer_prefix="/calls/4")
    assert problem.pointer == "/calls/4/_tool" and "unknown tool 'nope'" in problem.message


@pytest.mark.parametrize("call", [["_tool", "x"], "weatherCheck", None, 3, {}, {"location": "Paris"}, {"_tool": 3}])
def test_not_a_call(solution: dict, call: object) -> None:
    with pytest.raises(CallValidationError) as info:
        validate_call(call, solution)
    assert info.value.pointer == "/_tool"
    assert "weatherCheck" in str(info.value)  # names what could be called
    assert pointers(call_errors(call, solution, pointer_prefix="/calls/0")) == ["/calls/0/_tool"]


def test_empty_solution() -> None:
    with pytest.raises(UnknownToolError, match="known tools: none"):
        validate_call({"_tool": "x"}, compose([], ()))


# -------------------------------------------------------------------------------------- pointers


def test_type_error_pointer(solution: dict) -> None:
    with pytest.raises(CallValidationError) as info:
        validate_call({"_tool": "weatherCheck", "location": 42}, solution)
    err = info.value
    assert isinstance(err, InvalidInputError)
    assert err.problems == [Problem("/location", "42 is not of type 'string'")]
    assert "weatherCheck" in str(err)


def test_nested_array_pointer(solution: dict) -> None:
    call = good_order()
    call["items"][2]["qty"] = "three"
    assert call_errors(call, solution) == [Problem("/items/2/qty", "'three' is not of type 'integer'")]


def test_required_points_at_the_parent_and_names_the_property(solution: dict) -> None:
    problems = call_errors({"_tool": "weatherCheck"}, solution)
    assert problems == [Problem("", "missing required property 'location'")]
    call = good_order()
    del call["customer"]["email"]
    call["items"][1] = {"qty": 2}
    problems = call_errors(call, solution)
    assert Problem("/customer", "missing required property 'email'") in problems
    assert Problem("/items/1", "missing required property 'sku'") in problems


def test_all_errors_are_collected(solution: dict) -> None:
    call = {
        "_tool": "placeOrder",
        "_activity": "placeOrder",
        "customer": {"name": 1},
        "items": [{"sku": "a", "qty": 0}, "x"],
        "note": "far too long",
        "extra": True,
        "a/b~c": "n",
    }
    with pytest.raises(CallValidationError) as info:
        validate_call(call, solution, pointer_prefix="/calls/3")
    got = pointers(info.value.problems)
    assert set(got) == {
        "/calls/3/_activity",
        "/calls/3/customer/name",
        "/calls/3/customer",
        "/calls/3/items/0/qty",
        "/calls/3/items/1",
        "/calls/3/note",
        "/calls/3/a~1b~0c",
        "/calls/3",
    }
    assert len(info.value.problems) == len(set(got))
    assert "(8 problems)" in str(info.value)
    messages = {p.pointer: p.message for p in info.value.problems}
    assert messages["/calls/3/_activity"] == "_activity must be '' (resolved at composition), got 'placeOrder'"
    assert "'extra'" in messages["/calls/3"]
    assert "too long" in messages["/calls/3/note"]  # the string branch of the nullable anyOf, not "not valid under any"
    assert info.value.to_dict()["type"] == "CallValidationError"


def test_nullable_output_reports_the_inner_problem(solution: dict) -> None:
    call = {"_tool": "weatherCheck", "location": "Paris", "_output": {"temperature": "hot"}}
    assert call_errors(call, solution) == [
        Problem("/_output/temperature", "'hot' is not of type 'number'"),
        Problem("/_output", "missing required property 'conditions'"),
    ]
    call["_output"] = "sunny"  # neither object nor null: no branch is plausible, report the anyOf itself
    [problem] = call_errors(call, solution)
    assert problem.pointer == "/_output" and "any of the given schemas" in problem.message


def test_activity_must_match_the_composed_const(solution: dict) -> None:
    problems = call_errors({"_tool": "weatherCheck", "location": "x", "_activity": ""}, solution)
    assert problems == [Problem("/_activity", "_activity must be 'weatherCheck' (resolved at composition), got ''")]


def test_pointer_prefix(solution: dict) -> None:
    with pytest.raises(CallValidationError) as info:
        validate_call({"_tool": "weatherCheck", "location": 1}, solution, pointer_prefix="/calls/3")
    assert info.value.pointer == "/calls/3/location"


# ---------------------------------------------------------------------------------- skip pointers


def test_unresolved_references_are_not_judged(solution: dict) -> None:
    call = good_order()
    call["items"][0]["qty"] = "†state.count"
    call["customer"] = "†state.customer"
    call["note"] = "†state.a.very.long.note"
    assert len(call_errors(call, solution)) == 3
    skip = ["/items/0/qty", "/customer", "/note"]
    assert call_errors(call, solution, skip_pointers=skip) == []
    call["items"][1]["qty"] = "two"  # a real problem is still reported, with the prefix
    assert call_errors(call, solution, skip_pointers=skip, pointer_prefix="/calls/1") == [
        Problem("/calls/1/items/1/qty", "'two' is not of type 'integer'")
    ]


def test_skip_pointer_matches_whole_segments(solution: dict) -> None:
    call = {"_tool": "weatherCheck", "location": 1}
    assert call_errors(call, solution, skip_pointers=["/loc"]) != []
    assert call_errors(call, solution, skip_pointers=["/location"]) == []


def test_whole_array_reference(solution: dict) -> None:
    call = good_order()
    call["items"] = "†state.cart.items"
    assert call_errors(call, solution, skip_pointers=["/items"]) == []


# ------------------------------------------------------------------------------------------ caching


def test_a_validator_validates_against_its_tool(solution: dict) -> None:
    weather = tool_schema_for({"_tool": "weatherCheck"}, solution)
    validator = validator_for(weather)
    assert validator.schema.schema is weather
    assert not validator.schema.is_valid({"_tool": "weatherCheck", "location": 3})
    assert validator.fit is not None and not validator.fit({"_tool": "weatherCheck", "location": 3})


def test_schemas_built_by_hand_work_too() -> None:
    solution = {
        "type": "object",
        "properties": {
            "calls": {
                "type": "array",
                "items": {"anyOf": [
                    {"type": "object", "properties": {"_tool": {"const": "t"}, "n": {"type": "integer"}}},
                ]},
            }
        },
    }
    assert call_errors({"_tool": "t", "n": "x"}, solution) == [Problem("/n", "'x' is not of type 'integer'")]
    with pytest.raises(UnknownToolError):
        validate_call({"_tool": "u"}, {"type": "object"})
