"""writes.py: output paths, fan-out, branching, failures (docs/protocol.md#output-paths) and the seed examples."""

import pytest

from agentq.errors import MessageError, ReferenceSyntaxError, UnknownMethodError, WriteError
from agentq.protocol.expressions import Ref
from agentq.protocol.messages import normalize_message
from agentq.protocol.values import MISSING
from agentq.protocol.views import LogIndex, resolve
from agentq.protocol.writes import check_write, failure_messages, output_alternatives, output_messages, written_paths

DATE = "2026-01-01T00:00:00Z"
BRANCHING = {"_tool": "charge", "_activity": "charge", "amount": 5, "_outputPath": "†state.success || †state.error"}


def out(call, result, call_id="call_1"):
    return output_messages(call, result, call_id=call_id, date=DATE)


def fail(call, call_id="call_1"):
    return failure_messages(call, call_id=call_id, error_type="TimeoutError", message="took too long", date=DATE)


class TestPaths:
    def test_alternatives_and_written_paths(self):
        call = {"_outputPath": "†state.a && †audit.a || †state.err && †state.a"}
        assert output_alternatives(call) == (
            (Ref("state", ("a",)), Ref("audit", ("a",))), (Ref("state", ("err",)), Ref("state", ("a",))))
        assert written_paths(call) == [Ref("state", ("a",)), Ref("audit", ("a",)), Ref("state", ("err",))]

    @pytest.mark.parametrize("call", [{}, {"_outputPath": None}, {"_outputPath": ""}, {"_outputPath": "  "}])
    def test_no_output_path(self, call):
        assert output_alternatives(call) == ()
        assert written_paths(call) == []

    def test_malformed_output_path(self):
        with pytest.raises(ReferenceSyntaxError):
            output_alternatives({"_outputPath": "†state.a ||"})


class TestPlainResults:
    def test_seed_000_weather_check(self):
        """Seed 000: the activity returns {temperature, conditions}; it is wrapped at the output path."""
        call = {"_tool": "weatherCheck", "_activity": "weatherCheck", "location": "Paris",
                "_outputPath": "†state.weather"}
        [message] = out(call, {"temperature": 21.5, "conditions": "sunny"}, "call_01J")
        assert message == {
            "type": "data", "kind": "state", "data": {"weather": {"temperature": 21.5, "conditions": "sunny"}},
            "_outputMethod": "set", "_call": {**call, "id": "call_01J"}, "_date": DATE, "_path": "†state.weather",
        }
        assert resolve([message], "†state.weather.conditions") == "sunny"

    def test_spec_nesting_example(self):
        """docs/protocol.md#references: †state.user.status appends {kind: state, data: {user: {status: <result>}}}."""
        [message] = out({"_tool": "t", "_outputPath": "†state.user.status"}, "inactive")
        assert (message["kind"], message["data"], message["_path"]) == (
            "state", {"user": {"status": "inactive"}}, "†state.user.status")

    def test_call_method_and_instance_are_carried(self):
        call = {"_tool": "log", "_outputPath": "†state.log", "_outputMethod": "push", "_instance": "①"}
        [message] = out(call, "line")
        assert message["_outputMethod"] == "push" and message["_instance"] == "①"
        assert message["_call"]["_outputMethod"] == "push" and message["_call"]["id"] == "call_1"

    def test_fan_out(self):
        call = {"_tool": "t", "_outputPath": "†state.a && †archive.b.c"}
        messages = out(call, [1, 2])
        assert [(m["kind"], m["data"], m["_path"]) for m in messages] == [
            ("state", {"a": [1, 2]}, "†state.a"), ("archive", {"b": {"c": [1, 2]}}, "†archive.b.c")]

    def test_plain_value_goes_to_first_alternative(self):
        [message] = out(BRANCHING, {"error": "looks like an error but is a plain value"})
        assert message["_path"] == "†state.success"

    @pytest.mark.parametrize("result", [None, 0, "", [], False])
    def test_falsy_results_are_written(self, result):
        [message] = out({"_outputPath": "†state.x"}, result)
        assert message["data"] == {"x": result}

    def test_whole_kind_path(self):
        [message] = out({"_outputPath": "†state"}, {"c": 3})
        assert message["data"] == {"c": 3} and message["_path"] == "†state"

    def test_no_output_path_writes_nothing(self):
        assert out({"_tool": "fireAndForget"}, {"any": "thing"}) == []
        assert out({"_tool": "thought"}, {"type": "text", "text": "hi"}) == []

    def test_unknown_call_method(self):
        with pytest.raises(UnknownMethodError):
            out({"_outputPath": "†state.x", "_outputMethod": "append"}, 1)

    def test_messages_are_canonical(self):
        for message in out({"_outputPath": "†state.a.0 && †x.y", "_instance": "②"}, {"v": 1}):
            assert normalize_message(message) == message


class TestReturnedMessages:
    def test_seed_001_branching_success(self):
        """Seed 001: `_outputPath: †state.success || †state.error`, the activity returns {data: {success: ...}}."""
        [message] = out(BRANCHING, {"type": "data", "kind": "state", "data": {"success": {"charged": 5}}})
        assert message["_path"] == "†state.success"
        assert message["data"] == {"success": {"charged": 5}}
        assert message["_outputMethod"] == "set"

    def test_seed_001_branching_error(self):
        returned = {"type": "data", "kind": "state", "data": {"error": {"type": "CardDeclined", "message": "no"}}}
        [message] = out(BRANCHING, returned)
        assert message["_path"] == "†state.error"
        log = [message]
        assert resolve(log, "†state.success") is MISSING
        assert resolve(log, "†state.success || †state.error") == {"type": "CardDeclined", "message": "no"}

    def test_state_shorthand_is_not_a_message(self):
        """docs/protocol.md#activities: only text/data/error types are messages; anything else is a plain value."""
        [message] = out(BRANCHING, {"type": "state", "data": {"error": 1}})
        assert message["_path"] == "†state.success"

    def test_branch_fans_out_its_group(self):
        call = {"_outputPath": "†state.ok || †state.err && †audit.err"}
        messages = out(call, {"type": "data", "kind": "audit", "data": {"err": "E"}})
        assert [(m["_path"], m["data"]) for m in messages] == [
            ("†state.err", {"err": "E"}), ("†audit.err", {"err": "E"})]

    def test_message_method_wins(self):
        [message] = out({"_outputPath": "†state.a || †state.log", "_outputMethod": "merge"},
                        {"type": "data", "kind": "state", "data": {"log": "x"}, "_outputMethod": "push"})
        assert (message["_path"], message["_outputMethod"]) == ("†state.log", "push")

    def test_own_path_is_honoured(self):
        returned = {"type": "data", "kind": "state", "data": {"error": {"why": "x"}}, "_path": "†state.error"}
        [message] = out(BRANCHING, returned)
        assert message["_path"] == "†state.error" and message["_outputMethod"] == "set"
        assert message["_call"]["id"] == "call_1" and message["_date"] == DATE

    def test_own_path_must_be_an_output_path(self):
        returned = {"type": "data", "kind": "state", "data": {"other": 1}, "_path": "†state.other"}
        with pytest.raises(WriteError, match=r"_path †state.other .* not an output path"):
            out(BRANCHING, returned)

    def test_unmatched_message_is_a_root_write_of_its_kind(self):
        returned = {"type": "data", "kind": "report", "data": {"title": "T"}, "description": "a report"}
        [message] = out(BRANCHING, returned)
        assert message["_path"] == "†report" and message["_outputMethod"] == "merge"
        assert message["description"] == "a report"
        log = [{"type": "data", "kind": "report", "data": {"author": "me"}}, message]
        assert resolve(log, "†report") == {"author": "me", "title": "T"}

    def test_unmatched_message_of_unaddressable_kind(self):
        with pytest.raises(WriteError, match="matches no output path"):
            out(BRANCHING, {"type": "data", "kind": "my kind", "data": {}})

    def test_text_message_is_appended_as_is(self):
        [message] = out(BRANCHING, {"type": "text", "text": "done"})
        assert message == {"type": "text", "role": "user", "text": "done",
                           "_call": {**BRANCHING, "id": "call_1"}, "_date": DATE}

    def test_error_message_is_appended_with_the_call_instance(self):
        call = {**BRANCHING, "_instance": "①"}
        returned = {"type": "error", "data": {"call": {}, "error": {"type": "E", "message": "m"}}}
        [message] = out(call, returned)
        assert message["type"] == "error" and message["_instance"] == "①" and message["_date"] == DATE

    def test_message_for_another_instance_is_refused(self):
        with pytest.raises(WriteError, match="instance '②'"):
            out({**BRANCHING, "_instance": "①"}, {"type": "data", "kind": "state", "data": {}, "_instance": "②"})

    def test_invalid_returned_message(self):
        with pytest.raises(MessageError, match="/role"):
            out(BRANCHING, {"type": "text", "role": "robot", "text": "x"})


class TestFailures:
    def test_branching_call_writes_error_object_to_last_alternative(self):
        messages = fail(BRANCHING)
        assert messages == [{
            "type": "data", "kind": "state",
            "data": {"error": {"error": {"type": "TimeoutError", "message": "took too long"}}},
            "_outputMethod": "set", "_call": {**BRANCHING, "id": "call_1"}, "_date": DATE, "_path": "†state.error",
        }]
        assert resolve(messages, "†state.error.error.type") == "TimeoutError"

    def test_last_alternative_fans_out(self):
        messages = fail({"_outputPath": "†state.ok || †state.err && †audit.last", "_instance": "①"})
        assert [(m["_path"], m["_instance"]) for m in messages] == [("†state.err", "①"), ("†audit.last", "①")]

    @pytest.mark.parametrize("call", [{"_tool": "t"}, {"_tool": "t", "_outputPath": "†state.a"},
                                      {"_tool": "t", "_outputPath": "†state.a && †state.b"},
                                      {"_tool": "t", "_outputPath": "†state.a ||"}])
    def test_otherwise_an_error_message(self, call):
        assert fail(call) == [{"type": "error", "data": {"call": {**call, "id": "call_1"}, "error": {
            "type": "TimeoutError", "message": "took too long"}}, "_date": DATE}]

    def test_error_message_carries_instance(self):
        [message] = fail({"_tool": "t", "_instance": "②"})
        assert message["_instance"] == "②"
        assert normalize_message(message) == message


class TestCheckWrite:
    def test_push_onto_non_array_is_refused(self):
        index = LogIndex([{"type": "state", "data": {"log": "text"}}])
        [message] = out({"_outputPath": "†state.log", "_outputMethod": "push"}, "x")
        with pytest.raises(WriteError, match=r"cannot push onto †state\.log"):
            check_write(index, message)

    def test_concat_needs_array(self):
        [message] = out({"_outputPath": "†state.xs", "_outputMethod": "concat"}, 3)
        with pytest.raises(WriteError, match="needs an array value"):
            check_write([], message)

    def test_valid_writes_pass(self):
        index = LogIndex([{"type": "state", "data": {"log": ["a"]}}])
        for message in out({"_outputPath": "†state.log && †state.other", "_outputMethod": "push"}, "b"):
            check_write(index, message)
        check_write(index, {"type": "text", "role": "user", "text": "x"})

    def test_instanced_writes_check_the_instance_fold(self):
        index = LogIndex([{"type": "state", "data": {"log": "global text"}}])
        [message] = out({"_outputPath": "†state.log", "_outputMethod": "push", "_instance": "①"}, "x")
        check_write(index, message)  # the instance's own fold has no log yet

    def test_root_push_of_context_message(self):
        with pytest.raises(WriteError, match="†state"):
            check_write(LogIndex([{"type": "state", "data": {"a": 1}}]),
                        {"type": "data", "kind": "state", "data": 1, "_outputMethod": "push"})
