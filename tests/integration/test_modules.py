"""Module calls end to end (docs/protocol.md#modules): a clean-room child job with its own loop, state and events, run
by the real SDK against the fake Messages API, real Redis and a real Celery worker."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fake_anthropic import Answer, FakeAnthropic, RecordedRequest
from tests.integration.conftest import Harness, store_of, tool_schema

SECRET = "pin-4417-never-shown"
ESCAPES = {"escapeUp": "../outside", "escapeAbsolute": "/etc/passwd"}


def write_module(folder: Path, name: str, module: dict) -> None:
    path = folder / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(module), encoding="utf-8")


@pytest.fixture
def modules(tmp_path: Path) -> Path:
    write_module(tmp_path, "researcher", {
        "context": [{"type": "text", "role": "system", "text": "You are the Researcher."}],
        "tools": ["lookup"],
        "output": {"type": "object", "properties": {"facts": {"type": "array"}}, "required": ["facts"]},
        "input": {"type": "object", "properties": {"question": {"type": "string"}}},
    })
    return tmp_path


class ResearchHarness(Harness):
    """A harness whose `lookup` activity keeps what it was called with (`seen`: the call and its context)."""

    def __init__(self, redis_url: str):
        super().__init__(redis_url)
        self.seen: list[dict] = []


@pytest.fixture
def research(redis_url: str, anthropic_env: FakeAnthropic, modules: Path) -> Iterator[ResearchHarness]:
    harness = ResearchHarness(redis_url)
    try:
        yield _research(harness, modules)
    finally:
        harness.close()


def _research(harness: ResearchHarness, modules: Path) -> ResearchHarness:
    harness.tool("lookup", params={"topic": {"type": "string"}}, output={"type": "array"}, required=["topic"])
    harness.tool("research", params={"question": {"type": "string"}}, output={"type": "object"},
                 _module={"const": "researcher"}, _imports={"const": ["brief"]})
    harness.tool("askAnyone", params={"question": {"type": "string"}}, output={"type": "string"},
                 _module={"const": "anonymous"}, _imports={"const": ["brief"]})
    for name, reference in ESCAPES.items():
        harness.tool(name, params={}, output={}, _module={"const": reference})
    seen = harness.seen

    @harness.activities.register("lookup")
    def lookup(call, tool, context):
        seen.append({"call": call, "context": context.messages})
        return [f"{call['topic']} is old", f"{call['topic']} is tall"]

    harness.on_close(seen.clear)
    harness.worker(llm="anthropic", module_dirs=[modules])
    return harness


def by_role(parent: list[Answer], child: list[Answer]):
    """Answer the parent's ticks and the module's ticks (told apart by the module's system text) in order."""

    def answer(request: RecordedRequest) -> Answer:
        system = " ".join(block["text"] for block in request.body.get("system") or [])
        queue = child if "You are the Researcher." in system else parent
        return queue.pop(0)

    return answer


def test_a_module_call_runs_a_child_job_whose_output_is_the_calls_result(
        research: ResearchHarness, anthropic_env: FakeAnthropic):
    anthropic_env.responder = by_role(
        parent=[Answer.solution({"calls": [{"_tool": "research", "question": "the lighthouse",
                                            "_outputPath": "†state.research"}], "output": None}),
                Answer.solution({"calls": [], "output": "done"})],
        child=[Answer.solution({"calls": [{"_tool": "lookup", "topic": "lighthouse",
                                           "_outputPath": "†state.facts"}], "output": None}),
               Answer.solution({"calls": [], "output": {"facts": ["lighthouse is old"]}})])
    record = research.run({"context": [
        {"type": "data", "kind": "brief", "data": {"topic": "lighthouses"}},
        {"type": "data", "kind": "secret", "data": {"pin": SECRET}},
        {"type": "text", "text": "Research the lighthouse."}], "tools": ["research"]}, timeout=40, tenant="lab")
    assert record["status"] == "succeeded", record
    assert record["tenant"] == "lab"
    assert record["state"] == {"research": {"facts": ["lighthouse is old"]}}
    assert record["usage"]["requests"] == 4  # the child's requests are counted on the parent
    child_requests = [r for r in anthropic_env.requests if "Researcher" in json.dumps(r.body.get("system"))]
    assert len(child_requests) == 2
    for request in child_requests:  # clean room: the imported brief and the input, never the secret
        text = json.dumps(request.body)
        assert SECRET not in text and "lighthouses" in text and "the lighthouse" in text
    assert research.seen[0]["call"]["topic"] == "lighthouse"
    store = store_of(research.client())
    events = [e for _, e in store.read_events(record["id"])]
    relayed = [e for e in events if e.get("relayed_from")]
    assert relayed and all(e["part"]["source"] == "researcher" for e in relayed if e.get("part"))
    assert any(e["event"] == "call.finished" and e.get("tool") == "lookup" for e in relayed)
    child = store.record(relayed[0]["relayed_from"])
    assert child.status.value == "succeeded" and child.state == {"facts": ["lighthouse is old", "lighthouse is tall"]}
    assert child.tenant == "lab"  # a module's child job is its parent's tenant's


@pytest.mark.parametrize("tool", sorted(ESCAPES))
def test_module_paths_that_leave_the_module_folders_are_refused(
        research: ResearchHarness, anthropic_env: FakeAnthropic, tool: str):
    anthropic_env.script(
        Answer.solution({"calls": [{"_tool": tool, "_outputPath": "†state.x"}], "output": None}),
        Answer.solution({"calls": [], "output": "gave up"}))
    record = research.run({"context": [{"type": "text", "text": "go"}], "tools": [tool]}, timeout=30)
    assert record["status"] == "succeeded"
    second = json.dumps(anthropic_env.requests[1].body["messages"][-1])
    assert "ModuleRefused" in second


def is_anonymous_child(request: RecordedRequest) -> bool:
    """The anonymous module's requests: a solution schema whose `calls` offers no tool."""
    calls = (request.solution_schema or {}).get("properties", {}).get("calls", {})
    return "items" not in calls


def test_an_anonymous_module_call_succeeds_through_the_messages_api(
        research: ResearchHarness, anthropic_env: FakeAnthropic):
    """The empty module has no tools: its request must still be one the Messages API accepts (no empty anyOf)."""
    parent = [Answer.solution({"calls": [{"_tool": "askAnyone", "question": "how tall is the lighthouse?",
                                          "_outputPath": "†state.answer"}], "output": None}),
              Answer.solution({"calls": [], "output": "done"})]
    child = [Answer.solution({"calls": [], "output": "about 50 metres"})]
    anthropic_env.responder = lambda request: (child if is_anonymous_child(request) else parent).pop(0)
    record = research.run({"context": [
        {"type": "data", "kind": "brief", "data": {"topic": "lighthouses"}},
        {"type": "data", "kind": "secret", "data": {"pin": SECRET}},
        {"type": "text", "text": "Ask about the lighthouse."}], "tools": ["askAnyone"]}, timeout=40)
    assert anthropic_env.refusals == []
    assert record["status"] == "succeeded", record
    assert record["state"] == {"answer": "about 50 metres"}
    assert record["usage"]["requests"] == 3
    [request] = [r for r in anthropic_env.requests if is_anonymous_child(r)]
    assert request.solution_schema["properties"]["calls"] == {"type": "array", "maxItems": 0}
    text = json.dumps(request.body)  # clean room: the imported brief and the input, nothing else of the parent
    assert "lighthouses" in text and "how tall is the lighthouse?" in text and SECRET not in text


@pytest.fixture
def guarded(harness: Harness, anthropic_env: FakeAnthropic, modules: Path) -> Harness:
    """A module `checker` whose one tool, `confirm`, waits for a reviewer's approval; `check` calls it."""
    write_module(modules, "checker", {
        "context": [{"type": "text", "role": "system", "text": "You are the Checker."}], "tools": ["confirm"]})
    confirm = tool_schema("confirm", params={"what": {"type": "string"}}, output={"type": "string"})
    confirm["x-approval"] = "required"
    harness.tools.register("confirm", confirm)
    harness.tool("check", params={"question": {"type": "string"}}, output={}, _module={"const": "checker"})
    harness.activities.register("confirm", lambda call, tool, context: "confirmed")
    harness.worker(llm="anthropic", module_dirs=[modules])
    return harness


@pytest.mark.timeout(30)
@pytest.mark.parametrize("decision", ["cancel", "reject"])
def test_a_module_job_canceled_or_its_call_rejected_resumes_the_parent_at_once(
        guarded: Harness, anthropic_env: FakeAnthropic, decision: str):
    """The parent's module call holds its lease until its child job ends: a child job canceled (or ended by a
    reviewer's rejection) resumes that call at once, so the parent goes on instead of waiting out the lease."""
    child_answers = [Answer.solution({"calls": [{"_tool": "confirm", "what": "launch", "_outputPath": "†state.ok"}],
                                      "output": None})]
    if decision == "reject":
        child_answers.append(Answer.solution({"calls": [], "output": "not confirmed"}))
    parent = [Answer.solution({"calls": [{"_tool": "check", "question": "may we launch?",
                                          "_outputPath": "†state.check"}], "output": None}),
              Answer.solution({"calls": [], "output": "stopped"})]

    def answer(request: RecordedRequest) -> Answer:
        child = "You are the Checker." in json.dumps(request.body.get("system"))
        return (child_answers if child else parent).pop(0)

    anthropic_env.responder = answer
    client = guarded.client()
    handle = client.submit({"context": [{"type": "text", "text": "Check, then launch."}], "tools": ["check"]})
    events = handle.events()
    # the child's first tick ended (relayed to the parent's stream): its `confirm` call awaits approval
    child_id = next(e.data["relayed_from"] for e in events
                    if e.event == "tick.finished" and e.data.get("relayed_from"))
    child = client.job(child_id)
    if decision == "cancel":
        assert child.cancel() == "canceled"
    else:
        [held] = [c for c in child.calls() if c["status"] == "awaiting_approval"]
        child.reject(held["id"], reason="not today")
    finished = next(e for e in events if e.event == "call.finished" and e.data.get("tool") == "check")
    if decision == "cancel":
        assert finished.data["status"] == "failed"
        assert "canceled" in finished.data["error"]["message"] and child_id in finished.data["error"]["message"]
    else:
        assert finished.data["status"] == "done"
    record = handle.result(timeout=20)
    assert record["status"] == "succeeded" and record["result"] == "stopped", record
    expected = {"check": "not confirmed"} if decision == "reject" else {}
    assert record["state"] == expected
    assert child.record()["status"] == ("canceled" if decision == "cancel" else "succeeded")
