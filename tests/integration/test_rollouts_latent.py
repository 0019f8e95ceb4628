"""A rollout route to the model (docs/rollouts.md: `"to": ""`): a share of a coded tool's calls is answered by the model
(the fake Messages API through the real SDK), the rest by the activity; the report counts both, with the model's
cost on its route."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from agentq.metrics import render_metrics
from agentq.protocol.records import CallMode
from tests.fake_anthropic import Answer, FakeAnthropic, RecordedRequest
from tests.integration.conftest import Harness, store_of
from tests.integration.test_metrics import samples, value
from tests.integration.test_rollouts import counted

pytestmark = pytest.mark.timeout(120)

PER_REQUEST_USD = (100 * 3 + 20 * 15) / 1e6  # the fake's usage at the default model's price ($3 / $15 per MTok)


def test_a_latent_share_is_answered_by_the_model(harness: Harness, anthropic_env: FakeAnthropic):
    harness.tool("sendEmail", params={"to": {"type": "string"}}, output={"type": "object"}, required=["to"])
    harness.activities.register("sendEmail", lambda call: {"by": "activity", "to": call["to"]})

    def answer(request: RecordedRequest) -> Answer:
        assert request.is_latent, request.last_user_text[:300]
        return Answer.solution({"output": {"by": "model"}})

    anthropic_env.responder = answer
    harness.worker(llm="anthropic", concurrency=8)
    client = harness.client()
    client.rollouts.set("sendEmail", {"routes": [{"to": "", "share": 0.4}]})

    handle = client.submit({"calls": [{"_tool": "sendEmail", "to": f"u{i}", "_outputPath": f"†state.r{i}"}
                                      for i in range(40)]})
    record = handle.result(timeout=60)
    assert record["status"] == "succeeded", record["error"]
    records = list(store_of(client).call_records(handle.id).values())
    routes = Counter(r.route for r in records)
    assert set(routes) == {"", "*"} and sum(routes.values()) == 40, routes
    for r in records:
        by = record["state"][f"r{r.index}"]["by"]
        assert (r.mode, by) == ((CallMode.LATENT, "model") if r.route == "" else (CallMode.EXPLICIT, "activity"))
    assert len(anthropic_env.requests) == routes[""]
    shown = {c["id"]: (c["route"], c["mode"]) for c in handle.calls()}  # the calls view names each one's route
    assert shown == {r.id: (r.route, r.mode.value) for r in records}

    rows = {row["route"]: row for row in counted(client, {"sendEmail": 40})["sendEmail"]["routes"]}
    assert (rows[""]["calls"], rows[""]["success_rate"]) == (routes[""], 1.0)
    assert rows[""]["cost_usd"] == pytest.approx(routes[""] * PER_REQUEST_USD)
    assert (rows["*"]["calls"], rows["*"]["cost_usd"]) == (routes["*"], 0.0)

    found = samples(render_metrics(client._parts)[0].decode())  # the same figures, as Prometheus metrics
    assert value(found, "agentq_rollout_calls_total", tool="sendEmail", route="(latent)", outcome="done") == routes[""]
    assert value(found, "agentq_rollout_calls_total", tool="sendEmail", route="(usual)", outcome="done") == routes["*"]
    assert value(found, "agentq_rollout_cost_usd_total", tool="sendEmail", route="(latent)") == pytest.approx(
        routes[""] * PER_REQUEST_USD)
    assert value(found, "agentq_rollout_duration_seconds", tool="sendEmail", route="(usual)", quantile="0.95") == \
        rows["*"]["p95_s"]


def test_an_agents_calls_are_routed_by_the_rule_as_its_ticks_plan_them(harness: Harness, anthropic_env: FakeAnthropic):
    """The calls an agent's model streams are routed when the tick plans them (engine/agent.py): the tenant route
    sends acme's to version 2, another tenant's follow the usual resolution."""
    harness.tool("sendEmail", params={"to": {"type": "string"}}, output={"type": "object"}, required=["to"])
    harness.activities.register("sendEmail", lambda call: {"by": "v1"})
    harness.activities.register("sendEmail", lambda call: {"by": "v2"}, version="2")
    ticks = {"first": Answer.solution({"calls": [{"_tool": "sendEmail", "to": "a@example.com",
                                                  "_outputPath": "†state.sent"}], "output": None}),
             "then": Answer.solution({"calls": [], "output": "sent"})}

    def answer(request: RecordedRequest) -> Answer:
        return ticks["then"] if "sent" in json.dumps(request.body["messages"][-1]) else ticks["first"]

    anthropic_env.responder = answer
    harness.worker(llm="anthropic", concurrency=4)
    admin = harness.client()
    admin.rollouts.set("sendEmail", {"routes": [{"to": "sendEmail@2", "tenants": ["acme"]}]})
    job = {"context": [{"type": "text", "text": "Send the mail."}], "tools": ["sendEmail"]}
    for tenant, by, route, activity in (("acme", "v2", "sendEmail@2", "sendEmail@2"),
                                        ("default", "v1", "*", "sendEmail")):
        client = harness.client(tenant=tenant)
        handle = client.submit(job)
        record = handle.result(timeout=60)
        assert (record["status"], record["state"]) == ("succeeded", {"sent": {"by": by}}), record
        (call,) = store_of(client).call_records(handle.id).values()
        assert (call.route, call.activity, call.queue) == (route, activity, f"agentq.activity.{activity}")
