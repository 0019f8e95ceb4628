"""A fire-and-forget call (no output path) that needs a reviewer holds its job: the demo's order job with
`"approval": ["sendConfirmation"]` on a real `agentq worker -m workers` process and the private Redis. The job
stays open, its stream says `call.awaiting_approval`, the approval runs the call, and only then the job ends. The
same for an agent job whose model gives such a call with its final output (the fake Messages API)."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from agentq.client import Client
from tests.fake_anthropic import Answer
from tests.integration.test_agent_jobs import OUTPUT, agent, ticks_then_latent  # noqa: F401 (agent: a fixture)

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

ACTIVITIES = ["validateOrder", "reserveStock", "quoteShipping", "chargePayment", "sendConfirmation", "recordAudit"]


def demo_order(**options: object) -> dict:
    job = json.loads(resources.files("workers").joinpath("jobs/demo_order.json").read_text(encoding="utf-8"))
    job["options"] = {**job["options"], **options}
    return job


def first(events, name: str):
    """The first event named `name` of a followed stream (the stream ends with the job: then it fails)."""
    seen = []
    for event in events:
        seen.append(event.event)
        if event.event == name:
            return event
    raise AssertionError(f"the stream ended without {name}: {seen}")


@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_the_demo_order_waits_for_its_confirmation_to_be_decided_then_ends(worker_procs, redis_url,
                                                                          decision):
    worker = worker_procs.start(module="workers", pool="threads", concurrency=2)
    worker_procs.wait_live(worker, ACTIVITIES)
    with Client(redis_url) as client:
        handle = client.submit(demo_order(approval=["sendConfirmation"]))
        held = first(handle.events(follow=True), "call.awaiting_approval")
        calls = {c["id"]: c for c in handle.calls()}
        confirmation = held.data["call_id"]
        assert calls[confirmation]["tool"] == "sendConfirmation" and held.data["tool"] == "sendConfirmation"
        assert held.part is not None and held.part["activity_type"] == "approval"
        assert handle.status() == "awaiting_approval"  # the job did not end: the call waits for a reviewer
        assert calls[confirmation]["status"] == "awaiting_approval"

        if decision == "approve":
            handle.approve(confirmation)
        else:
            handle.reject(confirmation, reason="no e-mail today")
        record = handle.result(timeout=60)
        events = [e.data for e in handle.events(follow=False)]
        calls = {c["id"]: c for c in handle.calls()}

    # a rejected fire-and-forget call does not decide the order's outcome, as any fire-and-forget failure
    assert record["status"] == "succeeded", record
    assert calls[confirmation]["status"] == ("done" if decision == "approve" else "failed")
    names = [(e["event"], e.get("call_id")) for e in events]
    ended = names.index(("call.finished", confirmation))
    assert names.index(("call.awaiting_approval", confirmation)) < ended < names.index(("job.finished", None))
    assert names.count(("call.awaiting_approval", confirmation)) == 1
    if decision == "approve":
        assert not any(e["event"] == "call.started" and e.get("call_id") == confirmation
                       for e in events[:names.index(("call.awaiting_approval", confirmation))])


def test_an_agents_held_fire_and_forget_call_keeps_its_job_open_until_approved_and_run(agent,  # noqa: F811
                                                                                      anthropic_env):
    """An agent's solution with a fire-and-forget call of a tool needing approval and its final output at once:
    the job does not end with that output while the call waits; approved, the call runs, then the job ends."""
    anthropic_env.responder = ticks_then_latent([
        Answer.solution({"calls": [{"_tool": "weather", "city": "Rome"}], "output": {"answer": "asked"}}),
    ])
    client = agent.client()
    handle = client.submit({"context": [{"type": "text", "text": "Ask for Rome's weather."}], "tools": ["weather"],
                            "output": OUTPUT, "options": {"approval": ["weather"]}})
    held = first(handle.events(follow=True), "call.awaiting_approval")
    assert held.data["tool"] == "weather"
    assert handle.status() == "awaiting_approval"
    assert [entry for entry in agent.log if entry[0] == "start"] == []
    handle.approve(held.data["call_id"])
    record = handle.result(timeout=30)
    assert record["status"] == "succeeded" and record["result"] == {"answer": "asked"}
    assert [entry[1:2] for entry in agent.log if entry[0] == "start"] == [(None,)]  # it ran once, before the end
    names = [e.event for e in handle.events(follow=False)]
    assert names.index("call.finished") < names.index("job.finished")
