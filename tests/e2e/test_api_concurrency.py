"""Job concurrency keys over HTTP and the `agentq` command (docs/tenants.md): a job over its key's limit is created
(201)
`waiting`, listed and shown as such (the API, the event stream, `agentq status`), and runs once the job holding the
key ends; a malformed `options.concurrency` is one 422 naming every problem by its pointer, with nothing written."""

from __future__ import annotations

import pytest

from tests.e2e.test_api import finished, raw_keys
from tests.e2e.test_cli import agentq

pytestmark = pytest.mark.timeout(120)

ONE = {"concurrency": [{"key": "acct-42", "limit": 1}]}


def test_a_job_over_its_key_waits_visibly_then_runs(harness, echo, serve_api):
    api = serve_api()
    first = api.request("POST", "/v1/jobs", json_body={
        "calls": [{"_tool": "gate", "text": "a", "_outputPath": "†state.a"}], "options": ONE})
    assert first.status == 201 and echo.entered.wait(20)
    second = api.request("POST", "/v1/jobs", json_body={
        "calls": [{"_tool": "echo", "text": "b", "_outputPath": "†state.b"}], "options": ONE})
    assert second.status == 201, second.body
    job_id = second.json()["id"]
    assert second.json()["status"] == "waiting"
    assert api.request("GET", f"/v1/jobs/{job_id}").json()["status"] == "waiting"
    assert [r["id"] for r in api.request("GET", "/v1/jobs?status=waiting").json()] == [job_id]
    shown = agentq("status", job_id, env={"AGENTQ_REDIS_URL": harness.settings.redis_url}, timeout=60)
    assert shown.returncode == 0 and shown.stdout.strip() == "waiting", shown.stderr
    echo.opened.set()
    assert finished(api, first.json()["id"])["status"] == "succeeded"
    record = finished(api, job_id)
    assert record["status"] == "succeeded" and record["state"] == {"b": {"said": "b"}}
    queued = [m for m in api.sse(f"/v1/jobs/{job_id}/events") if m.event == "job.queued"]
    assert [m.json()["status"] for m in queued] == ["waiting", "queued"]


def test_a_malformed_concurrency_option_is_one_422_with_every_pointer_and_nothing_written(harness, echo, serve_api):
    api = serve_api()
    before = raw_keys(harness)
    bad = api.request("POST", "/v1/jobs", json_body={"calls": [{"_tool": "echo", "text": "x"}], "options": {
        "concurrency": [{"key": 7, "limit": 1}, {"key": "k", "limit": -1}, {"key": "k", "limit": 1.5}]}})
    assert bad.status == 422, bad.body
    error = bad.json()["error"]
    assert error["type"] == "JobValidationError"
    assert {p["pointer"] for p in error["problems"]} == {
        "/options/concurrency/0/key", "/options/concurrency/1/limit", "/options/concurrency/2/key",
        "/options/concurrency/2/limit"}
    assert any("duplicate key 'k'" in p["message"] for p in error["problems"])
    assert raw_keys(harness) == before
