"""The batch lane (docs/batch.md, `options.priority: "batch"`): a job's model requests go through the Message Batches
API at half price, grouped across jobs, with nothing waiting for them. The real `anthropic` SDK against the fake's
`/v1/messages/batches`, real Redis, a real Celery worker."""

from __future__ import annotations

import time
from typing import Any

import anthropic
import pytest
from anthropic.types import ToolUseBlock

from agentq.engine.batch import BatchRound
from agentq.errors import JobValidationError
from agentq.llm.base import Usage
from agentq.llm.batch import BatchClient, custom_id
from agentq.llm.prices import SHIPPED
from agentq.protocol.status import JobStatus
from agentq.store.batches import BatchQueue
from tests.fake_anthropic import BATCHES_PATH, Answer, FakeAnthropic, RecordedRequest, thinking_signature
from tests.integration.conftest import Harness, store_of, tool_schema
from tests.integration.procs import wait_for

pytestmark = pytest.mark.timeout(120)

MODEL = "claude-sonnet-4-6"
USAGE = {"input_tokens": 2000, "output_tokens": 300, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
SUMMARIZE = tool_schema("summarize", params={"text": {"type": "string"}}, output={"type": "string"},
                        required=["text"])  # no activity serves it: the model answers (a latent call)
LANE: dict[str, Any] = {"batch_poll_s": 0.2, "batch_max_age_s": 1.0, "batch_max_requests": 1000}


def full_price(usage: dict) -> float:
    return SHIPPED[MODEL].cost_nanousd(Usage(requests=1, **usage), "5m") / 1e9


def sdk(fake: FakeAnthropic) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="sk-ant-fake-key", base_url=fake.base_url, max_retries=0)


def entry(cid: str, **params: object) -> dict:
    return {"custom_id": cid, "params": {"model": MODEL, "max_tokens": 100,
                                         "messages": [{"role": "user", "content": "hi"}], **params}}


# ----------------------------------------------------------------------------------- the fake, as the API is


def test_the_fake_batches_api_refuses_what_the_real_one_refuses(fake_anthropic: FakeAnthropic):
    client = sdk(fake_anthropic)
    refused = {
        "stream": [entry("a", stream=True)],
        "custom_id": [entry("not/a valid id")],
        "unique": [entry("same"), entry("same")],
        "empty": [],
    }
    messages = {}
    for name, requests in refused.items():
        with pytest.raises(anthropic.BadRequestError) as raised:
            client.messages.batches.create(requests=requests)  # type: ignore[arg-type]
        messages[name] = raised.value.message
    assert "requests.0.params.stream: Extra inputs are not permitted" in messages["stream"]
    assert "requests.0.custom_id: String should match pattern" in messages["custom_id"]
    assert "unique within a batch" in messages["unique"]
    assert "at least 1 item" in messages["empty"]
    assert fake_anthropic.batches.created == []


def test_a_fake_batch_ends_after_its_delay_with_results_by_custom_id_and_a_canceled_one_ends_canceled(
        fake_anthropic: FakeAnthropic):
    client = sdk(fake_anthropic)
    fake_anthropic.batches.delay_s = 0.3
    fake_anthropic.batches.outcome = {"late": "expired"}
    fake_anthropic.responder = lambda request: Answer.solution({"output": "ok"}, usage=dict(USAGE))
    batch = client.messages.batches.create(requests=[entry("first"), entry("late")])  # type: ignore[list-item]
    assert batch.processing_status == "in_progress" and batch.results_url is None
    assert batch.request_counts.processing == 2
    with pytest.raises(anthropic.AnthropicError, match="finished processing"):
        list(client.messages.batches.results(batch.id))
    wait_for(lambda: client.messages.batches.retrieve(batch.id).processing_status == "ended", 10, "the batch to end")
    ended = client.messages.batches.retrieve(batch.id)
    assert ended.results_url and ended.request_counts.succeeded == 1 and ended.request_counts.expired == 1
    results = {line.custom_id: line.result for line in client.messages.batches.results(batch.id)}
    assert results["late"].type == "expired"
    first = results["first"]
    assert first.type == "succeeded"
    block = first.message.content[0]
    assert isinstance(block, ToolUseBlock) and block.input == {"output": "ok"}
    other = client.messages.batches.create(requests=[entry("x")])  # type: ignore[list-item]
    assert client.messages.batches.cancel(other.id).processing_status == "canceling"
    assert client.messages.batches.retrieve(other.id).request_counts.canceled == 1
    with pytest.raises(anthropic.BadRequestError, match="cannot be canceled"):
        client.messages.batches.cancel(other.id)


# ----------------------------------------------------------------------------------- jobs through the lane


@pytest.fixture
def lane(harness: Harness, anthropic_env: FakeAnthropic) -> Harness:
    harness.tools.register("summarize", SUMMARIZE)
    anthropic_env.batches.delay_s = 0.5
    harness.worker(llm="anthropic", model=MODEL, concurrency=4, **LANE)
    return harness


def two_ticks_and_a_latent_call():
    """A responder: each job's first tick (its conversation is one turn) asks for a summary (a latent call), its
    second ends the job."""

    def answer(request: RecordedRequest) -> Answer:
        if request.is_latent:
            return Answer.solution({"output": "short"}, usage=dict(USAGE))
        if len(request.body["messages"]) == 1:
            return Answer.solution({"calls": [{"_tool": "summarize", "text": "the notes",
                                               "_outputPath": "†state.summary"}], "output": None}, usage=dict(USAGE))
        return Answer.solution({"calls": [], "output": "done"}, usage=dict(USAGE))

    return answer


def test_a_hundred_batch_jobs_complete_through_a_handful_of_batches_with_no_slot_held_and_half_the_cost(
        harness: Harness, anthropic_env: FakeAnthropic):
    harness.tools.register("summarize", SUMMARIZE)
    anthropic_env.batches.delay_s = 0.5
    # a batch goes when 100 requests wait (or after 60 s): on four engine threads, that happens only if no request
    # holds a thread while it waits
    harness.worker(llm="anthropic", model=MODEL, concurrency=4, **{**LANE, "batch_max_requests": 100,
                                                                    "batch_max_age_s": 60})
    anthropic_env.responder = two_ticks_and_a_latent_call()
    client = harness.client()
    handles = [client.submit({"context": [{"type": "text", "text": f"Job number {i}: summarize the notes."}],
                              "tools": ["summarize"], "options": {"priority": "batch"}}) for i in range(100)]
    records = [handle.result(timeout=100) for handle in handles]
    assert [r["status"] for r in records] == ["succeeded"] * 100, [r for r in records if r["status"] != "succeeded"]
    assert all(r["state"] == {"summary": "short"} for r in records)
    streamed = [r for r in anthropic_env.requests if r.path == "/v1/messages"]
    assert streamed == []  # every request went through a batch
    # three batches of 100: every job's first tick, then its latent call, then its second tick, all waiting at once
    assert [len(b.requests) for b in anthropic_env.batches.created] == [100, 100, 100]
    assert len(anthropic_env.batches.answered) == 300
    metrics = harness.metrics  # counted as streamed requests are: 300 answered, their tokens and (half) cost
    assert metrics.llm_requests.labels(MODEL, "ok")._value.get() == 300
    assert metrics.llm_cost.labels(MODEL)._value.get() == pytest.approx(300 * full_price(USAGE) / 2)
    for record in records:
        usage = record["usage"]
        assert usage["requests"] == 3 and usage["batch"]["requests"] == 3
        assert usage["cost_usd"] == pytest.approx(3 * full_price(USAGE) / 2)  # half price
        assert usage["batch"]["cost_usd"] == usage["cost_usd"] == usage["by_model"][MODEL]["cost_usd"]


def test_a_canceled_batch_jobs_batch_is_canceled_and_its_result_ignored(lane: Harness, anthropic_env: FakeAnthropic):
    anthropic_env.batches.delay_s = 60  # the batch stays in progress until it is canceled
    anthropic_env.responder = two_ticks_and_a_latent_call()
    client = lane.client()
    handle = client.submit({"context": [{"type": "text", "text": "Summarize the notes."}], "tools": ["summarize"],
                            "options": {"priority": "batch"}})
    wait_for(lambda: anthropic_env.batches.created, 20, "the job's request to go out in a batch")
    [batch] = anthropic_env.batches.created
    assert [e["custom_id"] for e in batch.requests] == [custom_id(f"{handle.id}/tick/0")]
    assert handle.cancel() == "canceled"
    wait_for(lambda: anthropic_env.batches.canceled == [batch.id], 20, "the abandoned batch to be canceled")
    queue = BatchQueue(store_of(client).redis, store_of(client).fleet)
    wait_for(lambda: queue.open_batches() == [], 20, "the canceled batch to be closed")
    assert queue.request(custom_id(f"{handle.id}/tick/0")) == {}  # its result was not kept
    assert anthropic_env.batches.answered == []
    assert store_of(client).record(handle.id).status is JobStatus.CANCELED


def test_an_invalid_priority_is_refused_at_submission_with_its_pointer(lane: Harness, anthropic_env: FakeAnthropic):
    client = lane.client()
    before = store_of(client).recent_jobs(100)
    for value in (4, "high", True):
        with pytest.raises(JobValidationError) as raised:
            client.submit({"context": [{"type": "text", "text": "Go."}], "options": {"priority": value}})
        [problem] = raised.value.problems
        assert problem.pointer == "/options/priority"
        assert problem.message == ("expected 1, 2 or 3 (the order of the job's calls against its tenant's others, 1 "
                                   "first; default 2) or \"batch\" (the job's model requests go through the Message "
                                   f"Batches API at half price), got {value!r}")
    assert store_of(client).recent_jobs(100) == before
    assert anthropic_env.requests == []


# ----------------------------------------------------------------------------------- the round, restarted


def test_a_new_round_picks_up_the_open_batches_and_mapping_another_one_sent(
        harness: Harness, anthropic_env: FakeAnthropic):
    client = harness.client()
    store = store_of(client)
    queue = BatchQueue(store.redis, store.fleet)
    job = client.submit({"context": [{"type": "text", "text": "Go."}], "calls": [
        {"_tool": "summarize", "text": "x", "_outputPath": "†state.s"}], "tools": [SUMMARIZE],
        "options": {"priority": "batch"}})  # no worker: its call stays ready, the job active
    woken: list[str] = []
    cid = custom_id(f"{job.id}/call_x")
    assert queue.enqueue(cid, place=f"{job.id}/call_x", job=job.id, tries=0,
                         params='{"model":"claude-sonnet-4-6","max_tokens":10,"messages":[{"role":"user",'
                                '"content":"hi"}]}')
    anthropic_env.batches.delay_s = 0.2
    anthropic_env.responder = lambda request: Answer.solution({"output": "ok"})
    first = BatchRound(queue, BatchClient(sdk(anthropic_env)), woken.append, max_requests=10, max_age_s=0)
    first.run()  # sends the batch; polls it in progress
    assert queue.open_batches() == [anthropic_env.batches.created[0].id] and woken == []
    del first  # the dispatcher that sent it is gone: another one, with nothing but Redis, goes on
    [batch] = anthropic_env.batches.created
    wait_for(lambda: time.monotonic() >= batch.ends_at, 10, "the batch's processing time to pass")
    BatchRound(queue, BatchClient(sdk(anthropic_env)), woken.append, max_requests=10, max_age_s=0).run()
    assert woken == [f"{job.id}/call_x"] and queue.open_batches() == []
    assert '"succeeded"' in queue.request(cid)["result"]
    assert anthropic_env.batches.answered[0].path == f"{BATCHES_PATH}#{cid}"


def test_a_batch_job_with_thinking_sends_its_thinking_blocks_back_unchanged(
        harness: Harness, anthropic_env: FakeAnthropic):
    harness.tool("step", params={"n": {"type": "integer"}}, output={"type": "integer"}, required=["n"])

    @harness.activities.register("step")
    def step(call):
        return call["n"] * 10

    anthropic_env.batches.delay_s = 0.2
    harness.worker(llm="anthropic", model=MODEL, concurrency=4, **{**LANE, "batch_max_age_s": 0.2})

    def agent(request: RecordedRequest) -> Answer:
        if len(request.body["messages"]) == 1:
            return Answer.solution({"calls": [{"_tool": "step", "n": 1, "_outputPath": "†state.s1"}],
                                    "output": None}, thinking=["I should take step 1."], redacted_thinking=1)
        return Answer.solution({"calls": [], "output": "done"}, thinking=["Done."])

    anthropic_env.responder = agent
    record = harness.client().submit({"context": [{"type": "text", "text": "Take a step, thinking first."}],
                                      "tools": ["step"], "options": {"priority": "batch",
                                                                     "thinking": {"budget_tokens": 2048}}}
                                     ).result(timeout=60)
    assert record["status"] == "succeeded", record
    assert record["state"] == {"s1": 10} and record["usage"]["batch"]["requests"] == 2
    first, second = anthropic_env.batches.answered
    assert first.body["thinking"] == {"type": "enabled", "budget_tokens": 2048} and "stream" not in first.body
    [assistant] = [turn for turn in second.body["messages"] if turn["role"] == "assistant"]
    thinking, redacted, tool_use = assistant["content"]
    assert thinking == {"type": "thinking", "thinking": "I should take step 1.",
                        "signature": thinking_signature("I should take step 1.")}  # as the batch result gave it
    assert redacted["type"] == "redacted_thinking" and tool_use["type"] == "tool_use"
    assert not anthropic_env.refusals and [r for r in anthropic_env.requests if r.path == "/v1/messages"] == []


def test_an_expired_or_errored_batch_request_goes_again_in_the_next_batch(lane: Harness, anthropic_env: FakeAnthropic):
    anthropic_env.responder = lambda request: Answer.solution({"calls": [], "output": "done"}, usage=dict(USAGE))
    anthropic_env.batches.outcome = {custom_id("job_expires_once/tick/0"): "expired",
                                     custom_id("job_errs_once/tick/0"): "errored"}  # a transient api_error
    client = lane.client()
    handles = [client.submit({"context": [{"type": "text", "text": "Answer."}], "options": {"priority": "batch"}},
                             job_id=job_id) for job_id in ("job_expires_once", "job_errs_once")]
    for handle in handles:
        record = handle.result(timeout=60)
        assert record["status"] == "succeeded" and record["result"] == "done"
        assert record["usage"]["batch"] == {"requests": 1, "cost_usd": pytest.approx(full_price(USAGE) / 2)}
    sent = [e["custom_id"] for b in anthropic_env.batches.created for e in b.requests]
    assert sorted(sent) == sorted([custom_id("job_expires_once/tick/0"), custom_id("job_errs_once/tick/0")] * 2)



def test_a_batched_latent_calls_invalid_first_answer_is_asked_again_once_and_holds_no_reservation(
        lane: Harness, anthropic_env: FakeAnthropic):
    """The answer sent back after an invalid one waits for its own batch: the call's task comes back and must go on
    to that answer, not send the first request again (whose result it consumed) and leave the second one's budget
    reservation held for good."""
    latent: list[RecordedRequest] = []
    ticks = two_ticks_and_a_latent_call()

    def answer(request: RecordedRequest) -> Answer:
        if not request.is_latent:
            return ticks(request)
        latent.append(request)
        return Answer.solution({"output": 5 if len(latent) == 1 else "short"}, usage=dict(USAGE))  # a string is due

    anthropic_env.responder = answer
    job_id = "job_invalid_once"
    record = lane.client().submit({"context": [{"type": "text", "text": "Summarize the notes."}],
                                   "tools": ["summarize"],
                                   "options": {"priority": "batch", "budget": {"max_requests": 10}}},
                                  job_id=job_id).result(timeout=60)
    assert record["status"] == "succeeded" and record["state"] == {"summary": "short"}, record
    store = store_of(lane.client())
    budget = store.redis.hgetall(store.keys(job_id).budget)
    assert [k for k, v in budget.items() if str(k).startswith("r:") or (str(k).startswith("held.") and int(v))] == []
    sent = [e["custom_id"] for b in anthropic_env.batches.created for e in b.requests]
    tick_ids = {custom_id(f"{job_id}/tick/{n}") for n in range(3)}
    first_latent = next(c for c in sent if c not in tick_ids)
    assert len(latent) == 2 and sent.count(first_latent) == 1, sent  # the first latent request went once
