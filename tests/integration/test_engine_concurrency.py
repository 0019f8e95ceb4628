"""The engine holds model streams, not processes (docs/rate-limits.md): one `agentq dispatcher` started with its
defaults keeps hundreds of model requests in flight, and a client waited on by hundreds of threads shares its
connections to the store instead of failing. Real processes, real Redis, the real SDK against the fake Messages API."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from agentq.client import Client
from agentq.settings import Settings
from tests.fake_anthropic import Answer, FakeAnthropic, RecordedRequest
from tests.integration.conftest import Harness, store_of
from tests.integration.procs import WorkerProcs

OUTPUT = {"type": "object", "properties": {"done": {"type": "boolean"}}, "required": ["done"]}
AGENT_JOB = {"context": [{"type": "text", "text": "Answer when you can."}], "tools": [], "output": OUTPUT}
HELD = 200


def test_one_default_dispatcher_keeps_200_model_requests_in_flight(worker_procs: WorkerProcs,
                                                                    anthropic_env: FakeAnthropic, redis_url: str):
    """Each request is answered only once 200 are in flight at the fake: a dispatcher that held fewer streams
    would never get there (the gate's wait is only a bound, so that such a dispatcher fails this test)."""
    all_in = threading.Event()

    def answer(request: RecordedRequest) -> Answer:
        if anthropic_env.in_flight >= HELD:
            all_in.set()
        all_in.wait(120)
        return Answer.solution({"calls": [], "output": {"done": True}})

    anthropic_env.responder = answer
    dispatcher = worker_procs.dispatcher(AGENTQ_LLM="anthropic")  # no --pool, no --concurrency: its defaults
    worker_procs.wait_dispatcher(dispatcher)
    with Client(settings=Settings(redis_url=redis_url)) as client, ThreadPoolExecutor(8) as pool:
        handles = list(pool.map(lambda _: client.submit(AGENT_JOB), range(HELD)))
        records = [handle.result(timeout=180) for handle in handles]
    assert all_in.is_set(), f"at most {anthropic_env.peak_in_flight} requests were in flight at once"
    assert anthropic_env.peak_in_flight == HELD
    assert [r["status"] for r in records] == ["succeeded"] * HELD
    assert all(r["result"] == {"done": True} for r in records)


def test_200_threads_waiting_on_jobs_share_8_store_connections(harness: Harness):
    """Each waiting thread blocks on its job's end a second at a time, holding a connection meanwhile: with 8
    connections for 200 threads, most of them wait for a free connection (redis-py's plain pool would fail them
    with "Too many connections")."""
    release = threading.Event()
    harness.tool("hold", params={"i": {"type": "integer"}}, output={"type": "integer"}, required=["i"])

    @harness.activities.register("hold")
    def hold(call: dict) -> int:
        release.wait(120)
        return call["i"]

    harness.worker(concurrency=8)
    client = Client(settings=harness.settings.model_copy(update={"redis_max_connections": 8}))
    harness.on_close(client.close)
    assert store_of(client).redis.connection_pool.max_connections == 8
    handles = [client.submit({"calls": [{"_tool": "hold", "i": i, "_outputPath": "†state.i"}]}) for i in range(200)]
    waiting = threading.Semaphore(0)

    def wait(handle) -> dict:
        waiting.release()
        return handle.result(timeout=120)

    with ThreadPoolExecutor(200) as pool:
        futures = [pool.submit(wait, handle) for handle in handles]
        for _ in handles:
            waiting.acquire()  # every thread is about to wait on its job
        release.set()
        records = [future.result() for future in futures]
    assert [r["status"] for r in records] == ["succeeded"] * 200
    assert [r["state"]["i"] for r in records] == list(range(200))
