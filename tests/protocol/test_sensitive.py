"""Sensitive parameters (`x-sensitive`): checked at registration, masked by path, redacted in free text and in
validation messages (jsonschema quotes the offending value)."""

from __future__ import annotations

import pytest

from agentq.errors import CallValidationError, ToolSchemaError
from agentq.protocol.compose import compose
from agentq.protocol.sensitive import REDACTED, Redactor, mask, redactor_for, sensitive_paths
from agentq.protocol.tools import ToolRegistry
from agentq.protocol.validation import call_errors, validate_call

CARD = "4111 1111 1111 1111"


def charge_tool(sensitive: object = ("/card/number", "cvv")) -> dict:
    return {
        "type": "object",
        "properties": {
            "_tool": {"type": "string", "const": "charge"},
            "orderId": {"type": "string"},
            "cvv": {"type": "string", "pattern": "^[0-9]{3}$"},
            "card": {"type": "object",
                     "properties": {"number": {"type": "string", "pattern": "^[0-9 ]{12,23}$"},
                                    "holder": {"type": "string"}},
                     "required": ["number"]},
            "tags": {"type": "array", "items": {"type": "string"}},
            "_output": {},
        },
        "required": ["orderId", "card"],
        "x-sensitive": list(sensitive) if isinstance(sensitive, tuple) else sensitive,
    }


# ------------------------------------------------------------------------------------------ registration


def test_a_tool_marks_top_level_names_and_nested_pointers():
    tools = ToolRegistry()
    stored = tools.register("charge", charge_tool())
    assert sensitive_paths(stored) == (("card", "number"), ("cvv",))
    composed = compose(tools)
    tool = composed["properties"]["calls"]["items"]["anyOf"][0]
    assert sensitive_paths(tool) == (("card", "number"), ("cvv",))  # composition keeps the keyword


@pytest.mark.parametrize(("sensitive", "expected"), [
    ("cvv", "must be a non-empty list"),
    ([], "must be a non-empty list"),
    ([3], "entries must be parameter names or JSON pointers, got 3"),
    (["/"], "entries must be parameter names or JSON pointers"),
    (["cardNumber"], "'cardNumber' names no parameter: /properties has no property 'cardNumber'"),
    (["/card/cvc"], "'/card/cvc' names no parameter: /properties/card/properties has no property 'cvc'"),
    (["/orderId/x"], "'/orderId/x' names no parameter: /properties/orderId/properties has no property 'x'"),
    (["_tool"], "'_tool' is a meta field, not a parameter"),
    (["cvv", "/cvv"], "'/cvv' is listed twice"),
])
def test_registration_refuses_a_bad_list_naming_the_entry(sensitive, expected):
    tools = ToolRegistry()
    with pytest.raises(ToolSchemaError) as caught:
        tools.register("charge", charge_tool(sensitive))
    assert expected in str(caught.value)
    assert "keyword 'x-sensitive' at /x-sensitive" in str(caught.value)
    assert "charge" not in tools  # nothing registered


def test_the_pointer_of_a_bad_entry_is_named():
    with pytest.raises(ToolSchemaError, match=r"at /x-sensitive/1\)"):
        ToolRegistry().register("charge", charge_tool(["cvv", "nope"]))


def test_pointer_escapes_name_properties_with_slashes():
    schema = charge_tool(["/a~1b"])
    schema["properties"]["a/b"] = {"type": "string"}
    assert sensitive_paths(ToolRegistry().register("charge", schema)) == (("a/b",),)


# ------------------------------------------------------------------------------------------ masking


def test_mask_replaces_present_values_whatever_their_type_and_leaves_the_input_alone():
    params = {"orderId": "o1", "cvv": 123, "card": {"number": CARD, "holder": "Ada"}, "tags": ["x"]}
    masked = mask(params, (("card", "number"), ("cvv",), ("missing",), ("tags", "0")))
    assert masked == {"orderId": "o1", "cvv": REDACTED, "card": {"number": REDACTED, "holder": "Ada"},
                      "tags": ["x"]}  # arrays are not walked
    assert params["card"]["number"] == CARD and params["cvv"] == 123


def test_mask_of_a_whole_object_parameter():
    assert mask({"card": {"number": CARD}}, (("card",),)) == {"card": REDACTED}


def test_a_path_through_a_non_object_masks_nothing():
    assert mask({"card": "†input.card"}, (("card", "number"),)) == {"card": "†input.card"}


def test_redactor_replaces_quoted_and_bare_forms():
    redactor = Redactor([CARD, "123", 4111111111111111])
    text = (f"declined {CARD}; repr {CARD!r}; json \"{CARD}\"; cvv '123' and the number 123 stays; "
            "also 4111111111111111.")
    assert redactor.redact(text) == (f"declined {REDACTED}; repr {REDACTED}; json {REDACTED}; cvv {REDACTED} and "
                                     f"the number 123 stays; also {REDACTED}.")


def test_redactor_for_collects_the_leaves_under_each_path():
    call = {"_tool": "charge", "card": {"number": CARD, "holder": "Ada"}, "cvv": "987"}
    redactor = redactor_for(call, charge_tool())
    assert redactor.redact(f"{CARD} '987' Ada") == f"{REDACTED} {REDACTED} Ada"
    assert not redactor_for(call, {"properties": {}})  # a tool that marks nothing redacts nothing


# ------------------------------------------------------------------------------------------ validation


def _solution() -> dict:
    tools = ToolRegistry()
    tools.register("charge", charge_tool())
    return compose(tools, live_activities=["charge"])


def test_a_validation_error_at_a_sensitive_value_does_not_quote_it():
    call = {"_tool": "charge", "orderId": "o1", "card": {"number": "4111-1111-1111-1111"}, "cvv": "12"}
    with pytest.raises(CallValidationError) as caught:
        validate_call(call, _solution())
    problems = {p.pointer: p.message for p in caught.value.problems}
    assert problems == {
        "/card/number": f"{REDACTED} does not match '^[0-9 ]{{12,23}}$'",
        "/cvv": f"{REDACTED} does not match '^[0-9]{{3}}$'",
    }
    assert "4111" not in str(caught.value) and "'12'" not in str(caught.value)


def test_a_non_string_sensitive_value_is_not_quoted_either():
    call = {"_tool": "charge", "orderId": "o1", "card": {"number": 4111111111111111}, "cvv": 12}
    problems = {p.pointer: p.message for p in call_errors(call, _solution(), pointer_prefix="/calls/0")}
    assert problems == {"/calls/0/card/number": f"{REDACTED} is not of type 'string'",
                        "/calls/0/cvv": f"{REDACTED} is not of type 'string'"}


def test_a_message_about_an_enclosing_object_hides_the_values_inside_it():
    tools = ToolRegistry()
    schema = charge_tool()
    schema["properties"]["card"]["additionalProperties"] = False
    schema["properties"]["card"]["maxProperties"] = 1
    tools.register("charge", schema)
    call = {"_tool": "charge", "orderId": "o1", "card": {"number": CARD, "holder": "Ada"}}
    problems = call_errors(call, compose(tools, live_activities=["charge"]))
    assert [p.pointer for p in problems] == ["/card"]
    assert CARD not in problems[0].message and REDACTED in problems[0].message
    assert "'holder': 'Ada'" in problems[0].message  # what is not sensitive is still shown


def test_other_parameters_are_still_quoted():
    call = {"_tool": "charge", "orderId": 7, "card": {"number": CARD}}
    problems = call_errors(call, _solution())
    assert [(p.pointer, p.message) for p in problems] == [("/orderId", "7 is not of type 'string'")]
