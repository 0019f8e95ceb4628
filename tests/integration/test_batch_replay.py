"""The batch lane and replays: a batch job recorded through the Message Batches API (`AGENTQ_LLM_RECORD`), then
replayed (`AGENTQ_LLM=replay:<file>`) as a batch job again: the same result, its requests batched requests at the
batch price, no streamed request. The real `anthropic` SDK against the fake's batches API, real Redis, real
Celery workers."""

from __future__ import annotations

import json

import pytest

from tests.fake_anthropic import FakeAnthropic
from tests.integration.conftest import Harness
from tests.integration.test_batch_lane import LANE, MODEL, SUMMARIZE, USAGE, full_price, two_ticks_and_a_latent_call

pytestmark = pytest.mark.timeout(120)

JOB = {"context": [{"type": "text", "text": "Summarize the notes."}], "tools": ["summarize"],
       "options": {"priority": "batch"}}


def test_a_recorded_batch_job_replays_as_a_batch_job(redis_url: str, anthropic_env: FakeAnthropic, tmp_path):
    recorded = tmp_path / "batch.jsonl"
    live = Harness(redis_url)
    try:
        live.tools.register("summarize", SUMMARIZE)
        anthropic_env.batches.delay_s = 0.2
        anthropic_env.responder = two_ticks_and_a_latent_call()
        live.worker(llm="anthropic", model=MODEL, concurrency=4, llm_record=recorded, **LANE)
        first = live.run(JOB, timeout=60)
    finally:
        live.close()
    assert first["status"] == "succeeded" and first["usage"]["batch"]["requests"] == 3
    lines = [json.loads(line) for line in recorded.read_text(encoding="utf-8").splitlines()]
    assert sorted(line["purpose"] for line in lines) == ["latent", "tick", "tick"]  # every batched answer
    assert all(line["usage"] == {"requests": 1, **USAGE} for line in lines)

    sent = len(anthropic_env.requests)
    replayed = Harness(redis_url)
    try:
        replayed.tools.register("summarize", SUMMARIZE)
        replayed.worker(llm=f"replay:{recorded}", model=MODEL, concurrency=4, **LANE)
        again = replayed.run(JOB, timeout=60)
    finally:
        replayed.close()
    assert again["status"] == "succeeded", again["error"]
    assert (again["state"], again["result"]) == (first["state"], first["result"])
    assert again["usage"]["batch"] == first["usage"]["batch"]
    assert again["usage"]["cost_usd"] == pytest.approx(3 * full_price(USAGE) / 2)  # the batch price
    assert len(anthropic_env.requests) == sent  # nothing reached the API
