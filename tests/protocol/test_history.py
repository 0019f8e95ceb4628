"""Tests of agentq.protocol.history: history messages, legacy activity dicts and stream markers."""

import json

from agentq.protocol.events import (
    activity_part,
    technical_details,
    text_part,
    thought_part,
    tool_request_part,
    tool_result_part,
)
from agentq.protocol.history import (
    STREAM_MARKER_PREFIX,
    build_history_message,
    is_stream_marker,
    legacy_activity,
    parse_stream_marker,
    stream_marker,
    stream_parts,
)
from agentq.protocol.part_models import ActivityOutputPart

SEARCH_DISPLAY = {"friendly_name": "🔍 Recherche web", "icon": "🔍", "category": "search"}


def _request(call_id, name="search_web", **kw):
    return tool_request_part(call_id=call_id, name=name, arguments={"query": call_id}, source="agentq", **kw)


def _result(call_id, name="search_web", content="ok", is_error=False):
    tech = technical_details(name, {"query": call_id}, content, 0.0, 0.5, "error" if is_error else "success")
    return tool_result_part(call_id=call_id, name=name, content=content, is_error=is_error, source="agentq",
                            technical=tech)


def _kinds(parts):
    return [p.get("activity_type", p["type"]) for p in parts]


def test_stream_sequence_becomes_one_history_message():
    request, result = _request("call_123", display=SEARCH_DISPLAY), _result("call_123", content="18°C")
    stream = [
        text_part("Let me search for that information..."),
        request, stream_marker(request),
        result, stream_marker(result),
        text_part("Based on my search, "), text_part("here are the results..."),
    ]
    message = build_history_message(stream)
    assert message["role"] == "assistant"
    assert _kinds(message["parts"]) == ["text_output", "tool_call", "text_output"]
    assert message["parts"][0] == {"type": "text_output", "text": "Let me search for that information..."}
    assert message["parts"][2] == {"type": "text_output", "text": "Based on my search, here are the results..."}
    call = message["parts"][1]
    assert call["tools"] == request["tools"] and call["results"] == result["results"]
    assert call["timestamp"] == request["timestamp"]
    assert call["display_info"]["friendly_name"] == "🔍 Recherche web"
    assert "technical_details" not in call
    ActivityOutputPart.model_validate(call)
    assert message["activity_parts"] == [legacy_activity(call)]
    assert message["activity_parts"][0]["type"] == "tool_call"


def test_consolidation_keeps_request_positions_and_order():
    thought = thought_part("I need two searches", source="agentq")
    parts = [thought, _request("a"), _request("b"), text_part("waiting"), _result("b"), _result("a"),
             activity_part("tick 2", source="agentq")]
    message = build_history_message(parts)
    assert _kinds(message["parts"]) == ["thought", "tool_call", "tool_call", "text_output", "activity"]
    assert [p["tools"][0]["id"] for p in message["parts"][1:3]] == ["a", "b"]
    assert [p["results"][0]["call_id"] for p in message["parts"][1:3]] == ["a", "b"]
    assert [p["type"] for p in message["activity_parts"]] == ["thought", "tool_call", "tool_call", "activity"]


def test_unmatched_request_and_result_stay():
    message = build_history_message([_request("a"), _result("zzz"), _request("b"), _result("b")])
    assert _kinds(message["parts"]) == ["tool_request", "tool_result", "tool_call"]
    assert all("technical_details" not in p for p in message["parts"])


def test_result_before_its_request_is_not_matched():
    message = build_history_message([_result("a"), _request("a")])
    assert _kinds(message["parts"]) == ["tool_result", "tool_request"]


def test_failed_result_is_consolidated_with_its_request():
    message = build_history_message([_request("a"), _result("a", content="boom", is_error=True)])
    (call,) = message["parts"]
    assert call["activity_type"] == "tool_call"
    assert call["results"][0]["is_error"] is True


def test_text_folding():
    parts = [text_part("a"), text_part("b"), text_part("x", stream=False), text_part("c"),
             stream_marker(thought_part("t", source="s")), text_part("d")]
    message = build_history_message(parts)
    # existing text_output parts are kept as they are; a dropped marker does not split a run of chunks
    assert message["parts"] == [{"type": "text_output", "text": "ab"}, {"type": "text_output", "text": "x"},
                                {"type": "text_output", "text": "cd"}]
    assert message["activity_parts"] == []


def test_history_strips_technical_details_and_keeps_inputs():
    result = _result("a")
    parts = [_request("a"), result]
    message = build_history_message(parts, role="assistant")
    assert "technical_details" not in json.dumps(message)
    assert result["technical_details"] is not None
    assert parts[0]["activity_type"] == "tool_request"


def test_empty_history():
    assert build_history_message([]) == {"role": "assistant", "parts": [], "activity_parts": []}


def test_legacy_activity_dict():
    part = _result("a")
    legacy = legacy_activity(part)
    assert legacy["type"] == "tool_result"
    assert "activity_type" not in legacy and "technical_details" not in legacy
    assert {k: legacy[k] for k in ("source", "timestamp", "results", "display_info")} == {
        k: part[k] for k in ("source", "timestamp", "results", "display_info")}


def test_stream_marker_round_trip():
    part = _result("a", content="18°C ☀️")
    marker = stream_marker(part)
    assert marker["type"] == "text_output_stream"
    assert marker["text"].startswith(STREAM_MARKER_PREFIX + '{"type":"tool_result",')
    assert "18°C ☀️" in marker["text"]  # ensure_ascii=False
    assert ", " not in marker["text"].split("content")[0]  # compact separators
    assert is_stream_marker(marker)
    assert parse_stream_marker(marker["text"]) == legacy_activity(part)


def test_parse_stream_marker_rejects_other_text():
    assert parse_stream_marker("hello") is None
    assert parse_stream_marker(STREAM_MARKER_PREFIX + "{not json") is None
    assert parse_stream_marker(STREAM_MARKER_PREFIX + "[1]") is None
    assert parse_stream_marker(None) is None
    assert not is_stream_marker(text_part("hello"))
    assert not is_stream_marker({"type": "text_output", "text": STREAM_MARKER_PREFIX + "{}"})


def test_stream_parts():
    part = _result("a")
    sent = stream_parts(part)
    assert len(sent) == 2
    assert sent[0] == {k: v for k, v in part.items() if k != "technical_details"}
    assert parse_stream_marker(sent[1]["text"]) == legacy_activity(part)
    assert stream_parts(part, markers=False) == sent[:1]
    assert stream_parts(text_part("hi")) == [text_part("hi")]


def test_parts_appended_out_of_their_timestamps_order_are_told_in_time_order():
    """Parallel calls stamp a part, then append it: the stream can hold them a few ms out of order."""
    late, early = _request("late"), _request("early")
    late["timestamp"], early["timestamp"] = "2030-01-01T00:00:00.005000Z", "2030-01-01T00:00:00.002000+00:00"
    chunk = {"type": "text_output_stream", "text": "after the late request"}
    message = build_history_message([late, chunk, early])
    assert [p.get("tools", [{}])[0].get("id") for p in message["parts"] if p["type"] == "activity"] == ["early",
                                                                                                     "late"]
    assert message["parts"][-1] == {"type": "text_output", "text": "after the late request"}  # it kept its place
    same = [_request("one"), _request("two")]
    same[0]["timestamp"] = same[1]["timestamp"] = "2030-01-01T00:00:00Z"
    assert [p["tools"][0]["id"] for p in build_history_message(same)["parts"]] == ["one", "two"]  # stream order
