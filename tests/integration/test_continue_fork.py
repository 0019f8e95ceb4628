"""Continue and fork end to end (docs/continue-and-fork.md): real Redis, real Celery workers, the real `anthropic` SDK
against the fake Messages API, whose prompt cache is modeled as the real API's (`tests/fake_prompt_cache.py`)."""

from __future__ import annotations

import asyncio
import copy
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from agentq.async_client import AsyncClient
from agentq.errors import ConflictError, JobExpiredError, JobNotFoundError, JobValidationError
from tests.fake_anthropic import Answer, FakeAnthropic, RecordedRequest
from tests.fake_prompt_cache import PromptCache
from tests.integration.conftest import Harness, store_of

OUTPUT = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
DEFAULT_MODEL = "claude-sonnet-4-6"


class Ledger:
    """What the activities ran, kept outside the store: (tool, argument) in order."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, Any]] = []
        self.lock = threading.Lock()

    def add(self, tool: str, value: Any) -> None:
        with self.lock:
            self.runs.append((tool, value))


@pytest.fixture
def agent(redis_url: str, anthropic_env: FakeAnthropic) -> Iterator[tuple[Harness, Ledger]]:
    harness, ledger = Harness(redis_url), Ledger()
    harness.tool("weather", params={"city": {"type": "string"}}, output={"type": "object"}, required=["city"])
    harness.tool("step", params={"n": {"type": "integer"}}, output={"type": "integer"}, required=["n"])
    release = threading.Event()
    harness.tool("hold", params={}, output={})
    harness.release = release  # type: ignore[attr-defined]

    @harness.activities.register("weather")
    def weather(call):
        ledger.add("weather", call["city"])
        return {"city": call["city"], "temp_c": 21}

    @harness.activities.register("step")
    def step(call):
        ledger.add("step", call["n"])
        return call["n"] * 10

    @harness.activities.register("hold")
    def hold(call):
        release.wait(20)
        return "released"

    harness.worker(llm="anthropic", concurrency=4)
    try:
        yield harness, ledger
    finally:
        release.set()
        harness.close()


def scripted(answers: list[Answer]):
    lock, pending = threading.Lock(), list(answers)

    def answer(request: RecordedRequest) -> Answer:
        with lock:
            return pending.pop(0)

    return answer


def plain(body: dict) -> list[dict]:
    """A request's messages without their cache breakpoint (it moves to the last block each request)."""
    messages = copy.deepcopy(body["messages"])
    for message in messages:
        for block in message["content"] if isinstance(message["content"], list) else ():
            block.pop("cache_control", None)
    return messages


def job_count(harness: Harness) -> int:
    return len(store_of(harness.client()).recent_jobs(1000))


def test_a_continued_job_repeats_the_old_conversation_reads_it_from_the_cache_and_sees_the_old_state(
        agent: tuple[Harness, Ledger], anthropic_env: FakeAnthropic):
    harness, ledger = agent
    anthropic_env.prompt_cache = PromptCache()
    anthropic_env.responder = scripted([
        Answer.solution({"calls": [{"_tool": "weather", "city": "Paris", "_outputPath": "†state.weather"}],
                         "output": None}),
        Answer.solution({"calls": [], "output": {"answer": "Paris: 21 °C"}}),
        # the continuation: a call that reads the old state, then its answer
        Answer.solution({"calls": [{"_tool": "weather", "city": "†state.weather.city", "_outputPath": "†state.again"}],
                         "output": None}),
        Answer.solution({"calls": [], "output": {"answer": "Still 21 °C in Paris"}}),
    ])
    client = harness.client()
    first = client.submit({"context": [{"type": "text", "role": "system", "text": "Answer about the weather."},
                                       {"type": "text", "text": "How warm is Paris?"}],
                           "tools": ["weather"], "output": OUTPUT, "options": {"cache_ttl": "1h"}})
    assert first.result(timeout=30)["status"] == "succeeded"
    old_requests = [e.request.body for e in anthropic_env.exchanges]
    assert len(old_requests) == 2

    second = first.continue_([{"type": "text", "text": "And now?"}])
    record = second.result(timeout=30)
    assert record["status"] == "succeeded", record
    assert record["result"] == {"answer": "Still 21 °C in Paris"}
    assert record["continued_from"] == first.id and record["thread"] == first.id
    # the old state is the new job's: its call read †state.weather.city, and its record keeps it
    assert ledger.runs == [("weather", "Paris"), ("weather", "Paris")]
    assert record["state"]["weather"] == {"city": "Paris", "temp_c": 21} and record["state"]["again"]["city"] == "Paris"

    new_first = anthropic_env.exchanges[2].request.body
    old_last, new = plain(old_requests[1]), plain(new_first)
    assert new[:len(old_last)] == old_last  # the old conversation, byte for byte
    assert new_first["system"] == old_requests[1]["system"] and new_first["tools"] == old_requests[1]["tools"]
    answer_turn, added = new[len(old_last)], new[len(old_last) + 1]
    assert answer_turn["role"] == "assistant" and answer_turn["content"][-1]["input"]["output"] == {
        "answer": "Paris: 21 °C"}
    assert added["role"] == "user" and "And now?" in str(added["content"])
    assert len(new) == len(old_last) + 2
    # the fake's prompt cache (as the real API's): the old request's whole prompt is read from the cache
    reports = anthropic_env.prompt_cache.reports
    old_prompt = reports[1]["cache_read_input_tokens"] + reports[1]["cache_creation_input_tokens"]
    assert reports[2]["cache_read_input_tokens"] >= old_prompt > 1024
    prompt = sum(reports[2][k] for k in ("cache_read_input_tokens", "cache_creation_input_tokens", "input_tokens"))
    assert reports[2]["cache_read_input_tokens"] >= 0.9 * prompt, reports[2]  # with cache_ttl "1h": >= 90%
    assert record["usage"]["cache_read_input_tokens"] >= reports[2]["cache_read_input_tokens"]
    assert record["usage"]["requests"] == 2  # its own requests only (a budget counts per job)

    thread = client.thread(first.id)
    assert [j["id"] for j in thread["jobs"]] == [first.id, second.id]
    assert thread["jobs"][1]["messages"] == [{"type": "text", "text": "And now?"}]
    assert thread["jobs"][1]["record"]["continued_from"] == first.id

    # a continuation of the continuation stays in the thread
    anthropic_env.responder = scripted([Answer.solution({"calls": [], "output": {"answer": "Bye"}})])
    # (with a concurrency key: it waits for the key, then asks after the exchanges it copied)
    third = second.continue_([{"type": "text", "text": "Thanks"}],
                             options={"max_ticks": 2, "concurrency": [{"key": "customer-7", "limit": 1}]})
    assert third.result(timeout=30)["thread"] == first.id
    assert [j["id"] for j in client.thread(first.id)["jobs"]] == [first.id, second.id, third.id]


def four_ticks() -> list[Answer]:
    return [Answer.solution({"calls": [{"_tool": "step", "n": n, "_outputPath": f"†state.s{n}"}], "output": None})
            for n in (1, 2, 3)] + [Answer.solution({"calls": [], "output": {"answer": "done"}})]


def test_a_fork_at_tick_2_replays_ticks_1_and_2_and_asks_only_for_ticks_3_and_4_with_its_model(
        agent: tuple[Harness, Ledger], anthropic_env: FakeAnthropic):
    harness, ledger = agent
    anthropic_env.responder = scripted(four_ticks())
    client = harness.client()
    original = client.submit({"context": [{"type": "text", "text": "Count to three."}], "tools": ["step"],
                              "output": OUTPUT})
    assert original.result(timeout=30)["status"] == "succeeded"
    assert ledger.runs == [("step", 1), ("step", 2), ("step", 3)]
    old = [e.request.body for e in anthropic_env.exchanges]
    assert len(old) == 4 and {b["model"] for b in old} == {DEFAULT_MODEL}

    anthropic_env.responder = scripted(four_ticks()[2:])
    fork = original.fork(2, options={"model": "claude-haiku-4-5"})
    record = fork.result(timeout=30)
    assert record["status"] == "succeeded", record
    live = [e.request.body for e in anthropic_env.exchanges[4:]]
    assert len(live) == 2  # ticks 3 and 4 only
    assert {b["model"] for b in live} == {"claude-haiku-4-5"}  # the fork's model, in its live requests only
    assert plain(live[0]) == plain(old[2])  # tick 3 is asked with ticks 1-2 replayed as they were
    assert ledger.runs == [("step", 1), ("step", 2), ("step", 3), ("step", 3)]  # ticks 1-2 did not run again
    assert record["forked_from"] == original.id
    assert record["fork"]["at_tick"] == 2
    assert [(t["tick"], t["cost_usd"], t["tools"]) for t in record["fork"]["replayed"]] == [
        (1, 0.0, ["step"]), (2, 0.0, ["step"])]
    assert record["usage"]["requests"] == 2 and set(record["usage"]["by_model"]) == {"claude-haiku-4-5"}
    assert record["state"] == {"s1": 10, "s2": 20, "s3": 30}
    assert [f["id"] for f in original.forks()["forks"]] == [fork.id]
    parts = [e.part.get("content") for e in fork.events(follow=False) if e.event == "part" and e.part]
    assert parts[0] == (f"Forks job {original.id} at tick 2: ticks 1-2 replayed (no model request, no activity run, "
                        "no cost)")

    # a fork with another tool description: its live request composes the new one, the replayed answers stay
    described = store_of(client).copy_source(original.id).registered["step"]
    changed = {**described, "description": "Add one step (changed description)"}
    anthropic_env.responder = scripted(four_ticks()[3:])
    redescribed = original.fork(3, tools=[changed])
    assert redescribed.result(timeout=30)["status"] == "succeeded"
    last = anthropic_env.exchanges[-1].request.body
    assert "changed description" in json.dumps(last["tools"]) and plain(last) == plain(old[3])
    assert "changed description" not in json.dumps(old[3]["tools"])

    async def listed() -> list[str]:
        async with AsyncClient(settings=harness.settings) as aclient:
            return [f["id"] for f in (await aclient.forks(original.id))["forks"]]

    assert asyncio.run(listed()) == [fork.id, redescribed.id]

    # a fork at tick 2 with other first messages (two instead of one): ticks 1-2 replayed after them
    anthropic_env.responder = scripted(four_ticks()[2:])
    reworded = original.fork(2, context=[{"type": "text", "role": "system", "text": "Be terse."},
                                         {"type": "text", "text": "Count to three, please."}])
    assert reworded.result(timeout=30)["state"] == {"s1": 10, "s2": 20, "s3": 30}
    asked = plain(anthropic_env.exchanges[-2].request.body)
    assert "Count to three, please." in str(asked[0]) and asked[1:] == plain(old[2])[1:]
    assert anthropic_env.exchanges[-2].request.body["system"][-1]["text"] == "Be terse."

    # a fork at tick 0 with other first messages runs live from the start
    anthropic_env.responder = scripted([Answer.solution({"calls": [], "output": {"answer": "no"}})])
    again = original.fork(0, context=[{"type": "text", "text": "Do not count."}])
    assert again.result(timeout=30)["result"] == {"answer": "no"}
    assert "Do not count." in str(anthropic_env.exchanges[-1].request.body["messages"])
    assert [f["id"] for f in original.forks()["forks"]] == [fork.id, redescribed.id, reworded.id, again.id]


def test_bad_continues_and_forks_are_one_clear_error_each_and_write_nothing(
        agent: tuple[Harness, Ledger], anthropic_env: FakeAnthropic):
    harness, _ = agent
    client = harness.client()
    anthropic_env.responder = scripted(four_ticks()[3:])
    ended = client.submit({"context": [{"type": "text", "text": "Say done."}], "tools": ["step"],
                           "output": OUTPUT})
    assert ended.result(timeout=30)["status"] == "succeeded"
    plan = client.submit({"calls": [{"_tool": "step", "n": 1}]})
    assert plan.result(timeout=30)["status"] == "succeeded"
    hold = {"_tool": "hold", "_outputPath": "†state.held"}  # awaited: the job runs until it is released
    anthropic_env.responder = scripted([Answer.solution({"calls": [hold], "output": None}),
                                        Answer.solution({"calls": [], "output": "held"})])
    running = client.submit({"context": [{"type": "text", "text": "Hold."}], "tools": ["hold"]})
    next(e for e in running.events() if e.event == "call.started")  # its call holds it running
    before = job_count(harness)

    with pytest.raises(ConflictError, match="running: only an ended job"):
        running.continue_([{"type": "text", "text": "hi"}])
    with pytest.raises(ConflictError, match="plan job"):
        plan.continue_([{"type": "text", "text": "hi"}])
    with pytest.raises(JobValidationError) as bad:
        ended.continue_([{"type": "nope"}], options={"max_ticks": 0, "delay_s": 5, "colour": 1})
    pointers = {p.pointer for p in bad.value.problems}
    assert {"/options/max_ticks", "/options/delay_s", "/options/colour"} <= pointers, bad.value
    assert any(p.startswith("/context/0") for p in pointers), bad.value
    with pytest.raises(JobValidationError) as past:
        ended.fork(5)
    assert [p.pointer for p in past.value.problems] == ["/at_tick"] and "past the job's last tick" in str(past.value)
    with pytest.raises(JobValidationError, match="final output"):
        ended.fork(1)
    with pytest.raises(JobValidationError, match="plan job"):
        plan.fork(0)
    with pytest.raises(JobNotFoundError) as other:
        harness.client(tenant="acme").continue_job(ended.id, [{"type": "text", "text": "hi"}])
    assert not isinstance(other.value, JobExpiredError)
    with pytest.raises(JobNotFoundError):
        harness.client(tenant="acme").thread(ended.id)
    store = store_of(client)
    keys = store.keys(ended.id)
    store.redis.delete(keys.job, keys.log, keys.exchanges, keys.spec)  # its data expired with its ttl_s
    with pytest.raises(JobExpiredError):
        ended.continue_([{"type": "text", "text": "hi"}])
    with pytest.raises(JobExpiredError):
        ended.fork(0)
    assert job_count(harness) == before  # nothing was written
    assert store.forks_of(ended.id) == [] and store.thread_jobs(ended.id) == []
    harness.release.set()  # type: ignore[attr-defined]
