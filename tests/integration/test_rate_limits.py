"""Fleet-wide model rate limits (docs/rate-limits.md) across real processes: two `agentq dispatcher` processes share one
requests-per-minute limit through Redis, and a 429 one of them gets pauses the other too. The fake Messages API
enforces the limit as the real API does (a token bucket) and keeps the request log the assertions read.

Each dispatcher serves an engine queue of its own (its client submits there), so both certainly make requests,
and its own API key tells its requests apart in the fake's log."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor

from agentq.client import Client
from agentq.settings import Settings
from tests.fake_anthropic import Answer, FakeAnthropic, RecordedRequest
from tests.integration.conftest import store_of
from tests.integration.procs import WorkerProcs, wait_for

OUTPUT = {"type": "object", "properties": {"done": {"type": "boolean"}}, "required": ["done"]}
FINAL = {"calls": [], "output": {"done": True}}
KEYS = {"a": "sk-ant-dispatcher-a", "b": "sk-ant-dispatcher-b"}


def job(text: str) -> dict:
    return {"context": [{"type": "text", "text": text}], "tools": [], "output": OUTPUT}


def start_dispatchers(worker_procs: WorkerProcs, **env: str) -> None:
    procs = [worker_procs.dispatcher(AGENTQ_LLM="anthropic", AGENTQ_ENGINE_QUEUE=f"engine-{name}",
                                     ANTHROPIC_API_KEY=key, AGENTQ_VISIBILITY_TIMEOUT_S="120", **env)
             for name, key in KEYS.items()]
    for proc in procs:
        worker_procs.wait_dispatcher(proc)


def client(redis_url: str, name: str) -> Client:
    return Client(settings=Settings(redis_url=redis_url, engine_queue=f"engine-{name}"))


def sender(request: RecordedRequest) -> str:
    """Which dispatcher sent the request (by the API key it authenticated with)."""
    said = {request.headers.get("x-api-key"), request.headers.get("authorization", "").removeprefix("Bearer ")}
    return next(name for name, key in KEYS.items() if key in said)


def test_two_dispatchers_never_exceed_the_requests_per_minute_they_share(worker_procs: WorkerProcs,
                                                                         anthropic_env: FakeAnthropic,
                                                                         redis_url: str):
    """120 a minute, 150 requests: 120 go at once, the rest 2 a second as the bucket refills, and the API never
    has to refuse one."""
    limit, count = 120, 150
    anthropic_env.limit(requests_per_minute=limit)
    anthropic_env.responder = lambda request: Answer.solution(FINAL)
    start_dispatchers(worker_procs, AGENTQ_LLM_LIMITS=json.dumps({"*": {"requests_per_minute": limit}}))
    with client(redis_url, "a") as a, client(redis_url, "b") as b, ThreadPoolExecutor(8) as pool:
        handles = list(pool.map(lambda i: (a if i % 2 else b).submit(job(f"job {i}")), range(count)))
        records = [handle.result(timeout=120) for handle in handles]
    assert [r["status"] for r in records] == ["succeeded"] * count
    assert anthropic_env.rate_limited == 0  # the limit was never exceeded
    assert len(anthropic_env.requests) == count  # each request sent once
    assert {sender(r) for r in anthropic_env.requests} == {"a", "b"}
    assert anthropic_env.most_in_window(1.0) <= limit + limit / 60 + 1  # the burst, then the refill's pace


def test_a_429_pauses_every_dispatcher_for_its_retry_after(worker_procs: WorkerProcs, anthropic_env: FakeAnthropic,
                                                           redis_url: str):
    retry_after = 4
    refused = threading.Event()

    def answer(request: RecordedRequest) -> Answer:
        if not refused.is_set():
            refused.set()
            return Answer.http_error(429, headers={"retry-after": str(retry_after)})
        return Answer.solution(FINAL)

    anthropic_env.responder = answer
    start_dispatchers(worker_procs)
    with client(redis_url, "a") as a, client(redis_url, "b") as b:
        first = a.submit(job("refused first"))
        assert refused.wait(60)
        store, model = store_of(a), Settings().model
        wait_for(lambda: store.redis.hget(store.fleet.llm(model), "paused_until"), 30,
                 "dispatcher a to pause the model for the fleet")
        second = b.submit(job("after the 429"))  # the other process's first request to the model
        records = [first.result(timeout=60), second.result(timeout=60)]
    assert [r["status"] for r in records] == ["succeeded", "succeeded"]
    log = anthropic_env.exchanges
    refusal = log[0].answer
    assert [sender(e.request) for e in log[:1]] == ["a"] and refusal is not None and refusal.status == 429
    refused_at = log[0].request.received_at
    later = {sender(e.request): e.request.received_at - refused_at for e in log[1:]}
    assert set(later) == {"a", "b"} and len(log) == 3
    assert later["b"] >= retry_after - 0.05, later  # the other dispatcher waited out the pause too
    assert later["a"] >= retry_after - 0.05, later
    assert anthropic_env.refusals == []
