"""Extended thinking (docs/rate-limits.md), end to end: the real `anthropic` SDK against the fake Messages API (which
refuses thinking with a forced tool, and a thinking block left out or changed in a later request), real Redis, real
Celery workers."""

from __future__ import annotations

import json
import threading

import pytest

from agentq.errors import JobValidationError, ToolSchemaError
from tests.fake_anthropic import Answer, FakeAnthropic, RecordedRequest
from tests.integration.conftest import Harness, store_of, tool_schema

pytestmark = pytest.mark.timeout(120)

THINKING = {"budget_tokens": 2048}


@pytest.fixture
def thinker(harness: Harness, anthropic_env: FakeAnthropic) -> Harness:
    harness.tool("step", params={"n": {"type": "integer"}}, output={"type": "integer"}, required=["n"])
    harness.tools.register("judge", {**tool_schema("judge", params={"text": {"type": "string"}},
                                                   output={"type": "string"}), "x-thinking": {"budget_tokens": 1500}})

    @harness.activities.register("step")
    def step(call):
        return call["n"] * 10

    harness.worker(llm="anthropic", concurrency=4)
    return harness


def job(**options) -> dict:
    return {"context": [{"type": "text", "text": "Take three steps, thinking first."}], "tools": ["step", "judge"],
            "output": {"type": "string"}, "options": {"thinking": THINKING, **options}}


def events_of(harness: Harness, job_id: str) -> list[dict]:
    return [e for _, e in store_of(harness.client()).read_events(job_id)]


def test_a_three_tick_job_with_thinking_sends_every_earlier_thinking_block_back_byte_for_byte(
        thinker: Harness, anthropic_env: FakeAnthropic):
    def agent(request: RecordedRequest) -> Answer:
        k = (len(request.body["messages"]) + 1) // 2
        if k == 3:
            return Answer.solution({"calls": [], "output": "three steps"}, thinking=["All done: answer."])
        return Answer.solution({"calls": [{"_tool": "step", "n": k, "_outputPath": f"†state.s{k}"}], "output": None},
                               thinking=[f"Tick {k}: I should take step {k}.", "And check it."],
                               redacted_thinking=1 if k == 2 else 0)

    anthropic_env.responder = agent
    record = thinker.run(job(), timeout=60)
    assert record["status"] == "succeeded", record
    assert record["state"] == {"s1": 10, "s2": 20}
    requests = anthropic_env.requests
    assert len(requests) == 3 and not anthropic_env.refusals
    for request in requests:
        assert request.body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
        assert request.body["tool_choice"] == {"type": "auto"}  # a forced tool is refused with thinking
    sent = anthropic_env.thought  # tool_use id -> the thinking blocks the fake sent before it
    assert len(sent) == 3
    for k, request in enumerate(requests[1:], start=1):
        assistants = [m for m in request.body["messages"] if m["role"] == "assistant"]
        assert len(assistants) == k
        for turn in assistants:
            *thinking, tool_use = turn["content"]
            assert tool_use["type"] == "tool_use"
            assert [list(b.items()) for b in thinking] == [list(b.items()) for b in sent[tool_use["id"]]]
            for block in sent[tool_use["id"]]:  # byte for byte in the request's own JSON
                assert json.dumps(block, ensure_ascii=False, separators=(",", ":")).encode() in request.raw \
                    or json.dumps(block, ensure_ascii=False).encode() in request.raw
    second = requests[2].body["messages"][3]["content"]
    assert [b["type"] for b in second] == ["thinking", "thinking", "redacted_thinking", "tool_use"]
    thinking = [e for e in events_of(thinker, record["id"]) if e["event"] == "thinking"]
    assert [(e["tick"], e["part"]["content"]) for e in thinking] == [
        (1, "Tick 1: I should take step 1."), (1, "And check it."),
        (2, "Tick 2: I should take step 2."), (2, "And check it."), (3, "All done: answer.")]
    for event in thinking:  # seed 004's thought part, marked as the model's thinking
        assert event["part"]["activity_type"] == "thought"
        assert event["part"]["display_info"]["id"] == "thinking"


def test_two_jobs_whose_first_answers_stream_at_once_each_carry_their_own_thinking_back(
        thinker: Harness, anthropic_env: FakeAnthropic):
    """The soak's seed 109 (acme-agent28, acme-agent41): two thinking jobs' first ticks in flight at once, A's answer
    waiting for its first byte while B's is asked and streams. Each job's second request carries its own answer's
    thinking and tool_use back, and the API (the fake) accepts both; the fake once gave both answers one tool_use id
    and remembered A's thinking for it, so B's second request was refused."""
    first_ticks: list[str] = []
    lock = threading.Lock()

    def agent(request: RecordedRequest) -> Answer:
        name = "A" if "job A" in json.dumps(request.body) else "B"
        if len(request.body["messages"]) > 1:
            return Answer.solution({"calls": [], "output": f"done {name}"}, thinking=[f"{name} is done."])
        with lock:
            first_ticks.append(name)
            waits = len(first_ticks) == 1
        solution = {"calls": [{"_tool": "step", "n": 1, "_outputPath": "†state.s"}], "output": None}
        if waits:  # the first asked: its answer waits for its first byte while the other one is asked and streams
            return Answer.solution(solution, thinking=[f"{name} weighs the step."], first_byte_delay_s=1.5)
        return Answer.solution(solution, thinking=[f"{name} weighs the step."], chunk_size=8, delay_s=0.3)

    anthropic_env.responder = agent
    client = thinker.client()
    handles = {name: client.submit({**job(), "context": [{"type": "text", "text": f"This is job {name}."}]})
               for name in "AB"}
    records = {name: handle.result(timeout=60) for name, handle in handles.items()}
    assert not anthropic_env.refusals, anthropic_env.refusals
    assert {name: (r["status"], r["result"]) for name, r in records.items()} == {
        "A": ("succeeded", "done A"), "B": ("succeeded", "done B")}
    assert len(set(anthropic_env.thought)) == 4  # a tool_use id of its own for each answer


def test_an_answer_without_the_solution_tool_is_sent_back_once(thinker: Harness, anthropic_env: FakeAnthropic):
    anthropic_env.script(
        Answer(preamble="I think the answer is three steps.", no_tool=True, stop_reason="end_turn",
               thinking=["Hmm."]),
        Answer.solution({"calls": [], "output": "three steps"}, thinking=["Right, the tool."]))
    record = thinker.run(job(), timeout=30)
    assert record["status"] == "succeeded", record
    assert record["result"] == "three steps"
    _, second = anthropic_env.requests
    said = second.body["messages"][1]
    assert said["role"] == "assistant" and [b["type"] for b in said["content"]] == ["thinking", "text"]
    assert said["content"][1]["text"] == "I think the answer is three steps."
    assert "without calling the `solution` tool" in second.last_user_text
    assert record["usage"]["requests"] == 2


def test_x_thinking_on_a_tool_thinks_in_its_latent_calls(thinker: Harness, anthropic_env: FakeAnthropic):
    def agent(request: RecordedRequest) -> Answer:
        if request.is_latent:
            return Answer.solution({"output": "fair"}, thinking=["Weighing it."])
        if len(request.body["messages"]) == 1:
            return Answer.solution({"calls": [{"_tool": "judge", "text": "x", "_outputPath": "†state.verdict"}],
                                    "output": None})
        return Answer.solution({"calls": [], "output": "judged"})

    anthropic_env.responder = agent
    record = thinker.run({**job(), "options": {}}, timeout=30)  # no thinking for the ticks, only the tool's
    assert record["status"] == "succeeded", record
    assert record["state"] == {"verdict": "fair"}
    latent = [r for r in anthropic_env.requests if r.is_latent]
    ticks = [r for r in anthropic_env.requests if not r.is_latent]
    assert len(latent) == 1
    assert latent[0].body["thinking"] == {"type": "enabled", "budget_tokens": 1500}
    assert latent[0].body["tool_choice"] == {"type": "auto"}
    for tick in ticks:
        assert "thinking" not in tick.body and tick.body["tool_choice"]["type"] == "tool"


def test_an_invalid_thinking_option_is_rejected_with_its_pointer_and_nothing_written(
        thinker: Harness, anthropic_env: FakeAnthropic):
    big = {**tool_schema("big", output={"type": "string"}), "x-thinking": {"budget_tokens": 9000}}
    client = thinker.client()
    before = store_of(client).recent_jobs(100)
    with pytest.raises(JobValidationError) as raised:
        client.submit({**job(), "tools": ["step", big], "options": {"thinking": {"budget_tokens": 8192}}})
    problems = {p.pointer: p.message for p in raised.value.problems}
    assert set(problems) == {"/options/thinking/budget_tokens", "/tools/1/x-thinking/budget_tokens"}
    assert "below the requests' max_tokens (8192" in problems["/options/thinking/budget_tokens"]
    assert "got 9000" in problems["/tools/1/x-thinking/budget_tokens"]
    with pytest.raises(JobValidationError) as raised:
        client.submit({**job(), "options": {"thinking": "lots", "model": "claude-sonnet-4-6"}})
    assert [(p.pointer, p.message) for p in raised.value.problems] == [
        ("/options/thinking", 'expected {"budget_tokens": N} (N >= 1024) or "adaptive", got \'lots\'')]
    with pytest.raises(JobValidationError) as raised:
        client.submit({**job(), "options": {"thinking": "adaptive", "model": "claude-sonnet-4-5"}})
    assert [p.pointer for p in raised.value.problems] == ["/options/thinking"]
    assert "does not support adaptive thinking" in str(raised.value)
    assert store_of(client).recent_jobs(100) == before  # nothing written
    assert anthropic_env.requests == []
    with pytest.raises(ToolSchemaError, match="x-thinking"):
        thinker.tools.register("tiny", {**tool_schema("tiny"), "x-thinking": {"budget_tokens": 10}})
