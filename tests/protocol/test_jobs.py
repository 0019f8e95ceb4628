"""plan_job: whole-job validation and the call graph the runtime executes (pure, no Redis)."""

from __future__ import annotations

import pytest

from agentq.errors import JobValidationError
from agentq.protocol.jobs import JobLimits, plan_job


def tool(name: str, **props) -> dict:
    return {"type": "object", "description": name,
            "properties": {"_tool": {"type": "string", "const": name}, **props, "_output": {}}}


TOOLS = {
    "fetch": tool("fetch", url={"type": "string"}),
    "parse": tool("parse", text={"type": "string"}, _scopes={"type": "array", "items": {"enum": ["state", "input"]}}),
    "think": tool("think", topic={"type": "string"}),
    "pinned": {**tool("pinned"), "properties": {**tool("pinned")["properties"],
                                                "_activity": {"const": "pinnedWorker"}}},
}
LIVE = {"fetch": {"queue": "io"}, "parse": {}}


def plan(job: dict, **kwargs):
    return plan_job(job, tools=TOOLS, live_activities=LIVE, **kwargs)


def problems(job: dict, **kwargs) -> dict[str, str]:
    with pytest.raises(JobValidationError) as caught:
        plan(job, **kwargs)
    return {p.pointer: p.message for p in caught.value.problems}


def test_calls_get_modes_and_their_dependency_counts():
    p = plan({"context": [{"type": "input", "data": {"u": "x"}}], "calls": [
        {"_tool": "parse", "text": "†state.page", "_outputPath": "†state.doc", "_scopes": ["state"]},
        {"_tool": "fetch", "url": "†input.u", "_outputPath": "†state.page"},
        {"_tool": "think", "topic": "†state.doc.title", "_outputPath": "†state.idea"},
        {"_tool": "pinned"},
        {"_tool": "fetch", "url": "http://x"},
    ]})
    parse, fetch, think, pinned, forget = p.calls
    assert p.kind == "plan" and p.id.startswith("job_")
    assert (fetch.mode, parse.mode) == ("explicit", "explicit")
    assert (think.mode, think.activity) == ("latent", "")
    assert (pinned.mode, pinned.activity) == ("explicit", "pinnedWorker")
    assert fetch.record().task == "" and fetch.record().queue == ""  # routing is the runtime's
    assert parse.waiting == 1 and fetch.dependents == [parse.id]
    assert think.waiting == 1 and parse.dependents == [think.id]
    assert [c.id for c in p.ready] == [fetch.id, pinned.id, forget.id]
    assert forget.awaited is False and pinned.awaited is False and think.awaited is True
    assert parse.scopes == ["state"] and parse.needs_log and not pinned.needs_log
    assert parse.call["_activity"] == "parse"


def test_instanced_writes_only_block_the_same_instance_or_global_readers():
    p = plan({"context": [{"type": "input", "data": {"u": "x"}}], "calls": [
        {"_tool": "fetch", "url": "†input.u", "_outputPath": "†state.page", "_instance": "a"},
        {"_tool": "fetch", "url": "†state.page", "_outputPath": "†state.copy", "_instance": "a"},
        {"_tool": "fetch", "url": "†state.page || †input.u", "_outputPath": "†state.copy", "_instance": "b"},
    ]})
    writer, same, other = p.calls
    assert writer.dependents == [same.id] and other.waiting == 0


def test_every_problem_is_named_with_its_pointer_at_once():
    found = problems({"bogus": 1, "options": {"locale": "xx"}, "calls": [
        {"_tool": "nope"},
        {"_tool": "fetch", "url": 3, "_outputPath": "†state..a"},
        {"_tool": "parse", "text": "†state.", "_scopes": ["secrets"]},
        {"_tool": "fetch", "url": "x", "_outputMethod": "append"},
    ]})
    assert set(found) >= {"/bogus", "/options/locale", "/calls/0/_tool", "/calls/1/url", "/calls/1/_outputPath",
                          "/calls/2/text", "/calls/3/_outputMethod"}
    assert any(p.startswith("/calls/2/_scopes") for p in found)


def test_cycles_and_unsatisfiable_references_are_rejected():
    cycle = problems({"calls": [
        {"_tool": "fetch", "url": "†state.b", "_outputPath": "†state.a"},
        {"_tool": "fetch", "url": "†state.a", "_outputPath": "†state.b"},
    ]})
    assert any("reference cycle" in m for m in cycle.values())
    missing = problems({"calls": [{"_tool": "fetch", "url": "†state.nobody.writes.this", "_outputPath": "†state.x"}]})
    assert "/calls/0/url" in missing


def test_limits_tools_and_shapes():
    assert "" in problems({"calls": []}, size=2_000_000)
    assert "/calls" in problems({"calls": [{"_tool": "fetch"}] * 3}, limits=JobLimits(max_calls=2))
    assert "/tools/0" in problems({"tools": ["ghost"], "calls": []})
    assert "/context/0/role" in problems({"context": [{"type": "text", "role": "robot", "text": "hi"}]})
    assert "/output/type" in problems({"output": {"type": "no-such-type"}})
    with pytest.raises(JobValidationError):
        plan_job(["not", "an", "object"], tools=TOOLS)


def test_inline_tools_and_agent_jobs():
    p = plan({"tools": ["fetch", tool("inline", q={"type": "string"})], "output": {"type": "string"}})
    assert p.kind == "agent" and p.calls == [] and set(p.tools) == {"fetch", "inline"}
    assert p.options["max_ticks"] == 8 and p.options["locale"] == "en"
    output = p.solution["properties"]["output"]
    assert output == {"anyOf": [{"type": "string"}, {"type": "null"}]}
