"""Budgets, cost and the prompt-cache TTL on real processes (docs/rate-limits.md#budgets): two `agentq dispatcher`
processes make a job's model requests through the real `anthropic` SDK against the fake Messages API, which counts what
it receives; the job's budget is shared by both through Redis, and its record's cost is the fake's usage priced by the
table."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from agentq.llm.base import Usage
from agentq.llm.prices import SHIPPED
from agentq.protocol.status import CALL_FINAL
from tests.fake_anthropic import Answer, FakeAnthropic, RecordedRequest
from tests.integration.conftest import Harness, store_of, tool_schema
from tests.integration.procs import WorkerProc, WorkerProcs, wait_for

pytestmark = pytest.mark.timeout(120)

MODEL = "claude-sonnet-4-6"
SUMMARIZE = tool_schema("summarize", params={"text": {"type": "string"}}, output={"type": "string"},
                        required=["text"])  # no activity serves it: the model answers (a latent call)


@pytest.fixture
def dispatchers(worker_procs: WorkerProcs, anthropic_env: FakeAnthropic) -> Iterator[list[WorkerProc]]:
    """Two `agentq dispatcher` processes (no activities: every call of these jobs is the model's)."""
    env = {"ANTHROPIC_BASE_URL": anthropic_env.base_url, "ANTHROPIC_API_KEY": "sk-ant-fake-key",
           "AGENTQ_MODEL": MODEL}
    procs = [worker_procs.start(command="dispatcher", module=None, concurrency=4, **env) for _ in range(2)]
    for proc in procs:

        def engine_announced(proc: WorkerProc = proc) -> object:
            return (worker_procs.announcement(proc) or {}).get("engine")

        wait_for(engine_announced, 30, f"dispatcher {proc.pid} to announce itself", on_timeout=proc.output)
    yield procs


def settled(harness: Harness, job_id: str) -> dict:
    """The job's record once none of its calls runs any more (its running calls finish after it failed)."""
    store = store_of(harness.client())
    wait_for(lambda: all(s in CALL_FINAL for s in store.call_statuses(job_id).values()), 30,
             f"the calls of job {job_id} to end")
    return store.record(job_id).to_dict()


def priced(requests: list[RecordedRequest], usages: list[dict], cache_ttl: str) -> float:
    """What the table says the fake's usage cost, in dollars."""
    price = SHIPPED[MODEL]
    assert len(requests) == len(usages)
    return sum(price.cost_nanousd(Usage(requests=1, **usage), cache_ttl) for usage in usages) / 1e9


def test_two_dispatchers_share_a_jobs_budget_and_send_nothing_past_it(
        harness: Harness, anthropic_env: FakeAnthropic, dispatchers: list[WorkerProc]):
    lock = threading.Lock()
    answered: list[str] = []

    def slow_latent(request: RecordedRequest) -> Answer:
        with lock:
            answered.append(request.last_user_text)
        return Answer.solution({"output": "short"}, first_byte_delay_s=0.5)  # the three stay in flight a while

    anthropic_env.responder = slow_latent
    calls = [{"_tool": "summarize", "text": f"text number {i}", "_outputPath": f"†state.s{i}"} for i in range(8)]
    handle = harness.client().submit({"tools": [SUMMARIZE], "calls": calls,
                                      "options": {"budget": {"max_requests": 3}}})
    record = handle.result(timeout=60)
    assert record["status"] == "failed"
    assert record["error"] == {"type": "BudgetExceeded",
                               "message": "max_requests: 3 of 3 model requests made or in flight"}
    record = settled(harness, handle.id)
    assert len(anthropic_env.requests) == 3  # eight calls on two processes: three requests, none past the budget
    assert record["usage"]["requests"] == 3
    assert sorted(record["state"]) == sorted(f"s{i}" for i in range(8) if any(f"text number {i}" in t
                                                                            for t in answered))
    statuses = sorted(s.value for s in store_of(harness.client()).call_statuses(handle.id).values())
    assert statuses == ["done"] * 3 + ["failed"] * 5  # the running calls finished and were recorded
    assert record["usage"]["cost_usd"] == pytest.approx(priced(anthropic_env.requests, [
        dict(e.answer.usage) for e in anthropic_env.exchanges if e.answer is not None], "5m"))


def test_an_agent_over_its_cost_budget_fails_after_the_request_that_crossed_it(
        harness: Harness, anthropic_env: FakeAnthropic, dispatchers: list[WorkerProc]):
    crossing = {"input_tokens": 20_000, "output_tokens": 40, "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0}  # $0.06 of input: over a $0.05 budget
    anthropic_env.script(Answer.solution({"calls": [], "output": None}, usage=dict(crossing)))
    anthropic_env.responder = lambda request: Answer.solution({"calls": [], "output": "never asked"})
    record = harness.client().submit({"context": [{"type": "text", "text": "Think hard."}], "tools": [SUMMARIZE],
                                      "options": {"budget": {"max_cost_usd": 0.05}}}).result(timeout=60)
    assert record["status"] == "failed" and record["error"]["type"] == "BudgetExceeded"
    assert record["error"]["message"].startswith("max_cost_usd: $0.060600 of $0.050000 spent or held")
    [sent] = anthropic_env.requests  # the one that crossed it; nothing after
    assert sent.body["max_tokens"] < 8192  # the request could only write what the budget had left
    assert record["usage"]["cost_usd"] == pytest.approx(priced([sent], [crossing], "5m")) == 0.0606


def test_a_1h_cache_ttl_reaches_every_breakpoint_and_the_cost_is_the_fakes_usage_priced(
        harness: Harness, anthropic_env: FakeAnthropic, dispatchers: list[WorkerProc]):
    usages = [{"input_tokens": 900, "output_tokens": 120, "cache_creation_input_tokens": 4000,
               "cache_read_input_tokens": 0},
              {"input_tokens": 300, "output_tokens": 30, "cache_creation_input_tokens": 1500,
               "cache_read_input_tokens": 0},
              {"input_tokens": 200, "output_tokens": 60, "cache_creation_input_tokens": 900,
               "cache_read_input_tokens": 4000}]
    ticks = [Answer.solution({"calls": [{"_tool": "summarize", "text": "the notes", "_outputPath": "†state.sum"}],
                              "output": None}, usage=dict(usages[0])),
             Answer.solution({"calls": [], "output": "done"}, usage=dict(usages[2]))]
    lock = threading.Lock()

    def answer(request: RecordedRequest) -> Answer:
        if request.is_latent:
            return Answer.solution({"output": "short notes"}, usage=dict(usages[1]))
        with lock:
            return ticks.pop(0)

    anthropic_env.responder = answer
    record = harness.client().submit({"context": [{"type": "text", "text": "Summarize the notes."}],
                                      "tools": [SUMMARIZE], "options": {"cache_ttl": "1h"}}).result(timeout=60)
    assert record["status"] == "succeeded", record
    assert len(anthropic_env.requests) == 3
    for request in anthropic_env.requests:
        body = request.body
        breakpoints = [body["tools"][0]["cache_control"], body["system"][-1]["cache_control"],
                       body["messages"][-1]["content"][-1]["cache_control"]]
        assert breakpoints == [{"type": "ephemeral", "ttl": "1h"}] * 3
    expected = priced(anthropic_env.requests, usages, "1h")
    assert record["usage"]["cost_usd"] == pytest.approx(expected)
    assert record["usage"]["by_model"][MODEL]["cost_usd"] == pytest.approx(expected)
    # the writes were billed at the 1-hour rate ($6 per million), not the 5-minute one
    assert expected > priced(anthropic_env.requests, usages, "5m")
    assert record["usage"]["cache_creation_input_tokens"] == 6400
