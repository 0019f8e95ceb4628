"""A job's event stream (docs/protocol.md#events, seed 004) as clients and front ends read it, from real jobs.

Events are read through `JobHandle.events()` (the Python client's iterator over the job's Redis stream).
"""

from __future__ import annotations

import threading
import time

from agentq.protocol.history import build_history_message
from agentq.protocol.part_models import ActivityOutputPart, parse_part
from agentq.runtime.worker import InProcessWorker
from tests.integration.conftest import tool_schema

TIMEOUT = 15.0
DISPLAY = {"friendly_name": "📦 Shipping", "description": "Ships the parcel", "icon": "📦",
           "category": "logistics", "color": "#0055ff"}


def start_worker(harness, *, concurrency: int = 4) -> InProcessWorker:
    """`harness.worker()` with the broker polled every 0.1 s, so stopping it at teardown is quick."""
    runtime = harness.runtime()
    runtime.app.conf.broker_transport_options = {**(runtime.app.conf.broker_transport_options or {}),
                                                 "polling_interval": 0.1}
    worker = InProcessWorker(runtime, activities=True, engine=True, concurrency=concurrency).start()
    harness._workers.append(worker)
    return worker


def finished_job(harness, job: dict):
    """Submit `job`, wait for it; return (handle, events with technical details)."""
    handle = harness.client().submit(job)
    record = handle.result(timeout=TIMEOUT)
    return handle, record, list(handle.events(technical=True))


def pipeline(harness) -> dict:
    """Two dependent calls, the first with a reasoning and a tool with `x-display`."""
    harness.tools.register("ship", {**tool_schema("ship", params={"to": {"type": "string"}}), "x-display": DISPLAY})
    harness.tool("confirm", params={"tracking": {"type": "string"}})

    def ship(call):
        time.sleep(0.02)
        return {"tracking": f"TRK-{call['to']}"}

    harness.activities.register("ship", ship)
    harness.activities.register("confirm", lambda call: f"confirmed {call['tracking']}")
    start_worker(harness)
    return {"context": [{"type": "state", "data": {"city": "Lyon"}}],
            "calls": [
                {"_tool": "confirm", "tracking": "†state.parcel.tracking", "_outputPath": "†state.confirmation"},
                {"_tool": "ship", "to": "†state.city", "_reasoningForCall": "The parcel must leave today.",
                 "_outputPath": "†state.parcel"},
            ]}


def test_events_of_a_finished_job_in_order_with_seed_004_parts(harness):
    handle, record, events = finished_job(harness, pipeline(harness))
    assert record["status"] == "succeeded", record
    names = [e.event for e in events]
    assert names == ["job.queued", "job.started",
                     "thought", "call.started", "call.finished",
                     "call.started", "call.finished",
                     "job.finished"]
    ids = [e.id for e in events]
    assert ids == sorted(ids, key=lambda i: tuple(map(int, i.split("-")))) and len(set(ids)) == len(ids)
    for event in events:
        assert event.data["job_id"] == handle.id
        assert event.part is not None
        ActivityOutputPart.model_validate(event.part)  # every part has the seed-004 shape
        assert set(event.part) == set(ActivityOutputPart.model_fields)

    thought, ship_started, ship_finished, confirm_started, confirm_finished = events[2:7]
    assert thought.part["activity_type"] == "thought"
    assert thought.part["content"] == "The parcel must leave today."
    assert thought.data["call_id"] == ship_started.data["call_id"]

    for started, finished, tool, arguments, content in (
            (ship_started, ship_finished, "ship", {"to": "Lyon"}, '{"tracking": "TRK-Lyon"}'),
            (confirm_started, confirm_finished, "confirm", {"tracking": "TRK-Lyon"}, "confirmed TRK-Lyon")):
        call_id = started.data["call_id"]
        assert call_id.startswith("call_") and finished.data["call_id"] == call_id
        assert started.data["tool"] == finished.data["tool"] == tool
        assert started.data["attempt"] == 1
        assert finished.data["status"] == "done" and finished.data["duration_ms"] >= 0
        request, result = started.part, finished.part
        assert request["activity_type"] == "tool_request" and request["results"] is None
        assert request["tools"] == [{"name": tool, "arguments": arguments, "id": call_id}]  # no meta fields
        assert result["activity_type"] == "tool_result" and result["tools"] is None
        assert result["results"] == [{"name": tool, "content": content, "is_error": False, "call_id": call_id}]
        assert request["timestamp"] <= result["timestamp"]

    assert events[0].part["activity_type"] == events[1].part["activity_type"] == "activity"
    assert events[-1].data["status"] == "succeeded" and events[-1].data["error"] is None
    assert events[-1].part["activity_type"] == "activity"


def test_events_strip_technical_details_unless_asked(harness):
    handle, _, technical = finished_job(harness, pipeline(harness))
    plain = list(handle.events())
    assert [e.id for e in plain] == [e.id for e in technical]
    for event in plain:
        assert "technical_details" not in event.part
    details = {e.data["tool"]: e.part["technical_details"] for e in technical if e.event == "call.finished"}
    assert set(details) == {"ship", "confirm"}
    ship = details["ship"]
    assert ship["function_name"] == "ship" and ship["arguments"] == {"to": "Lyon"}
    assert ship["raw_result"] == {"tracking": "TRK-Lyon"} and ship["status"] == "success"
    assert ship["error_message"] is None
    assert ship["execution_time_ms"] >= 20  # the activity slept 20 ms
    assert details["confirm"]["raw_result"] == "confirmed TRK-Lyon"


def test_failed_call_parts_and_technical_details(harness):
    harness.tool("break_it", params={})

    def break_it(call):
        raise RuntimeError("boom")

    harness.activities.register("break_it", break_it)
    start_worker(harness)
    _handle, record, events = finished_job(harness, {"calls": [{"_tool": "break_it", "_outputPath": "†state.x"}]})
    assert record["status"] == "failed"
    [finished] = [e for e in events if e.event == "call.finished"]
    assert finished.data["status"] == "failed"
    assert finished.data["error"] == {"type": "RuntimeError", "message": "boom"}
    [result] = finished.part["results"]
    assert result["is_error"] is True and "boom" in result["content"]
    assert finished.part["display_info"]["icon"] == "❌"
    assert finished.part["technical_details"]["status"] == "error"
    assert finished.part["technical_details"]["error_message"] == "boom"
    last = events[-1]
    assert last.event == "job.finished" and last.data["status"] == "failed"
    assert last.part["activity_type"] == "error" and "break_it" in last.part["content"]


def test_resuming_after_an_id_yields_exactly_the_rest(harness):
    release, running = threading.Event(), threading.Event()
    harness.tool("first", params={})
    harness.tool("wait", params={"after": {}})
    harness.tool("last", params={"after": {}})
    harness.activities.register("first", lambda call: 1)

    def wait(call):
        running.set()
        release.wait(10)
        return 2

    harness.activities.register("wait", wait)
    harness.activities.register("last", lambda call: 3)
    start_worker(harness)
    handle = harness.client().submit({"calls": [
        {"_tool": "first", "_outputPath": "†state.a"},
        {"_tool": "wait", "after": "†state.a", "_outputPath": "†state.b"},
        {"_tool": "last", "after": "†state.b", "_outputPath": "†state.c"},
    ]})
    try:
        # a client follows the live stream and disconnects while the job is still running
        seen = []
        for event in handle.events():
            seen.append(event)
            if event.event == "call.started" and event.data["tool"] == "wait":
                break
        assert running.wait(10) and handle.status() == "running"
    finally:
        release.set()
    resumed = list(handle.events(after=seen[-1].id))  # reconnect: follows until the job ends
    assert handle.status() == "succeeded"
    everything = list(handle.events())
    assert [e.id for e in seen + resumed] == [e.id for e in everything]  # no loss, no duplicates
    assert [e.data for e in seen + resumed] == [e.data for e in everything]
    assert resumed[-1].event == "job.finished"

    # resuming from any point of a finished job's stream gives exactly what follows it
    for cut in range(len(everything)):
        rest = list(handle.events(after=everything[cut].id))
        assert [e.id for e in rest] == [e.id for e in everything[cut + 1:]]
    assert list(handle.events(after=everything[-1].id)) == []


def test_parts_emitted_by_an_activity_appear_in_the_stream(harness):
    harness.tool("chart", params={"kind": {"type": "string"}})

    def chart(call, context):
        context.emit({"type": "activity", "activity_type": "progress", "source": "charts", "content": "50%",
                      "timestamp": "2024-01-15T10:30:00.000000"})
        context.emit({"type": "activity", "activity_type": "chart_generation", "source": "charts",
                      "content": f"{call['kind']}_chart.png", "timestamp": "2024-01-15T10:30:01.000000",
                      "display_info": {"id": f"chart_{call['kind']}", "friendly_name": "📊 Bar chart",
                                       "icon": "📊", "category": "chart"}})
        return "drawn"

    harness.activities.register("chart", chart)
    start_worker(harness)
    _handle, record, events = finished_job(harness, {"calls": [{"_tool": "chart", "kind": "bar",
                                                                "_outputPath": "†state.chart"}]})
    assert record["status"] == "succeeded", record
    names = [e.event for e in events]
    assert names == ["job.queued", "job.started", "call.started", "part", "part", "call.finished", "job.finished"]
    started = events[2]
    progress, drawn = events[3], events[4]
    assert progress.data["call_id"] == drawn.data["call_id"] == started.data["call_id"]
    assert progress.part["activity_type"] == "progress" and progress.part["content"] == "50%"
    assert drawn.part["activity_type"] == "chart_generation" and drawn.part["content"] == "bar_chart.png"
    assert drawn.part["display_info"]["friendly_name"] == "📊 Bar chart"
    for part in (progress.part, drawn.part):
        parse_part(part)
        assert part["source"] == "charts"


def test_a_partial_part_emitted_by_an_activity_is_completed_to_the_seed_shape(harness):
    harness.tool("work", params={})

    def work(context):
        context.emit({"activity_type": "diagram_generation", "content": "timeline.png"})
        return "ok"

    harness.activities.register("work", work)
    start_worker(harness)
    _, record, events = finished_job(harness, {"calls": [{"_tool": "work", "_outputPath": "†state.w"}],
                                               "options": {"locale": "fr"}})
    assert record["status"] == "succeeded", record
    [part] = [e.part for e in events if e.event == "part"]
    parse_part(part)
    assert set(part) == set(ActivityOutputPart.model_fields)
    assert part["type"] == "activity" and part["activity_type"] == "diagram_generation"
    assert part["content"] == "timeline.png" and part["source"] and part["timestamp"]
    assert part["display_info"]["category"] == "diagram"
    assert part["display_info"]["friendly_name"] == "📊 Génération de diagramme"


def test_x_display_of_a_tool_appears_in_the_display_info(harness):
    _, _, events = finished_job(harness, pipeline(harness))
    by_tool = {(e.event, e.data.get("tool")): e.part for e in events if e.event.startswith("call.")}
    for event in ("call.started", "call.finished"):
        info = by_tool[(event, "ship")]["display_info"]
        assert info["id"] == "ship"
        assert {k: info[k] for k in DISPLAY} == DISPLAY
        default = by_tool[(event, "confirm")]["display_info"]  # a tool without x-display gets the defaults
        assert default["id"] == ("tool_request" if event == "call.started" else "tool_result")
        assert default["category"] == "tool"


def test_display_info_defaults_follow_the_jobs_locale(harness):
    job = pipeline(harness)
    job["options"] = {"locale": "fr"}
    _, _, events = finished_job(harness, job)
    info = {(e.event, e.data.get("tool")): e.part["display_info"] for e in events}
    plan = ("📋 Plan", "Le travail exécute ses appels prévus")  # a plan job's milestones: not "L'agent travaille"
    for milestone in ("job.queued", "job.started", "job.finished"):
        assert (info[(milestone, None)]["friendly_name"], info[(milestone, None)]["description"]) == plan
    assert info[("thought", None)]["friendly_name"] == "💭 Réflexion"
    assert info[("call.started", "confirm")]["friendly_name"] == "🔧 Appel d'outil"
    assert info[("call.finished", "confirm")]["friendly_name"] == "✅ Résultat"
    assert info[("call.started", "ship")]["friendly_name"] == DISPLAY["friendly_name"]  # x-display still wins


def test_history_has_one_consolidated_tool_call_per_call(harness):
    harness.tool("flaky", params={})
    attempts = []

    def flaky(call):
        attempts.append(1)
        if len(attempts) < 2:
            raise ConnectionError("try again")
        return "ok"

    harness.activities.register("flaky", flaky, retries=2, retry_backoff=0.05)
    job = pipeline(harness)
    job["calls"].append({"_tool": "flaky", "_outputPath": "†state.flaky"})
    _handle, record, events = finished_job(harness, job)
    assert record["status"] == "succeeded", record
    assert len(attempts) == 2
    call_ids = {e.data["call_id"]: e.data["tool"] for e in events if e.event == "call.finished"}
    assert sorted(call_ids.values()) == ["confirm", "flaky", "ship"]

    history = build_history_message([e.part for e in events if e.part is not None])
    assert history["role"] == "assistant"
    types = [p["activity_type"] for p in history["parts"]]
    assert types.count("tool_call") == 3
    assert "tool_request" not in types and "tool_result" not in types
    assert types[:2] == ["activity", "activity"] and types[-1] == "activity" and "thought" in types
    tool_calls = [p for p in history["parts"] if p["activity_type"] == "tool_call"]
    assert {p["tools"][0]["id"]: p["tools"][0]["name"] for p in tool_calls} == call_ids
    for part in tool_calls:
        [tool], [result] = part["tools"], part["results"]
        assert result["call_id"] == tool["id"] and result["name"] == tool["name"] and not result["is_error"]
        assert "technical_details" not in part
    ship = next(p for p in tool_calls if p["tools"][0]["name"] == "ship")
    assert ship["display_info"]["friendly_name"] == DISPLAY["friendly_name"]
    assert [a["type"] for a in history["activity_parts"]] == types
