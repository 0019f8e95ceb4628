"""The engine under fleet-wide rate limits (docs/rate-limits.md), on the session's Redis: a request that must wait is
not sent and holds no slot (its tick or call comes back after the wait), keeps its place, and is sent once without
taking its share twice; what a request did not use goes back; a 429 pauses the model for every process."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentq.errors import LLMRetryableError
from agentq.llm.base import LLMRequest
from agentq.protocol.limits import ModelLimits
from agentq.protocol.status import JobStatus
from agentq.settings import Settings
from agentq.store.limits import HEADROOM_MS
from agentq.store.state import StateStore
from tests.runtime.engine_rig import Engine, Engines, ScriptedModel

MODEL = Settings().model
OUTPUT = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
ANSWER = {"calls": [], "output": {"answer": "ok"}}


@pytest.fixture
def engines(redis_store: StateStore) -> Iterator[Engines]:
    made = Engines(redis_store)
    yield made
    for engine in made:
        engine.close()


def engine(engines: Engines, **options) -> Engine:
    made = Engine(options.pop("store", engines.store), **options)
    engines.append(made)
    return made


def started_ticks(store: StateStore, job_id: str) -> int:
    return sum(1 for _, event in store.read_events(job_id) if event["event"] == "tick.started")


def agent_job(text: str) -> dict:
    return {"context": [{"type": "text", "text": text}], "tools": [], "output": OUTPUT}


def test_requests_beyond_the_limit_wait_their_turn_and_are_each_sent_once(engines: Engines):
    model = ScriptedModel(lambda request: ANSWER)
    rig = engine(engines, llm=model, limits={MODEL: ModelLimits(requests_per_minute=1)})
    jobs = [rig.service.submit(agent_job(f"job {i}")) for i in range(3)]
    rig.run(limit=3)  # each tick once, at the same moment: the first is sent, the others wait their turn
    assert len(model.requests) == 1
    # the sent one started (its `tick.started` written by the rate limits' step); the deferred ones have not
    assert [started_ticks(rig.store, job) for job in jobs] == [1, 0, 0]
    second, third = rig.waits
    # a minute for the second (from HEADROOM_MS after the first take: the bucket was full), the third behind it
    headroom = HEADROOM_MS / 1000
    assert 59 + headroom < second <= 60 + headroom and 119 + headroom < third <= 120 + headroom
    rig.run(wait=True)  # the broker brings each back after its wait
    assert [rig.store.record(job).status for job in jobs] == [JobStatus.SUCCEEDED] * 3
    assert [request.messages[0]["content"][0]["text"].endswith(f"job {i}") for i, request in
            enumerate(model.requests)] == [True] * 3  # first come, first sent, each once
    assert [started_ticks(rig.store, job) for job in jobs] == [1, 1, 1]  # each started once, when sent


def test_what_a_request_did_not_write_goes_back_to_the_output_bucket(engines: Engines):
    """Each request takes its `max_tokens` (8192) and gives back what it did not write (20): two fit in 16,384 a
    minute at once, and one after the other never waits."""
    model = ScriptedModel(lambda request: ANSWER)
    rig = engine(engines, llm=model, limits={"*": ModelLimits(output_tokens_per_minute=16_384)})
    for i in range(4):
        rig.service.submit(agent_job(f"job {i}"))
    rig.run()
    assert len(model.requests) == 4 and rig.waits == []


def test_a_429_pauses_the_model_for_every_process_for_its_retry_after(engines: Engines):
    store = engines.store
    first = ScriptedModel.replies(LLMRetryableError("rate limited", retry_after_s=7.0, status=429), ANSWER)
    other = ScriptedModel(lambda request: ANSWER)
    a = engine(engines, store=store, llm=first, limits={})  # no limit known: the pause holds all the same
    b = engine(engines, store=store, llm=other, limits={})
    paused = a.service.submit(agent_job("first"))
    a.run()
    assert len(first.requests) == 1 and 6.9 < a.waits[0] <= 7.0  # its own retry waits for the retry-after
    waiting = b.service.submit(agent_job("second"))
    b.run(limit=1)
    # another process: not sent, paused the same (its wait ends when the first one's does)
    assert other.requests == [] and 0 < b.waits[0] < 7.0 and b.wait_ends[0] == pytest.approx(a.wait_ends[0], abs=0.05)
    a.run(wait=True)
    b.run(wait=True)
    assert store.record(paused).status is JobStatus.SUCCEEDED and store.record(waiting).status is JobStatus.SUCCEEDED
    assert len(first.requests) == 2 and len(other.requests) == 1


def test_a_latent_call_that_waits_is_not_failed_by_its_attempts(engines: Engines):
    """Waiting for the limits is no failed attempt: with one attempt allowed, every latent call is still answered."""
    def answer(request: LLMRequest) -> dict:
        return {"output": "a summary"}

    model = ScriptedModel(answer)
    rig = engine(engines, llm=model, limits={MODEL: ModelLimits(requests_per_minute=2)},
                 settings=Settings(llm_max_attempts=1))
    rig.tool("summarize", {"text": {"type": "string"}})
    job = rig.service.submit({"calls": [{"_tool": "summarize", "text": f"text {i}", "_outputPath": f"†state.s{i}"}
                                        for i in range(4)]})
    statuses = rig.run(wait=True)
    record = rig.store.record(job)
    assert record.status is JobStatus.SUCCEEDED, record
    assert record.state == {f"s{i}": "a summary" for i in range(4)}
    assert len(model.requests) == 4 and statuses.count("retry") == 2  # two waited; none was sent twice
