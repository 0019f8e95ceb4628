"""A rollout route to the model (SPEC §17: `"to": ""`): a share of a coded tool's calls is answered by the model
(the fake Messages API through the real SDK), the rest by the activity; the report counts both, with the model's
cost on its route."""

from __future__ import annotations

from collections import Counter

import pytest

from agentq.protocol.records import CallMode
from tests.fake_anthropic import Answer, FakeAnthropic, RecordedRequest
from tests.integration.conftest import Harness, store_of

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

    rows = {row["route"]: row for row in client.rollouts.report()["tools"]["sendEmail"]["routes"]}
    assert (rows[""]["calls"], rows[""]["success_rate"]) == (routes[""], 1.0)
    assert rows[""]["cost_usd"] == pytest.approx(routes[""] * PER_REQUEST_USD)
    assert (rows["*"]["calls"], rows["*"]["cost_usd"]) == (routes["*"], 0.0)
