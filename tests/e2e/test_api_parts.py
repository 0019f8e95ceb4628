"""The exact JSON a front end receives (seed 004), over real HTTP from a real job: every part of the parts
stream and of the history has the seed's field names and types, nulls where unused, the seed's timestamp
format, no technical details; history is chronological with one consolidated `tool_call` per call."""

from __future__ import annotations

import re
from datetime import datetime

import pytest

from tests.e2e.test_api import finished
from tests.integration.test_plan_jobs import start_worker

pytestmark = pytest.mark.timeout(120)

PART_KEYS = {"type", "activity_type", "source", "content", "timestamp", "tools", "results", "display_info"}
DISPLAY_KEYS = {"id", "friendly_name", "description", "icon", "category", "color"}
TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}$")  # "2024-01-15T10:30:00.000000"


def check_activity(part: dict) -> None:
    assert set(part) == PART_KEYS, sorted(part)
    assert part["type"] == "activity"
    assert isinstance(part["activity_type"], str) and isinstance(part["source"], str)
    assert part["content"] is None or isinstance(part["content"], str)
    assert TIMESTAMP.match(part["timestamp"]), part["timestamp"]
    display = part["display_info"]
    assert set(display) >= DISPLAY_KEYS and isinstance(display["friendly_name"], str) and display["id"]
    for item in part["tools"] or []:
        assert set(item) == {"name", "arguments", "id"}
        assert isinstance(item["arguments"], dict) and item["id"].startswith("call_")
    for item in part["results"] or []:
        assert set(item) == {"name", "content", "is_error", "call_id"}
        assert isinstance(item["content"], str) and isinstance(item["is_error"], bool)
    if part["activity_type"] == "tool_request":
        assert part["tools"] and part["results"] is None
    elif part["activity_type"] == "tool_result":
        assert part["results"] and part["tools"] is None
    elif part["activity_type"] == "tool_call":
        assert part["tools"] and part["results"]
    else:
        assert part["tools"] is None and part["results"] is None


@pytest.fixture
def job_of_every_kind(harness, serve_api):
    harness.tool("lookup", params={"city": {"type": "string"}}, required=["city"],
                 _reasoningForCall={"type": "string"})
    harness.tool("chart", params={})
    harness.tool("flaky", params={})

    @harness.activities.register("lookup")
    def lookup(call):
        return f"Current weather in {call['city']}: 18°C, partly cloudy"

    @harness.activities.register("chart")
    def chart(call, tool, context):
        context.emit({"activity_type": "chart_generation", "content": "sales_chart.png saved",
                      "display_info": {"id": "chart_bar", "friendly_name": "Génération de graphique barres"}})
        context.emit({"type": "text_output_stream", "text": "Here is the chart."})
        return {"chart": "sales_chart.png"}

    @harness.activities.register("flaky")
    def flaky(call):
        raise RuntimeError("Failed to connect to external API: timeout after 30s")

    start_worker(harness)
    api = serve_api()
    job = {"options": {"locale": "fr"}, "calls": [
        {"_tool": "lookup", "city": "Paris", "_reasoningForCall": "I need the weather first.",
         "_outputPath": "†state.weather"},
        {"_tool": "chart", "_outputPath": "†state.chart"},
        {"_tool": "flaky", "_outputPath": "†state.flaky"}]}
    job_id = api.request("POST", "/v1/jobs", json_body=job).json()["id"]
    record = finished(api, job_id)
    assert record["status"] == "failed"
    return api, job_id


def test_every_streamed_part_has_the_seed_shape(job_of_every_kind):
    api, job_id = job_of_every_kind
    parts = [m.json() for m in api.sse(f"/v1/jobs/{job_id}/events?format=parts&markers=false") if m.data]
    kinds = {p.get("activity_type", p["type"]) for p in parts}
    assert {"activity", "thought", "tool_request", "tool_result", "chart_generation", "error",
            "text_output_stream"} <= kinds, kinds
    for part in parts:
        if part["type"] == "activity":
            check_activity(part)
        else:
            assert part == {"type": "text_output_stream", "text": "Here is the chart."}
    thought = next(p for p in parts if p.get("activity_type") == "thought")
    assert thought["content"] == "I need the weather first."
    assert thought["display_info"] == {"id": "thought", "friendly_name": "💭 Réflexion",
                                       "description": "Raisonnement de l'agent", "icon": "💭",
                                       "category": "reasoning", "color": None}
    failed = next(p for p in parts if p.get("activity_type") == "tool_result" and p["results"][0]["is_error"])
    assert failed["results"][0]["content"] == "RuntimeError: Failed to connect to external API: timeout after 30s"
    assert failed["display_info"]["friendly_name"] == "❌ Erreur"
    chart = next(p for p in parts if p.get("activity_type") == "chart_generation")
    assert chart["display_info"]["friendly_name"] == "Génération de graphique barres"
    error = parts[-1]
    assert error["activity_type"] == "error" and "flaky" in error["content"]


def test_history_is_chronological_with_one_tool_call_per_call(job_of_every_kind):
    api, job_id = job_of_every_kind
    history = api.request("GET", f"/v1/jobs/{job_id}/history").json()
    calls = api.request("GET", f"/v1/jobs/{job_id}/calls").json()
    activities = [p for p in history["parts"] if p["type"] == "activity"]
    for part in activities:
        check_activity(part)
    tool_calls = [p for p in activities if p["activity_type"] == "tool_call"]
    assert sorted(p["tools"][0]["id"] for p in tool_calls) == sorted(c["id"] for c in calls)
    assert not [p for p in activities if p["activity_type"] in ("tool_request", "tool_result")]
    by_call = {p["tools"][0]["id"]: p for p in tool_calls}
    lookup = by_call[calls[0]["id"]]
    assert lookup["tools"][0] == {"name": "lookup", "arguments": {"city": "Paris"}, "id": calls[0]["id"]}
    assert lookup["results"][0]["content"] == "Current weather in Paris: 18°C, partly cloudy"
    assert lookup["display_info"]["id"] == "tool_call"
    moments = [datetime.fromisoformat(p["timestamp"]) for p in activities]
    assert moments == sorted(moments)  # chronological
    assert {"type": "text_output", "text": "Here is the chart."} in history["parts"]
    assert [a["type"] for a in history["activity_parts"]] == [p["activity_type"] for p in activities]
    assert all("activity_type" not in a and "technical_details" not in a for a in history["activity_parts"])
