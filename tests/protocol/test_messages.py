"""messages.py: canonical messages, shorthands, validation with JSON pointers (docs/protocol.md#messages)."""

import pytest

from agentq.errors import MessageError, Problem, UnknownMethodError
from agentq.protocol.messages import (
    is_engine_written,
    looks_canonical,
    message_problems,
    normalize_message,
    normalize_messages,
)

ENGINE_WRITE = {
    "type": "data", "kind": "state", "data": {"user": {"status": "inactive"}},
    "_path": "†state.user.status", "_outputMethod": "set",
    "_call": {"_tool": "t", "_outputPath": "†state.user.status", "id": "call_1"}, "_date": "2026-01-01T00:00:00Z",
}


class TestShorthandsAndDefaults:
    def test_text_role_defaults_to_user(self):
        assert normalize_message({"type": "text", "text": "hi"}) == {"type": "text", "role": "user", "text": "hi"}

    @pytest.mark.parametrize("role", ["system", "user", "assistant"])
    def test_text_roles(self, role):
        assert normalize_message({"type": "text", "role": role, "text": "x"})["role"] == role

    def test_data_kind_defaults_to_data(self):
        assert normalize_message({"type": "data", "data": {"a": 1}}) == {
            "type": "data", "kind": "data", "data": {"a": 1}}

    def test_state_shorthand(self):
        assert normalize_message({"type": "state", "data": {"a": 1}, "_instance": "①"}) == {
            "type": "data", "kind": "state", "data": {"a": 1}, "_instance": "①"}

    @pytest.mark.parametrize("field", ["data", "input"])
    def test_input_shorthand_and_alias(self, field):
        assert normalize_message({"type": "input", field: {"userName": "Jane"}}) == {
            "type": "data", "kind": "input", "data": {"userName": "Jane"}}

    def test_shorthand_with_matching_kind(self):
        assert normalize_message({"type": "state", "kind": "state", "data": 1})["kind"] == "state"

    def test_canonical_field_order_and_idempotence(self):
        raw = {"_instance": "x", "description": "d", "data": [1], "type": "state", "schema": {"type": "array"}}
        message = normalize_message(raw)
        assert list(message) == ["type", "kind", "data", "schema", "description", "_instance"]
        assert normalize_message(message) == message

    def test_null_instance_means_global(self):
        assert "_instance" not in normalize_message({"type": "state", "data": {}, "_instance": None})

    def test_does_not_mutate_input(self):
        raw = {"type": "input", "input": {"a": 1}}
        normalize_message(raw)
        assert raw == {"type": "input", "input": {"a": 1}}

    def test_engine_written_and_error_messages_pass(self):
        assert normalize_message(ENGINE_WRITE) == ENGINE_WRITE
        error = {"type": "error", "data": {"call": {"_tool": "t"}, "error": {"type": "ValueError", "message": "m"}},
                 "_instance": "①", "_date": "2026-01-01T00:00:00Z"}
        assert normalize_message(error) == error

    def test_null_data_is_a_value(self):
        assert normalize_message({"type": "state", "data": None})["data"] is None


class TestValidation:
    @pytest.mark.parametrize("raw, pointer, fragment", [
        ("hello", "/context/2", "must be an object"),
        ({"text": "x"}, "/context/2/type", "type must be one of text, data, error, state, input"),
        ({"type": "image"}, "/context/2/type", "got 'image'"),
        ({"type": "text", "role": "bot", "text": "x"}, "/context/2/role",
         "role must be one of system, user, assistant"),
        ({"type": "text", "text": 3}, "/context/2/text", "needs a string text"),
        ({"type": "text"}, "/context/2/text", "needs a string text"),
        ({"type": "text", "text": "x", "data": 1}, "/context/2/data", "unknown field in a text message"),
        ({"type": "data", "kind": "", "data": 1}, "/context/2/kind", "non-empty string"),
        ({"type": "data", "kind": 3, "data": 1}, "/context/2/kind", "non-empty string"),
        ({"type": "data", "kind": "k"}, "/context/2/data", "needs data"),
        ({"type": "data", "data": 1, "dta": 2}, "/context/2/dta", "unknown field"),
        ({"type": "data", "data": 1, "schema": "x"}, "/context/2/schema", "JSON Schema"),
        ({"type": "data", "data": 1, "description": 3}, "/context/2/description", "must be a string"),
        ({"type": "data", "data": 1, "_instance": 3}, "/context/2/_instance", "non-empty string"),
        ({"type": "data", "data": 1, "_instance": ""}, "/context/2/_instance", "non-empty string"),
        ({"type": "data", "data": 1, "_call": "t"}, "/context/2/_call", "must be an object"),
        ({"type": "data", "data": 1, "_date": 5}, "/context/2/_date", "ISO-8601"),
        ({"type": "state", "kind": "input", "data": 1}, "/context/2/kind", "cannot have kind 'input'"),
        ({"type": "input", "data": 1, "input": 2}, "/context/2/input", "not both"),
        ({"type": "state", "input": 1}, "/context/2/input", "unknown field"),
        ({"type": "state", "data": {"a": 1}, "_path": "†state..a"}, "/context/2/_path", "empty path segment"),
        ({"type": "state", "data": {"a": 1}, "_path": "†input.a"}, "/context/2/_path", "not of the message's kind"),
        ({"type": "state", "data": {"a": 1}, "_path": "†state.b"}, "/context/2/data",
         "holds nothing at _path †state.b"),
        ({"type": "state", "data": {"a": 1}, "_path": "†state.a || †state.b"}, "/context/2/_path", "single reference"),
        ({"type": "error", "data": "boom"}, "/context/2/data", "error message needs data"),
        ({"type": "error", "data": {"call": 1, "error": {"type": "E", "message": "m"}}}, "/context/2/data/call",
         "must be an object"),
        ({"type": "error", "data": {"call": {}, "error": "m"}}, "/context/2/data/error", "must be an object"),
        ({"type": "error", "data": {"call": {}, "error": {"type": "E"}}}, "/context/2/data/error/message",
         "must be a string"),
        ({"type": "error", "data": {"call": {}, "error": {"type": "E", "message": "m"}, "x": 1}},
         "/context/2/data/x", "unknown field"),
        ({"type": "text", "text": "x", "_outputMethod": "set"}, "/context/2/_outputMethod", "unknown field"),
    ])
    def test_message_error_names_the_pointer(self, raw, pointer, fragment):
        with pytest.raises(MessageError) as caught:
            normalize_message(raw, "/context/2")
        assert f"{pointer}: " in str(caught.value)
        assert fragment in str(caught.value)
        assert any(p.pointer == pointer and fragment in p.message for p in message_problems(raw, "/context/2"))

    def test_unknown_output_method(self):
        raw = {"type": "state", "data": {}, "_outputMethod": "append"}
        with pytest.raises(UnknownMethodError, match="/_outputMethod: unknown output method 'append'"):
            normalize_message(raw)

    def test_unknown_method_among_other_problems_is_a_message_error(self):
        with pytest.raises(MessageError, match="2 problems") as caught:
            normalize_message({"type": "state", "_outputMethod": "append"})
        assert not isinstance(caught.value, UnknownMethodError)

    def test_all_problems_of_one_message(self):
        problems = message_problems({"type": "text", "role": "bot", "text": 1, "x": 0}, "/m")
        assert {p.pointer for p in problems} == {"/m/role", "/m/text", "/m/x"}
        assert all(isinstance(p, Problem) for p in problems)

    def test_valid_message_has_no_problems(self):
        assert message_problems({"type": "input", "input": {}}) == []

    def test_default_pointer_is_the_root(self):
        with pytest.raises(MessageError, match=r"^invalid message: /role: "):
            normalize_message({"type": "text", "role": "x", "text": ""})


class TestNormalizeMessages:
    def test_normalizes_a_list(self):
        assert normalize_messages([{"type": "text", "text": "a"}, {"type": "input", "input": 1}]) == [
            {"type": "text", "role": "user", "text": "a"}, {"type": "data", "kind": "input", "data": 1}]

    def test_collects_every_problem_of_every_message(self):
        with pytest.raises(MessageError) as caught:
            normalize_messages([{"type": "text", "text": "ok"}, {"type": "text", "role": "bot", "text": "x"},
                                {"type": "data", "kind": ""}])
        text = str(caught.value)
        assert "3 problems" in text
        assert "/context/1/role" in text and "/context/2/kind" in text and "/context/2/data" in text

    def test_not_a_list(self):
        with pytest.raises(MessageError, match="/context: the context must be an array"):
            normalize_messages({"type": "text"})


def test_is_engine_written():
    assert is_engine_written(ENGINE_WRITE)
    assert not is_engine_written({"type": "data", "kind": "state", "data": {}, "_outputMethod": "set"})


@pytest.mark.parametrize("message, canonical", [
    ({"type": "text", "role": "user", "text": "x"}, True),
    ({"type": "text", "text": "x"}, False),
    ({"type": "data", "kind": "s", "data": 1}, True),
    ({"type": "data", "data": 1}, False),
    ({"type": "data", "kind": "s", "data": 1, "_outputMethod": "bogus"}, False),
    ({"type": "state", "data": 1}, False),
    ({"type": "error", "data": {}}, True),
    ("text", False),
])
def test_looks_canonical(message, canonical):
    assert looks_canonical(message) is canonical
