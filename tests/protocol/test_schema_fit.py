"""The compiled check of a tool schema (`schema_fit.fit_for`) answers True only where jsonschema finds a value valid,
and for JSON values it agrees with jsonschema wherever it compiles; schemas with keywords it does not check get none;
planning a job validates its conforming calls without jsonschema."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from agentq.errors import JobValidationError
from agentq.protocol.jobs import plan_job
from agentq.protocol.schema_fit import fit_for
from agentq.protocol.validation import tool_call_errors, validator_for

SCHEMAS: list[Any] = [
    True, False, {},
    {"type": "string"}, {"type": "integer"}, {"type": "number"}, {"type": "boolean"}, {"type": "null"},
    {"type": "object"}, {"type": "array"}, {"type": ["string", "null"]}, {"type": ["integer", "array"]},
    {"const": "a"}, {"const": 1}, {"const": True}, {"const": None}, {"const": 1.5},
    {"enum": ["a", "b"]}, {"enum": [1, "1", None, False]},
    {"type": "string", "minLength": 2, "maxLength": 3}, {"minLength": 1},
    {"type": "array", "minItems": 1, "maxItems": 2}, {"items": {"type": "integer"}}, {"maxItems": 0},
    {"minimum": 0}, {"maximum": 10}, {"exclusiveMinimum": 0, "exclusiveMaximum": 1.5},
    {"type": "number", "minimum": -1},
    {"pattern": "^a+b?$"}, {"type": "string", "pattern": "x"},
    {"anyOf": [{"type": "string"}, {"type": "integer", "minimum": 3}]}, {"anyOf": [{}, {"type": "null"}]},
    {"allOf": [{"type": "integer"}, {"maximum": 5}]},
    {"properties": {"a": {"type": "integer"}}}, {"required": ["a"]},
    {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"], "additionalProperties": False},
    {"type": "object", "properties": {"a": {}}, "additionalProperties": {"type": "integer"}},
    {"type": "object", "properties": {"n": {"type": "object", "properties": {"x": {"enum": [1, 2]}},
                                            "required": ["x"]}}},
    {"type": "object", "description": "a tool", "title": "T", "x-display": {"label": "x"}, "format": "email",
     "properties": {"_tool": {"type": "string", "const": "t"}, "q": {"type": "string", "x-sensitive": True,
                                                                   "default": "d", "examples": ["e"]}}},
]
VALUES: list[Any] = [
    None, True, False, 0, 1, 2, 3, 5, 7, 10, 11, -1, -2, 0.5, 1.0, 1.5, 2.0, 1e300, "", "a", "ab", "abc", "abcd",
    "aab", "b", "x", "1", "ba", [], [1], [1, 2], [1, "a"], ["a"], [[1]], {}, {"a": 1}, {"a": "s"}, {"a": "s", "b": 1},
    {"b": 2}, {"a": None}, {"n": {"x": 1}}, {"n": {"x": 3}}, {"n": {}}, {"n": 1}, {"_tool": "t", "q": "z"},
    {"_tool": "u"}, {"_tool": "t", "q": 1},
]


def _valid(schema: Any, value: Any) -> bool:
    return Draft202012Validator(schema).is_valid(value)


@pytest.mark.parametrize("schema", SCHEMAS, ids=lambda s: json.dumps(s)[:60])
def test_a_compiled_check_agrees_with_jsonschema_on_json_values(schema: Any):
    fit = fit_for(schema)
    assert fit is not None
    for value in VALUES:
        if isinstance(value, float) and value.is_integer() and ("const" in json.dumps(schema)
                                                                or "enum" in json.dumps(schema)):
            continue  # 1.0 == 1 for jsonschema's const and enum: the check only says "ask jsonschema" (below)
        assert fit(value) == _valid(schema, value), (schema, value)


def test_where_the_check_is_unsure_it_asks_jsonschema_rather_than_answer_valid():
    cases: list[tuple[Any, Any]] = [
        ({"const": 1}, 1.0), ({"enum": [2]}, 2.0),  # equal for jsonschema, not the same JSON type: unsure
        ({"type": "object", "required": ["a"]}, type("Sub", (dict,), {})(a=1)),  # a dict subclass
        ({"minimum": 0}, float("nan")),
    ]
    for schema, value in cases:
        fit = fit_for(schema)
        assert fit is not None and not fit(value)
        assert not fit(value) or _valid(schema, value)


def _random_schema(rng: random.Random, depth: int = 0) -> Any:
    kinds = ["string", "integer", "number", "boolean", "null", "object", "array"]
    pick = rng.randrange(9 if depth < 3 else 6)
    if pick == 0:
        return {"type": rng.choice(kinds)}
    if pick == 1:
        return {"type": rng.sample(kinds, 2)}
    if pick == 2:
        return {"enum": rng.sample(["a", "b", 1, 2, None, True], 3)}
    if pick == 3:
        return {"type": "string", "minLength": rng.randrange(3), "maxLength": rng.randrange(2, 5)}
    if pick == 4:
        return {rng.choice(["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"]): rng.randrange(-2, 3)}
    if pick == 5:
        return rng.choice([{}, True, False, {"const": rng.choice(["a", 1, None])}])
    if pick == 6:
        names = rng.sample(["a", "b", "c"], rng.randrange(1, 4))
        schema: dict[str, Any] = {"type": "object",
                                  "properties": {n: _random_schema(rng, depth + 1) for n in names}}
        if rng.random() < 0.5:
            schema["required"] = names[:rng.randrange(len(names) + 1)]
        if rng.random() < 0.4:
            schema["additionalProperties"] = rng.choice([False, {"type": "integer"}])
        return schema
    if pick == 7:
        return {"type": "array", "items": _random_schema(rng, depth + 1), "maxItems": rng.randrange(1, 4)}
    return {rng.choice(["anyOf", "allOf"]): [_random_schema(rng, depth + 1) for _ in range(rng.randrange(1, 3))]}


def _random_value(rng: random.Random, depth: int = 0) -> Any:
    pick = rng.randrange(8 if depth < 3 else 5)
    if pick == 0:
        return rng.choice(["", "a", "ab", "abcd", "b"])
    if pick == 1:
        return rng.randrange(-3, 4)
    if pick == 2:
        return rng.choice([0.5, -1.5, 2.5])
    if pick == 3:
        return rng.choice([True, False])
    if pick == 4:
        return None
    if pick in (5, 6):
        return {n: _random_value(rng, depth + 1) for n in rng.sample(["a", "b", "c", "d"], rng.randrange(4))}
    return [_random_value(rng, depth + 1) for _ in range(rng.randrange(4))]


def test_random_schemas_and_values_agree_with_jsonschema():
    rng = random.Random(20261130)
    compared = 0
    for _ in range(400):
        schema = _random_schema(rng)
        fit = fit_for(schema)
        assert fit is not None, schema
        for _ in range(12):
            value = _random_value(rng)
            assert fit(value) == _valid(schema, value), (schema, value)
            compared += 1
    assert compared == 4800


@pytest.mark.parametrize("schema", [
    {"$ref": "#/$defs/x", "$defs": {"x": {}}}, {"oneOf": [{}, {}]}, {"not": {}}, {"if": {}, "then": {}},
    {"patternProperties": {"^a": {}}}, {"prefixItems": [{}]}, {"uniqueItems": True}, {"multipleOf": 2},
    {"dependentRequired": {"a": ["b"]}}, {"propertyNames": {"maxLength": 1}}, {"minProperties": 1},
    {"contains": {}}, {"unevaluatedProperties": False}, {"properties": {"a": {"oneOf": [{}]}}},
    {"items": {"not": {}}}, {"anyOf": [{"$ref": "#"}]}, {"type": "decimal"}, {"const": [1]}, {"enum": [{"a": 1}]},
    {"properties": {"a": 1}}, {"minLength": 1.5}, {"pattern": "("},
], ids=lambda s: json.dumps(s)[:50])
def test_a_schema_with_a_keyword_not_checked_gets_no_check(schema: Any):
    assert fit_for(schema) is None


def test_problems_are_still_worded_by_jsonschema():
    tool = {"type": "object", "properties": {"_tool": {"const": "t"}, "n": {"type": "integer", "minimum": 1}},
            "required": ["_tool", "n"], "additionalProperties": False}
    validator = validator_for(tool)
    assert validator.fit is not None
    assert tool_call_errors({"_tool": "t", "n": 2}, tool, validator) == []
    problems = tool_call_errors({"_tool": "t", "n": 0, "x": 1}, tool, validator, pointer_prefix="/calls/0")
    assert [(p.pointer, p.message) for p in problems] == [
        ("/calls/0/n", "0 is less than the minimum of 1"), ("/calls/0", "unexpected property ('x' was unexpected)")]


def test_planning_a_job_validates_its_conforming_calls_without_jsonschema(monkeypatch: pytest.MonkeyPatch):
    walked: list[Any] = []
    iter_errors = Draft202012Validator.iter_errors

    def spied(self: Draft202012Validator, instance: Any, *args: Any) -> Any:
        if isinstance(instance, dict) and instance.get("_tool") == "fit":  # a call (not a schema checked as a tool)
            walked.append(instance)
        return iter_errors(self, instance, *args)

    monkeypatch.setattr(Draft202012Validator, "iter_errors", spied)
    tool = {"type": "object", "description": "test_schema_fit's own",
            "properties": {"_tool": {"type": "string", "const": "fit"}, "n": {"type": "integer"}, "_output": {}}}
    calls = [{"_tool": "fit", "n": i, "_outputPath": f"†state.r{i}"} for i in range(50)]
    plan = plan_job({"calls": calls}, tools={"fit": tool}, live_activities={"fit": {}})
    assert len(plan.calls) == 50 and walked == []
    with pytest.raises(JobValidationError) as caught:
        plan_job({"calls": [*calls, {"_tool": "fit", "n": "x"}]}, tools={"fit": tool}, live_activities={"fit": {}})
    assert [p.pointer for p in caught.value.problems] == ["/calls/50/n"]
    assert [c["n"] for c in walked] == ["x"]  # only the call that does not fit was walked by jsonschema


def test_a_schema_that_holds_itself_gets_no_check():
    schema: dict[str, Any] = {"type": "object", "properties": {}}
    schema["properties"]["again"] = schema  # not JSON, but a Python caller may build it
    assert fit_for(schema) is None
