"""Every stop reason of the model (docs/protocol.md#thinking-and-stop-reasons), end to end: the real `anthropic` SDK
against the fake Messages API, real Redis, real Celery workers. A solution cut at max_tokens keeps the calls that came
(each run once) and asks for the rest; a refusal fails the job at once; a full context window is compacted once; a stop
reason agentq does not know is an error naming it."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator

import pytest

from tests.fake_anthropic import Answer, FakeAnthropic, RecordedRequest
from tests.integration.conftest import Harness, store_of

pytestmark = pytest.mark.timeout(120)


class CountingHarness(Harness):
    """A harness whose `step` activity counts its runs by step."""

    def __init__(self, redis_url: str):
        super().__init__(redis_url)
        self.runs: Counter[int] = Counter()


@pytest.fixture
def counter(redis_url: str, anthropic_env: FakeAnthropic) -> Iterator[CountingHarness]:
    harness = CountingHarness(redis_url)
    try:
        yield _counter(harness)
    finally:
        harness.close()


def _counter(harness: CountingHarness) -> CountingHarness:
    harness.tool("step", params={"n": {"type": "integer"}}, output={"type": "integer"}, required=["n"])
    harness.tool("blob", params={"n": {"type": "integer"}}, output={"type": "string"}, required=["n"])
    lock = threading.Lock()

    @harness.activities.register("step")
    def step(call):
        with lock:
            harness.runs[call["n"]] += 1
        return call["n"] * 10

    @harness.activities.register("blob")
    def blob(call):
        return f"blob {call['n']} " * 2_000  # about 14 KB

    harness.worker(llm="anthropic", concurrency=4)
    return harness


JOB = {"context": [{"type": "text", "text": "Run the five steps."}], "tools": ["step"], "output": {"type": "string"}}


def call(n: int) -> dict:
    return {"_tool": "step", "n": n, "_outputPath": f"†state.s{n}"}


def cut_after_two_of_five() -> Answer:
    """A solution of five calls whose stream stops at max_tokens in the middle of the third."""
    calls = [json.dumps(call(n), ensure_ascii=False, separators=(",", ":")) for n in range(5)]
    return Answer(chunks=['{"calls":[' + calls[0] + ",", calls[1] + ",", calls[2][:12]], stop_reason="max_tokens")


def test_a_solution_cut_by_max_tokens_after_two_of_its_five_calls_runs_all_five_once_and_succeeds(
        counter: CountingHarness, anthropic_env: FakeAnthropic):
    asked: list[str] = []

    def agent(request: RecordedRequest) -> Answer:
        turn = len(request.body["messages"])
        if turn == 1:
            return cut_after_two_of_five()
        if turn == 3:  # the continuation: it says what already runs and asks for the rest
            asked.append(request.last_user_text)
            return Answer.solution({"calls": [call(2), call(3), call(4)], "output": None})
        return Answer.solution({"calls": [], "output": "five steps"})

    anthropic_env.responder = agent
    record = counter.run(JOB, timeout=60)
    assert record["status"] == "succeeded", record
    assert counter.runs == {0: 1, 1: 1, 2: 1, 3: 1, 4: 1}
    assert record["state"] == {f"s{n}": n * 10 for n in range(5)}
    requests = anthropic_env.requests
    assert len(requests) == 3
    continuation = requests[1].body["messages"]
    assert continuation[1]["content"][-1]["input"] == {"calls": [call(0), call(1)], "output": None}
    assert "cut off at the output token limit (max_tokens) after 2 complete call(s)" in asked[0]
    assert "†state.s0" in asked[0] and "†state.s1" in asked[0]  # what the two calls wrote
    assert record["usage"]["requests"] == 3


def test_a_job_whose_answers_keep_stopping_at_max_tokens_fails_with_model_output_truncated(
        counter: CountingHarness, anthropic_env: FakeAnthropic):
    def agent(request: RecordedRequest) -> Answer:
        if len(request.body["messages"]) == 1:
            return cut_after_two_of_five()
        rest = [json.dumps(call(n), ensure_ascii=False, separators=(",", ":")) for n in (2, 3)]
        return Answer(chunks=['{"calls":[' + rest[0] + ",", rest[1][:10]], stop_reason="max_tokens")  # cut again

    anthropic_env.responder = agent
    record = counter.run(JOB, timeout=60)
    assert record["status"] == "failed", record
    assert record["error"]["type"] == "ModelOutputTruncated"
    assert "stopped at max_tokens" in record["error"]["message"]
    assert len(anthropic_env.requests) == 2
    assert record["usage"]["requests"] == 2


def test_a_refusal_fails_the_job_with_model_refused_and_the_models_text_after_one_request(
        counter: CountingHarness, anthropic_env: FakeAnthropic):
    anthropic_env.script(Answer.refusal("I can't help with that request."))
    record = counter.run(JOB, timeout=30)
    assert record["status"] == "failed", record
    assert record["error"] == {"type": "ModelRefused", "message": "I can't help with that request."}
    assert len(anthropic_env.requests) == 1
    assert record["usage"]["requests"] == 1 and record["usage"]["cost_usd"] > 0  # the refusal was still paid for
    assert not counter.runs


def test_an_unknown_stop_reason_is_an_error_that_names_it(counter: CountingHarness, anthropic_env: FakeAnthropic):
    anthropic_env.script(Answer.solution({"calls": [], "output": "done"}, stop_reason="pause_for_tea"))
    record = counter.run(JOB, timeout=30)
    assert record["status"] == "failed", record
    assert record["error"]["type"] == "UnknownStopReason"
    assert "'pause_for_tea'" in record["error"]["message"]
    assert len(anthropic_env.requests) == 1


BLOBS = {"context": [{"type": "text", "text": "Read the blobs."}], "tools": ["blob"], "output": {"type": "string"}}


def blob_agent(window_full_at: int | None):
    """Tick k reads blob k; the request at turn `window_full_at` is answered `model_context_window_exceeded`
    the first time."""
    full: list[RecordedRequest] = []

    def agent(request: RecordedRequest) -> Answer:
        turn = len(request.body["messages"])
        if turn == window_full_at and not full:
            full.append(request)
            return Answer.window_full({"calls": [], "output": "x"})
        k = (turn + 1) // 2
        if k > 3:
            return Answer.solution({"calls": [], "output": "read"})
        return Answer.solution({"calls": [{"_tool": "blob", "n": k, "_outputPath": f"†state.b{k}"}],
                                "output": None})

    return agent


def test_a_full_context_window_compacts_the_conversation_once_and_the_job_goes_on(
        counter: CountingHarness, anthropic_env: FakeAnthropic):
    anthropic_env.responder = blob_agent(window_full_at=5)
    record = counter.run(BLOBS, timeout=60)
    assert record["status"] == "succeeded", record
    sizes = [len(r.raw) for r in anthropic_env.requests]
    refused, again = anthropic_env.requests[2], anthropic_env.requests[3]
    assert len(refused.body["messages"]) == len(again.body["messages"]) == 5
    assert len(again.raw) < len(refused.raw) - 10_000, sizes  # blob 1 was compacted to a preview
    assert "blob 1 " * 2_000 in refused.raw.decode() and "blob 1 " * 2_000 not in again.raw.decode()
    assert "blob 2 " * 2_000 in again.raw.decode()  # the last exchange stays whole
    assert record["usage"]["context_tokens_saved"] > 0


def test_a_prompt_too_long_with_nothing_to_compact_fails_with_context_window_exceeded(
        counter: CountingHarness, anthropic_env: FakeAnthropic):
    anthropic_env.context_window = 200  # tokens: agentq's instructions alone are longer
    anthropic_env.refusals_expected = True
    record = counter.run(JOB, timeout=30)
    assert record["status"] == "failed", record
    assert record["error"]["type"] == "ContextWindowExceeded"
    assert "prompt is too long" in record["error"]["message"]
    assert len(anthropic_env.requests) == 1
    events = [e["event"] for _, e in store_of(counter.client()).read_events(record["id"])]
    assert "job.finished" in events
