"""Webhooks through the HTTP API and the `agentq` command: a refused webhook is a 422 with its pointer, a job's
deliveries are listed by `GET /v1/jobs/{id}/deliveries` and `agentq deliveries ID`."""

from __future__ import annotations

import json

import pytest

from tests.e2e.test_api import finished
from tests.integration.procs import cli, wait_for
from tests.integration.test_webhooks import FAST, FAST_ENV
from tests.integration.webhook_receiver import Receiver


@pytest.fixture
def receiver():
    r = Receiver([503])
    yield r
    r.close()


def test_deliveries_are_listed_by_the_api_and_the_cli_and_refusals_are_422(harness, serve_api, receiver,
                                                                           redis_url):
    harness.settings = harness.settings.model_copy(update=FAST)
    harness.tool("echo", params={"text": {"type": "string"}}, required=["text"])
    harness.activities.register("echo", lambda call: {"said": call["text"]})
    harness.worker()
    api = serve_api()

    refused = api.request("POST", "/v1/jobs", json_body={"calls": [], "options": {"webhook": {
        "url": "https://hooks.example.com/x", "events": ["job.done"]}}})
    assert refused.status == 422, refused.body
    problems = refused.json()["error"]["problems"]
    assert sorted(p["pointer"] for p in problems) == ["/options/webhook/events/0", "/options/webhook/url"]
    assert api.request("GET", "/v1/jobs").json() == []  # nothing was written

    job = {"calls": [{"_tool": "echo", "text": "hi", "_outputPath": "†state.echo"}],
           "options": {"webhook": {"url": receiver.url}}}
    job_id = api.request("POST", "/v1/jobs", json_body=job).json()["id"]
    assert finished(api, job_id)["status"] == "succeeded"
    receiver.delivered(lambda r: r.verified)

    def listed() -> list[dict] | None:
        found = api.request("GET", f"/v1/jobs/{job_id}/deliveries").json()
        return found if found and found[0]["state"] == "delivered" else None

    (delivery,) = wait_for(listed, 10, "the delivery listed as delivered")
    assert delivery["type"] == "job.finished" and delivery["url"] == receiver.url
    assert [a["status"] for a in delivery["attempts"]] == [503, 200]
    assert delivery["id"] == receiver.received[0].headers["webhook-id"]
    assert api.request("GET", "/v1/jobs/nope/deliveries").status == 404

    table = cli(redis_url, "deliveries", job_id, **FAST_ENV)
    assert table.returncode == 0, table.stderr
    assert delivery["id"] in table.stdout and "delivered" in table.stdout and "answered 503" in table.stdout
    as_json = cli(redis_url, "deliveries", job_id, "--json", **FAST_ENV)
    assert json.loads(as_json.stdout) == [delivery]
    unknown = cli(redis_url, "deliveries", "nope", **FAST_ENV)
    assert unknown.returncode != 0 and "nope" in unknown.stderr
