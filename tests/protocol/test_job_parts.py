"""A job's own milestone parts (`job.queued`, `job.started`, `job.finished`) say what kind of job it is: a plan job's
do not claim that "the agent is working"; an agent job's do; a held call's part says it waits for a reviewer."""

from __future__ import annotations

import pytest

from agentq.cli.render import LiveView
from agentq.engine.finalize import job_end
from agentq.engine.render import job_started
from agentq.protocol.jobs import plan_job
from agentq.runtime.service import _queued
from agentq.store.codecs import decode_job
from agentq.store.event_codec import pack, unpack

TOOLS = {"send": {"type": "object",
                  "properties": {"_tool": {"const": "send"}, "to": {"type": "string"}, "_output": {}}}}
LIVE: dict[str, dict] = {"send": {}}


@pytest.mark.parametrize("locale", ["en", "fr"])
def test_a_plan_jobs_milestones_show_the_plan_and_an_agent_jobs_the_agent(locale):
    plan = plan_job({"calls": [{"_tool": "send", "to": "a"}], "options": {"locale": locale}}, tools=TOOLS,
                    live_activities=LIVE)
    agent = plan_job({"context": [{"type": "text", "text": "go"}], "options": {"locale": locale}}, tools=TOOLS,
                     live_activities=LIVE)
    plan_parts = [_queued(plan).part, job_started(plan.id, locale=locale, source="agentq").part,
                  job_end(plan.id, decode_job({"id": plan.id, "kind": "plan", "status": "running",
                                               "options": f'{{"locale": "{locale}"}}'}), [], None,
                          source="agentq")[1].part]
    for part in plan_parts:
        assert part is not None
        info = part["display_info"]
        assert (info["id"], info["friendly_name"], info["category"]) == ("plan", "📋 Plan", "plan")
        assert info["description"] in ("The job runs its planned calls", "Le travail exécute ses appels prévus")
    started = job_started(plan.id, locale=locale, source="agentq").to_dict()
    packed = pack(started, plan.id)  # stored as compactly as the default display: a marker
    assert f'"d":"{locale} plan"' in packed and "📋" not in packed and unpack(packed, plan.id) == started
    agent_part = _queued(agent).part
    assert agent_part is not None
    assert agent_part["display_info"]["description"] in ("The agent is working", "L'agent travaille")


def test_a_held_calls_event_has_an_approval_part_and_a_line_in_the_live_view():
    plan = plan_job({"calls": [{"_tool": "send", "to": "a"}], "options": {"approval": ["send"], "locale": "fr"}},
                    tools=TOOLS, live_activities=LIVE)
    (call,) = plan.calls
    assert call.approval and call.awaited  # held, so awaited: the job does not end while it waits
    assert not call.record().decides_outcome  # still fire-and-forget for the job's outcome
    envelope = call.held_event(plan.id).to_dict()
    assert unpack(pack(envelope, plan.id), plan.id) == envelope
    assert envelope["event"] == "call.awaiting_approval" and envelope["tool"] == "send"
    assert envelope["part"]["activity_type"] == "approval"
    assert envelope["part"]["display_info"]["friendly_name"] == "✋ Validation"
    lines: list[str] = []
    LiveView(lines.append).show(envelope)
    assert lines == [f"  ✋ send                   awaiting approval — agentq approve|reject {plan.id} {call.id}"]
