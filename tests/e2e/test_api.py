"""The HTTP API over real HTTP (SPEC §14): a real uvicorn server, real Redis, real Celery workers."""

from __future__ import annotations

import pytest

from tests.integration.conftest import store_of

pytestmark = pytest.mark.timeout(120)


def echo_tools(harness) -> None:
    harness.tool("echo", params={"text": {"type": "string"}}, required=["text"])

    @harness.activities.register("echo")
    def echo(call):
        return {"said": call["text"]}


def test_a_plan_job_submitted_over_http_runs_and_its_record_calls_and_history_are_served(harness, serve_api):
    echo_tools(harness)
    harness.worker()
    api = serve_api()
    job = {"calls": [{"_tool": "echo", "text": "hi", "_outputPath": "†state.first"},
                     {"_tool": "echo", "text": "†state.first.said", "_outputPath": "†state.second"}]}
    created = api.request("POST", "/v1/jobs", json_body=job)
    assert created.status == 201, created.body
    job_id = created.json()["id"]
    assert created.headers["location"] == f"/v1/jobs/{job_id}"
    messages = list(api.sse(f"/v1/jobs/{job_id}/events"))
    assert messages[0].retry == 2000
    assert messages[-1].event == "job.finished"
    record = api.request("GET", f"/v1/jobs/{job_id}").json()
    assert record["status"] == "succeeded"
    assert record["state"] == {"first": {"said": "hi"}, "second": {"said": "hi"}}
    calls = api.request("GET", f"/v1/jobs/{job_id}/calls").json()
    assert [c["status"] for c in calls] == ["done", "done"]
    assert calls[1]["depends_on"] == [calls[0]["id"]]
    history = api.request("GET", f"/v1/jobs/{job_id}/history").json()
    assert [p["activity_type"] for p in history["parts"] if p["activity_type"] == "tool_call"] == ["tool_call"] * 2
    assert store_of(harness.client()).job_status(job_id).value == "succeeded"
