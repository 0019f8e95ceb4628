"""`store/event_codec.py`: every envelope reads back exactly as it was built (values, JSON types, key order), the
stored form is small, and entries stored whole (by older agentq versions) read as they are."""

from __future__ import annotations

import json
import math
from typing import Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentq.protocol.envelopes import (
    CallFinished,
    CallRetrying,
    CallStarted,
    JobFinished,
    JobQueued,
    JobStarted,
    Part,
    Thought,
    TickFinished,
    TickStarted,
)
from agentq.protocol.events import (
    activity_part,
    complete_part,
    error_part,
    skill_loading_part,
    technical_details,
    text_part,
    thought_part,
    tool_request_part,
    tool_result_part,
)
from agentq.protocol.sensitive import mask
from agentq.store.event_codec import MARK, pack, unpack

JOB = "job_01M85AZ1YSN8E2JJKD4WVQNZ3Q"
CALL = "call_01M85AZ1YR66E3F8XMBJ8VFQ16"
DISPLAY = {"friendly_name": "Météo", "icon": "🌦️", "description": None, "color": "#00f"}


def text(value: Any) -> str:
    """The stored JSON text of a value (as `StateStore` dumps it): equal texts mean equal values, JSON types
    and key order."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def assert_round_trip(envelope: dict, job_id: str = JOB) -> str:
    stored = pack(envelope, job_id)
    assert text(unpack(stored, job_id)) == text(envelope)
    assert unpack(stored, job_id) == json.loads(text(envelope))
    return stored


def started(locale: str = "en", *, display: dict | None = None, arguments: dict | None = None,
            name: str = "weather") -> dict:
    part = tool_request_part(call_id=CALL, name=name, arguments=arguments or {"city": "Paris"}, source="agentq",
                             locale=locale, display=display)
    return CallStarted(job_id=JOB, call_id=CALL, tool=name, attempt=1, part=part).to_dict()


def finished(result: Any, *, locale: str = "en", display: dict | None = None, error: str | None = None,
             name: str = "weather", started_at: float = 1_795_475_605.4950, finished_at: float = 1_795_475_605.4961,
             **fields: Any) -> dict:
    status: Literal["success", "error"] = "error" if error else "success"
    technical = technical_details(name, {"city": "Paris"}, None if error else result, started_at, finished_at,
                                  status, error)
    part = tool_result_part(call_id=CALL, name=name, content=error or result, is_error=bool(error), source="agentq",
                            locale=locale, display=display, technical=technical)
    return CallFinished(job_id=JOB, call_id=CALL, tool=name, status="failed" if error else "done",
                        duration_ms=technical["execution_time_ms"], part=part,
                        error={"type": "RuntimeError", "message": error} if error else None, **fields).to_dict()


class Opaque:
    def __repr__(self) -> str:
        return "<Opaque thing>"


ENVELOPES = {
    "job queued": JobQueued(job_id=JOB, kind="plan", calls=3, part=activity_part("Job queued", source="agentq")),
    "job queued fr": JobQueued(job_id=JOB, kind="agent", calls=0,
                               part=activity_part("Job queued", source="agentq", locale="fr")),
    "job started": JobStarted(job_id=JOB, part=activity_part("Job started", source="agentq", locale="fr-FR")),
    "job failed": JobFinished(job_id=JOB, status="failed", error={"type": "X", "message": "boom"},
                              part=error_part("Job failed: boom", source="agentq", locale="fr")),
    "job canceled": JobFinished(job_id=JOB, status="canceled", running=[CALL],
                                part=activity_part("Job canceled", source="agentq")),
    "job without part": JobStarted(job_id=JOB),
    "call started (instance)": CallStarted(job_id=JOB, call_id=CALL, tool="weather", attempt=2, instance="i1",
                                           part=tool_request_part(call_id=CALL, name="weather", arguments={},
                                                                  source="agentq")),
    "call retrying": CallRetrying(job_id=JOB, call_id=CALL, tool="weather", attempt=1, retry_in_s=0.5,
                                  error={"type": "Flaky", "message": "again"}),
    "call absorbed": CallFinished(job_id=JOB, call_id=CALL, tool="weather", status="failed", duration_ms=2.0,
                                  error={"type": "X", "message": "m"}, absorbed=True),
    "call after cancel": CallFinished(job_id=JOB, call_id=CALL, tool="weather", status="done", duration_ms=1.5,
                                      after_cancel=True),
    "thought": Thought(job_id=JOB, call_id=CALL, part=thought_part("I need the weather first.", source="agentq")),
    "thought fr after cancel": Thought(job_id=JOB, part=thought_part("Je réfléchis", source="agentq", locale="fr"),
                                       after_cancel=True),
    "tick started": TickStarted(job_id=JOB, tick=2, attempt=2, corrective=True),
    "tick finished": TickFinished(job_id=JOB, tick=1, calls=2, problems=[{"path": "/calls/0", "message": "x"}],
                                  usage={"input_tokens": 10, "output_tokens": 3}, output=True),
    "text part": Part(job_id=JOB, call_id=CALL, part=text_part("Here is the chart.")),
    "history text part": Part(job_id=JOB, part=text_part("Done.", stream=False)),
    "activity part": Part(job_id=JOB, call_id=CALL, part=complete_part(
        {"activity_type": "progress", "content": "half way"}, source="agentq", locale="en")),
    "chart part with its display": Part(job_id=JOB, call_id=CALL, part=complete_part(
        {"activity_type": "chart_generation", "content": "bars",
         "display_info": {"friendly_name": "Génération de graphique barres"}}, source="james", locale="fr")),
    "skill loading": Part(job_id=JOB, part=skill_loading_part("maps", "Module maps loaded", source="agentq",
                                                              display={"description": "Maps", "icon": "🗺️"})),
}


@pytest.mark.parametrize("name", list(ENVELOPES))
def test_every_envelope_kind_reads_back_exactly(name: str):
    assert_round_trip(ENVELOPES[name].to_dict())


@pytest.mark.parametrize("locale", ["en", "fr", "fr_CA", "de"])
def test_calls_in_every_locale_read_back_exactly(locale: str):
    assert_round_trip(started(locale))
    assert_round_trip(finished({"temp": 18}, locale=locale))
    assert_round_trip(finished(None, locale=locale, error="RuntimeError: timeout after 30s"))


@pytest.mark.parametrize("result", [
    0, 1.5, -3, True, None, "sunny", "", "18", "0", "null", '"quoted"', "Zürich ☀️", {"temp": 18, "city": "Zürich"},
    [1, "two", {"three": 3.0}], {"nested": {"deep": [None, False]}}, 10**30, 1e-7, {"1": "str key"},
])
def test_results_of_every_type_read_back_exactly(result: Any):
    assert_round_trip(finished(result))


def test_a_result_that_is_not_json_keeps_its_repr():
    envelope = finished({"when": Opaque()})
    assert envelope["part"]["technical_details"]["raw_result"] == repr({"when": Opaque()})
    stored = pack(envelope, JOB)
    assert unpack(stored, JOB) == json.loads(text(envelope))
    assert repr({"when": Opaque()}) in stored  # not derivable from the content: stored


def test_an_x_display_and_masked_arguments_read_back_exactly():
    arguments = mask({"card": {"number": "4111 1111 1111 1111", "holder": "Ada"}}, ["/card/number"])
    assert_round_trip(started(display=DISPLAY, arguments=arguments))
    assert_round_trip(finished({"last4": "1111"}, display=DISPLAY))
    assert_round_trip(finished(None, display=DISPLAY, error="declined"))


def test_a_non_finite_result_reads_back_as_the_same_json():
    envelope = finished(float("nan"))
    restored = unpack(pack(envelope, JOB), JOB)
    assert math.isnan(restored["part"]["technical_details"]["raw_result"])
    assert text(restored) == text(envelope)


def test_what_is_derivable_is_not_stored():
    """The call's events store its id, tool, arguments, result and timestamps once; the rest is derived."""
    for envelope in (started(), finished({"temp": 18})):
        stored = pack(envelope, JOB)
        assert stored.startswith('{"' + MARK + '":')
        assert stored.count(CALL) == 1 and JOB not in stored
        assert '"Paris"' in stored and stored.count("Paris") == 1
        for derived in ("display_info", "Tool call", "Result", "function_name", "null", "success", "2026-"):
            assert derived not in stored, (derived, stored)
        assert len(stored.encode()) < len(text(envelope).encode()) / 3


def test_a_relayed_envelope_keeps_its_own_job_and_source():
    child = "job_child"
    envelope = finished("sunny")
    relayed = {**envelope, "job_id": child, "part": {**envelope["part"], "source": "weather_module"},
               "relayed_from": child}
    stored = assert_round_trip(relayed, JOB)
    assert child in stored and "weather_module" in stored
    assert unpack(stored, JOB)["job_id"] == child


def test_keys_the_store_scripts_append_survive():
    """commit.lua marks a late call's events `after_cancel`, cancel.lua lists the running calls: both insert a
    key before the entry's closing brace."""
    envelope = finished(7)
    late = pack(envelope, JOB)[:-1] + ',"after_cancel":true}'
    assert unpack(late, JOB) == {**envelope, "after_cancel": True}
    assert list(unpack(late, JOB))[-1] == "after_cancel"
    canceled = ENVELOPES["job canceled"].to_dict()
    canceled.pop("running")
    stored = pack(canceled, JOB)
    assert unpack(stored[:-1] + f',"running":["{CALL}"]}}', JOB) == {**canceled, "running": [CALL]}


def test_an_entry_stored_whole_reads_as_it_is():
    """Entries written before entries were packed (jobs live across upgrades)."""
    for envelope in (started(), finished({"temp": 18}), ENVELOPES["job queued"].to_dict()):
        old = text(envelope)
        assert text(unpack(old, JOB)) == old
        assert text(unpack(old[:-1] + ',"after_cancel":true}', JOB)) == old[:-1] + ',"after_cancel":true}'


@pytest.mark.parametrize("envelope", [
    {"event": "call.finished", "job_id": JOB, "~": 1, "call_id": CALL},  # a key named like the mark
    {"event": "call.finished", "job_id": JOB, "c": "short key", "call_id": CALL},  # a key named like a short key
    {"job_id": JOB, "event": "thought"},  # another key order
    {"event": "something.new", "job_id": JOB, "x": 1},  # an event this version does not know
    {"event": "thought"},  # no job
    {"event": ["odd"], "job_id": JOB},
])
def test_unusual_envelopes_are_stored_so_they_read_back_exactly(envelope: dict):
    stored = assert_round_trip(envelope)
    assert text(unpack(stored[:-1] + ',"after_cancel":true}', JOB)) == text({**envelope, "after_cancel": True})


def test_unusual_parts_are_stored_so_they_read_back_exactly():
    base = finished({"temp": 18})
    part, technical = base["part"], base["part"]["technical_details"]
    variants = [
        {**part, "timestamp": "2026-11-23T23:13:25.495789Z"},  # not the seed format
        {**part, "timestamp": "2026-11-23 23:13:25.495789"},
        {**part, "timestamp": "0999-01-01T00:00:00.000001"},
        {**part, "timestamp": "1969-12-31T23:59:59.999999"},  # before the epoch
        {**part, "timestamp": 5},
        {**part, "source": None},
        {**part, "source": "agentq-worker"},
        {**part, "activity_type": "tool_call"},
        {**part, "results": [{**part["results"][0], "is_error": 0}]},
        {**part, "results": [{**part["results"][0], "name": "other"}]},
        {**part, "results": [{**part["results"][0], "content": 18}]},
        {**part, "results": part["results"] * 2},
        {**part, "results": []},
        {**part, "tools": [{"name": "weather", "arguments": {}, "id": CALL}], "results": None},
        {**part, "tools": [{"id": CALL, "name": "weather", "arguments": {}}]},
        {**part, "display_info": {**part["display_info"], "color": "red"}},
        {**part, "display_info": {**part["display_info"], "extra": None}},
        {**part, "display_info": dict(reversed(part["display_info"].items()))},
        {**part, "display_info": "not a dict"},
        {**part, "technical_details": {**technical, "execution_time_ms": 1}},  # duration_ms is a float
        {**part, "technical_details": {**technical, "function_name": "other"}},
        {**part, "technical_details": {**technical, "raw_result": 18.0}},  # the content says {"temp": 18}
        {**part, "technical_details": {**technical, "raw_result": {"temp": 18.0}}},
        {**part, "technical_details": {**technical, "raw_result": "{\"temp\": 18}"}},  # a str that is the content
        {**part, "technical_details": {**technical, "timestamp": None, "status": "weird", "error_message": ""}},
        {**part, "technical_details": {**technical, "extra": 1}},
        {k: v for k, v in part.items() if k != "technical_details"},
        {**part, "type": "activity_v2"},
        {**part, "unknown": 1},
    ]
    for variant in variants:
        assert_round_trip({**base, "part": variant})


def test_an_execution_time_equal_to_the_duration_only_as_a_python_number_reads_back_exactly():
    envelope = finished(3)
    envelope["duration_ms"] = 99.5
    assert_round_trip(envelope)
    envelope["duration_ms"] = 2.0
    for same_number in (2, 2.0, "2.0"):  # equal in Python or in text, not as JSON
        envelope["part"]["technical_details"]["execution_time_ms"] = same_number
        assert_round_trip(envelope)
    envelope["duration_ms"], envelope["part"]["technical_details"]["execution_time_ms"] = 1, True
    assert_round_trip(envelope)
    del envelope["duration_ms"]
    assert_round_trip(envelope)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8)
    | st.sampled_from(["weather", CALL, JOB, "agentq", "success", "en", "2026-11-23T23:13:25.495789", "0", "null"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6)
PATHS = [("job_id",), ("call_id",), ("tool",), ("status",), ("duration_ms",), ("part", "type"),
         ("part", "activity_type"), ("part", "source"), ("part", "content"), ("part", "timestamp"),
         ("part", "tools"), ("part", "results", 0, "name"), ("part", "results", 0, "content"),
         ("part", "results", 0, "is_error"), ("part", "results", 0, "call_id"), ("part", "display_info", "id"),
         ("part", "display_info", "color"), ("part", "technical_details", "function_name"),
         ("part", "technical_details", "raw_result"), ("part", "technical_details", "execution_time_ms"),
         ("part", "technical_details", "timestamp"), ("part", "technical_details", "status"),
         ("part", "technical_details", "error_message"), ("part", "technical_details", "arguments")]


@settings(max_examples=300, deadline=None)
@given(result=JSON_VALUES, changes=st.lists(st.tuples(st.sampled_from(PATHS), JSON_VALUES), max_size=3),
       error=st.booleans(), locale=st.sampled_from(["en", "fr"]))
def test_any_change_to_a_call_event_reads_back_exactly(result: Any, changes: list, error: bool, locale: str):
    envelope = finished(result, locale=locale, error="boom" if error else None)
    for path, value in changes:
        target = envelope
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = value
    assert_round_trip(envelope)
    assert_round_trip(started(locale, arguments={"x": result}))


def test_an_int_too_long_to_write_as_text_is_stored_as_it_is():
    envelope = finished(5)
    envelope["part"]["technical_details"]["raw_result"] = 10**5000  # Python refuses to write it in decimal
    with pytest.raises(ValueError):
        pack(envelope, JOB)  # as the whole envelope's JSON would be refused
    envelope["part"]["technical_details"]["raw_result"] = 10**40
    assert_round_trip(envelope)
