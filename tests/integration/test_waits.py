"""Wait calls (docs/waits.md) with real processes: real Redis, real `agentq dispatcher` processes, the real SDK
against the fake Messages API. A wait holds nothing while it waits; its due time lives in Redis, so a dispatcher
killed with SIGKILL loses no wait."""

from __future__ import annotations

import asyncio
import json
import shlex
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agentq.async_client import AsyncClient
from agentq.client import Client
from agentq.protocol.status import CallStatus
from agentq.protocol.waits import wait_digest
from agentq.runtime.app import create_app
from agentq.settings import Settings
from agentq.store.state import StateStore
from tests.api_server import ApiServer
from tests.fake_anthropic import Answer, FakeAnthropic
from tests.integration.procs import WorkerProcs, cli, wait_for
from tests.integration.timers import due_timers


def _seconds(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def _call_status(client: Client, job_id: str) -> list[str]:
    return [c["status"] for c in client.calls(job_id)]


def test_a_plan_job_with_sleep_resumes_after_its_dispatcher_is_killed(worker_procs: WorkerProcs, redis_url: str):
    first = worker_procs.dispatcher()
    worker_procs.wait_dispatcher(first)
    with Client(settings=Settings(redis_url=redis_url)) as client:
        submitted = time.time()
        handle = client.submit({"tools": ["sleep"], "calls": [
            {"_tool": "sleep", "seconds": 6, "_outputPath": "†state.slept"}]})
        wait_for(lambda: _call_status(client, handle.id) == [CallStatus.WAITING.value], 20, "the sleep to wait")
        events = [e.envelope.to_dict() for e in handle.events(follow=False)]
        waiting = [e for e in events if e["event"] == "call.waiting"]
        assert len(waiting) == 1 and waiting[0]["awaits"] == {"kind": "sleep"}
        assert _seconds(waiting[0]["until"]) - submitted >= 5.9
        first.kill()  # SIGKILL while the call waits: its due time is in Redis
        second = worker_procs.dispatcher()
        worker_procs.wait_dispatcher(second)
        record = handle.result(timeout=30)
    assert record["status"] == "succeeded"
    woke_at = _seconds(record["state"]["slept"]["woke_at"])
    assert 0 <= woke_at - _seconds(waiting[0]["until"]) < 1.5  # fired within a second of its due time
    wait_for(lambda: len(due_timers(worker_procs.store.redis)) == 0, 5, "the timer to be dropped")


ACME, GLOBEX, ACME_READ = "acme-token-0123456789", "globex-token-0123456789", "acme-read-token-0123456789"


@pytest.fixture
def api(redis_url: str, tmp_path: Path) -> Iterator[ApiServer]:
    """The API over the test's Redis, with a submit token for tenants acme and globex and a read token for acme."""
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps({ACME: {"tenant": "acme"}, GLOBEX: {"tenant": "globex"},
                                ACME_READ: {"tenant": "acme", "role": "read"}}))
    with ApiServer(Settings(redis_url=redis_url), tokens=[f"@{path}"]) as server:
        yield server


def _submit(api: ApiServer, job: dict, token: str = ACME) -> str:
    created = api.request("POST", "/v1/jobs", json_body=job, token=token)
    assert created.status == 201, created.body
    return str(created.json()["id"])


def _ended(api: ApiServer, job_id: str, token: str = ACME) -> dict:
    def ended() -> dict | None:
        record = api.request("GET", f"/v1/jobs/{job_id}", token=token).json()
        return record if record["status"] in ("succeeded", "failed", "canceled") else None

    return dict(wait_for(ended, 30, f"job {job_id} to end"))


def test_a_signal_sent_before_its_wait_opens_is_kept_for_it(worker_procs: WorkerProcs, api: ApiServer):
    job_id = _submit(api, {"tools": ["waitForSignal"], "calls": [
        {"_tool": "waitForSignal", "name": "approved", "timeout_s": 60, "_outputPath": "†state.approval"}]})
    path = f"/v1/jobs/{job_id}/signals/approved"
    # no dispatcher runs yet: the wait has not opened. Read tokens cannot send; another tenant's job is not found
    assert api.request("POST", path, json_body={"data": 1}, token=ACME_READ).status == 403
    assert api.request("POST", path, json_body={"data": 1}, token=GLOBEX).status == 404
    bad = api.request("POST", path, json_body={"data": 1, "extra": 2}, token=ACME)
    assert bad.status == 422 and bad.json()["error"]["problems"][0]["pointer"] == "/extra"
    sent = api.request("POST", path, json_body={"data": {"by": "jane"}}, token=ACME)
    assert sent.status == 200, sent.body
    assert sent.json()["taken"] is False  # kept with the job
    dispatcher = worker_procs.dispatcher()
    worker_procs.wait_dispatcher(dispatcher)
    record = _ended(api, job_id)
    assert record["status"] == "succeeded"
    approval = record["state"]["approval"]
    assert (approval["name"], approval["data"], approval["id"]) == ("approved", {"by": "jane"},
                                                                    sent.json()["signal"]["id"])
    ended = api.request("POST", path, json_body={"data": 2}, token=ACME)
    assert ended.status == 409 and ended.json()["error"]["type"] == "Conflict"
    assert worker_procs.store.redis.llen(f"agentq:{{{job_id}}}:signals:approved") == 0


def test_an_event_wakes_the_waits_of_its_tenant_that_match_it(worker_procs: WorkerProcs, api: ApiServer):
    dispatcher = worker_procs.dispatcher()
    worker_procs.wait_dispatcher(dispatcher)
    job = {"context": [{"type": "data", "kind": "state", "data": {"order": {"id": "o-17"}}}],
           "tools": ["waitForEvent"],
           "calls": [{"_tool": "waitForEvent", "event": "payment.captured", "timeout_s": 60,
                      "match": {"/order/id": "†state.order.id", "/ok": True}, "_outputPath": "†state.payment"}]}
    job_id = _submit(api, job)
    store = worker_procs.store
    wait_for(lambda: store.redis.hget(f"agentq:{{{job_id}}}:status", _only_call(store, job_id)) == "waiting", 20,
             "the wait to open")
    waiting = [e for e in _events(api, job_id) if e["event"] == "call.waiting"]
    assert waiting[0]["awaits"] == {"kind": "event", "event": "payment.captured",
                                    "match": {"/order/id": "o-17", "/ok": True}}  # its reference resolved
    data = {"order": {"id": "o-17"}, "ok": True, "amount": 42}
    for token, body in ((GLOBEX, {"name": "payment.captured", "data": data}),  # another tenant's: never crosses
                        (ACME, {"name": "payment.captured", "data": {**data, "order": {"id": "o-18"}}}),
                        (ACME, {"name": "payment.failed", "data": data})):
        answer = api.request("POST", "/v1/events", json_body=body, token=token)
        assert answer.status == 200 and answer.json()["woken"] == 0, answer.body
    assert api.request("POST", "/v1/events", json_body={"name": "payment.captured", "data": data},
                       token=ACME_READ).status == 403
    assert api.request("GET", f"/v1/jobs/{job_id}", token=ACME).json()["status"] == "running"
    sent = api.request("POST", "/v1/events", json_body={"name": "payment.captured", "data": data, "id": "evt-1"},
                       token=ACME)
    assert sent.json() == {"id": "evt-1", "woken": 1}
    again = api.request("POST", "/v1/events", json_body={"name": "payment.captured", "data": data, "id": "evt-1"},
                        token=ACME)
    assert again.json() == {"id": "evt-1", "woken": 0}  # a re-sent id is ignored
    record = _ended(api, job_id)
    assert record["status"] == "succeeded"
    payment = record["state"]["payment"]
    assert (payment["name"], payment["data"], payment["id"]) == ("payment.captured", data, "evt-1")


def test_a_timeout_is_taken_by_the_or_branch(worker_procs: WorkerProcs, api: ApiServer):
    dispatcher = worker_procs.dispatcher()
    worker_procs.wait_dispatcher(dispatcher)
    started = time.time()
    job_id = _submit(api, {"tools": ["waitForSignal"], "calls": [
        {"_tool": "waitForSignal", "name": "reply", "timeout_s": 1.5,
         "_outputPath": "†state.reply || †state.noReply"}]})
    record = _ended(api, job_id)
    assert record["status"] == "succeeded"
    assert record["state"]["noReply"]["error"]["type"] == "WaitTimedOut"
    assert "reply" not in record["state"]
    assert time.time() - started >= 1.5


def test_bad_waits_and_events_are_refused_with_every_problem_and_nothing_written(api: ApiServer):
    long_ago = datetime.fromtimestamp(time.time() - 3 * 86_400, UTC).isoformat().replace("+00:00", "Z")
    job = {"tools": ["sleep", "waitForEvent", "waitForSignal"], "calls": [
        {"_tool": "sleep", "until": long_ago},
        {"_tool": "waitForEvent", "event": "x", "match": {"order.id": 1}},
        {"_tool": "waitForSignal", "name": "go", "timeout_s": -1}]}
    refused = api.request("POST", "/v1/jobs", json_body=job, token=ACME)
    assert refused.status == 422, refused.body
    pointers = {p["pointer"] for p in refused.json()["error"]["problems"]}
    assert {"/calls/0/until", "/calls/2/timeout_s"} <= pointers
    assert any(p.startswith("/calls/1/match") for p in pointers), pointers
    assert api.request("GET", "/v1/jobs", token=ACME).json() == []
    no_name = api.request("POST", "/v1/events", json_body={"data": {}}, token=ACME)
    assert no_name.status == 422 and [p["pointer"] for p in no_name.json()["error"]["problems"]] == ["/name"]


def _only_call(store: StateStore, job_id: str) -> str:
    return next(iter(store.redis.hkeys(f"agentq:{{{job_id}}}:calls")))


def _events(api: ApiServer, job_id: str) -> list[dict]:
    """The job's events so far (the SSE stream would follow until the job ends)."""
    with Client(settings=api.parts.settings) as client:
        return [e.envelope.to_dict() for e in client.job(job_id).events(follow=False)]


def test_the_cli_sends_signals_and_events(worker_procs: WorkerProcs, redis_url: str):
    dispatcher = worker_procs.dispatcher()
    worker_procs.wait_dispatcher(dispatcher)
    with Client(settings=Settings(redis_url=redis_url)) as client:
        handle = client.submit({"tools": ["waitForSignal"], "calls": [
            {"_tool": "waitForSignal", "name": "go", "_outputPath": "†state.go"}]})
        wait_for(lambda: _call_status(client, handle.id) == [CallStatus.WAITING.value], 20, "the wait to open")
        shown = cli(redis_url, "calls", handle.id)
        assert shown.returncode == 0 and "waiting" in shown.stdout, shown.stdout + shown.stderr
        bad = cli(redis_url, "signal", handle.id, "go", "{not json")
        assert bad.returncode == 1 and "DATA is not JSON" in bad.stderr
        sent = cli(redis_url, "signal", handle.id, "go", '{"n": 1}')
        assert sent.returncode == 0, sent.stderr
        assert json.loads(sent.stdout)["taken"] is True  # the open wait took it
        record = handle.result(timeout=30)
    assert record["state"]["go"]["data"] == {"n": 1}
    event = cli(redis_url, "send-event", "nobody.waits", '{"x": 1}', "--id", "e-1")
    assert event.returncode == 0 and json.loads(event.stdout) == {"id": "e-1", "woken": 0}, event.stderr


def test_an_agent_job_waits_for_an_event_holding_nothing_then_the_model_sees_it(
        worker_procs: WorkerProcs, anthropic_env: FakeAnthropic, redis_url: str):
    """While its one open call waits, the job holds no engine thread (the dispatcher runs no task), no admission
    place and no worker slot; the event sent through the API wakes it, and its next model request carries it."""
    anthropic_env.script(
        Answer.solution({"calls": [{"_tool": "waitForEvent", "event": "customer.reply", "timeout_s": 120,
                                    "match": {"/ticket": "T-1"}, "_outputPath": "†state.reply"}], "output": None}),
        Answer.solution({"calls": [], "output": {"answer": "replied"}}))
    dispatcher = worker_procs.dispatcher(AGENTQ_LLM="anthropic")
    node = worker_procs.wait_dispatcher(dispatcher)["node"]
    settings = Settings(redis_url=redis_url)
    with Client(settings=settings) as client:
        handle = client.submit({"context": [{"type": "text", "text": "Wait for the customer's reply on T-1."}],
                                "tools": ["waitForEvent"], "output": {"type": "object"}})
        wait_for(lambda: _call_status(client, handle.id) == [CallStatus.WAITING.value], 30, "the wait to open")
        store = worker_procs.store
        inspect = create_app(settings).control.inspect(timeout=2.0, destination=[node])
        assert inspect.active()[node] == [] and inspect.reserved()[node] == []  # no engine thread, no task held
        assert store.admission_counts() == {}  # no admission place
        assert client.record(handle.id)["status"] == "running"
        assert len(anthropic_env.requests) == 1
        sent = client.send_event("customer.reply", {"ticket": "T-1", "text": "It works now, thanks!"}, id="r-1")
        assert sent == {"id": "r-1", "woken": 1}
        record = handle.result(timeout=30)
    assert record["status"] == "succeeded" and record["result"] == {"answer": "replied"}
    second = json.dumps(anthropic_env.requests[1].body["messages"], ensure_ascii=False)
    assert "It works now, thanks!" in second and "r-1" in second


def test_the_guides_example_works_as_written(worker_procs: WorkerProcs, redis_url: str):
    """docs/waits.md's order job, woken by the `agentq send-event` line it shows."""
    guide = (Path(__file__).resolve().parents[2] / "docs" / "waits.md").read_text()
    job = json.loads(guide.split("<!-- example: job -->\n```json\n", 1)[1].split("```", 1)[0])
    command = next(line for line in guide.splitlines() if line.startswith("$ agentq send-event"))
    dispatcher = worker_procs.dispatcher()
    worker_procs.wait_dispatcher(dispatcher)
    with Client(settings=Settings(redis_url=redis_url)) as client:
        handle = client.submit(job)
        wait_for(lambda: _call_status(client, handle.id) == [CallStatus.WAITING.value], 20, "the wait to open")
        sent = cli(redis_url, *shlex.split(command)[2:])
        assert sent.returncode == 0 and json.loads(sent.stdout) == {"id": "evt_123", "woken": 1}, sent.stderr
        record = handle.result(timeout=30)
    assert record["status"] == "succeeded"
    assert record["state"]["payment"]["data"] == {"order": {"id": "o-17"}, "amount_cents": 4990}


def test_a_canceled_job_drops_its_waits(worker_procs: WorkerProcs, api: ApiServer):
    dispatcher = worker_procs.dispatcher()
    worker_procs.wait_dispatcher(dispatcher)
    job_id = _submit(api, {"tools": ["waitForEvent"], "calls": [
        {"_tool": "waitForEvent", "event": "never", "match": {"/n": 1}, "_outputPath": "†state.e"}]})
    store = worker_procs.store
    wait_for(lambda: store.redis.hget(f"agentq:{{{job_id}}}:status", _only_call(store, job_id)) == "waiting", 20,
             "the wait to open")
    assert api.request("POST", f"/v1/jobs/{job_id}/cancel", token=ACME).json()["status"] == "canceled"
    assert store.redis.hget(f"agentq:{{{job_id}}}:status", _only_call(store, job_id)) == "canceled"
    sent = api.request("POST", "/v1/events", json_body={"name": "never", "data": {"n": 1}}, token=ACME)
    assert sent.json()["woken"] == 0  # and the stale entry of its index is dropped
    assert store.redis.smembers("agentq:{waits:acme}:event:never:" + wait_digest({"/n": 1})[1]) == set()
    assert [e["event"] for e in _events(api, job_id)].count("call.finished") == 0  # nothing commits after


def test_the_async_client_signals_a_job_and_sends_events(harness):
    harness.worker()  # an in-process dispatcher opens and fires the wait

    async def scenario() -> tuple[dict, dict, dict]:
        async with AsyncClient(settings=harness.settings) as client:
            handle = await client.submit({"tools": ["waitForSignal"], "calls": [
                {"_tool": "waitForSignal", "name": "go", "_outputPath": "†state.go"}]})
            sent = await handle.signal("go", {"n": 2})
            event = await client.send_event("nobody.waits", {}, id="a-1")
            return sent, event, await handle.result(timeout=30)

    sent, event, record = asyncio.run(scenario())
    assert sent["signal"]["data"] == {"n": 2} and event == {"id": "a-1", "woken": 0}
    assert record["status"] == "succeeded" and record["state"]["go"]["id"] == sent["signal"]["id"]


def test_two_dispatchers_one_killed_while_firing_lose_no_wait_and_double_none(worker_procs: WorkerProcs,
                                                                              redis_url: str):
    """60 sleeps come due at once for two dispatchers; one is killed with SIGKILL as they start firing. Every wait
    ends exactly once: the killed one's claimed timers come due again and the other takes them."""
    first, second = worker_procs.dispatcher(), worker_procs.dispatcher()
    worker_procs.wait_dispatcher(first)
    worker_procs.wait_dispatcher(second)
    store = worker_procs.store
    with Client(settings=Settings(redis_url=redis_url)) as client:
        until = datetime.fromtimestamp(time.time() + 6, UTC).isoformat().replace("+00:00", "Z")
        handles = [client.submit({"tools": ["sleep"], "calls": [{"_tool": "sleep", "until": until,
                                                                 "_outputPath": "†state.slept"}]})
                   for _ in range(60)]
        wait_for(lambda: len(due_timers(store.redis)) == 60, 30, "every sleep to wait")
        wait_for(lambda: len(due_timers(store.redis)) < 60 or
                 any(c["status"] == "done" for h in handles[:5] for c in client.calls(h.id)), 30,
                 "the first sleeps to fire", interval=0.01)
        first.kill()
        records = [h.result(timeout=60) for h in handles]
        finished = [sum(1 for e in h.events(follow=False) if e.envelope.to_dict()["event"] == "call.finished")
                    for h in handles]
    assert [r["status"] for r in records] == ["succeeded"] * 60
    assert finished == [1] * 60  # committed once each
    wait_for(lambda: len(due_timers(store.redis)) == 0, 10, "every timer to be dropped")


def test_a_wait_committed_by_a_dispatcher_that_died_before_the_job_s_step_still_ends_its_job(
        worker_procs: WorkerProcs, redis_url: str, harness) -> None:
    """A dispatcher that committed a woken wait and died before the job's step (its end, the next calls) leaves the
    timer due: the next dispatcher to fire it finds the call no longer waiting and finishes that step."""
    first = worker_procs.dispatcher()
    worker_procs.wait_dispatcher(first)
    with Client(settings=Settings(redis_url=redis_url)) as client:
        handle = client.submit({"tools": ["sleep"], "calls": [
            {"_tool": "sleep", "seconds": 1, "_outputPath": "†state.slept"}]})
        wait_for(lambda: _call_status(client, handle.id) == [CallStatus.WAITING.value], 20, "the sleep to wait")
        first.kill()
        waits = harness.runtime().executor.waits

        def dies_after_the_commit(*args: object, **kwargs: object) -> None:
            raise RuntimeError("killed between the commit and the job's step")

        waits.progress.committed = dies_after_the_commit  # type: ignore[method-assign]
        call_id = client.calls(handle.id)[0]["id"]
        wait_for(lambda: time.time() >= _seconds(client.calls(handle.id)[0]["started_at"] or "1970-01-01T00:00:00Z")
                 + 1, 10, "the sleep to come due")
        with pytest.raises(RuntimeError, match="killed"):
            while waits.fire(handle.id, call_id) == "early":
                time.sleep(0.05)
        assert _call_status(client, handle.id) == [CallStatus.DONE.value]
        assert client.job(handle.id).status() == "running"  # committed, and nothing moved the job on
        second = worker_procs.dispatcher()
        worker_procs.wait_dispatcher(second)
        record = handle.result(timeout=30)
    assert record["status"] == "succeeded" and "woke_at" in record["state"]["slept"]


def test_a_woken_agent_job_asks_again_under_its_budget(worker_procs: WorkerProcs, anthropic_env: FakeAnthropic,
                                                      redis_url: str):
    """A wait in the middle does not reset or skip a job's budget: the request a signal wakes is held to what the
    first request left (one request allowed: the woken tick is refused, the model is asked once in all)."""
    anthropic_env.script(
        Answer.solution({"calls": [{"_tool": "waitForSignal", "name": "go", "timeout_s": 120,
                                    "_outputPath": "†state.go"}], "output": None}),
        Answer.solution({"calls": [], "output": {"answer": "went"}}))
    dispatcher = worker_procs.dispatcher(AGENTQ_LLM="anthropic")
    worker_procs.wait_dispatcher(dispatcher)
    with Client(settings=Settings(redis_url=redis_url)) as client:
        handle = client.submit({"context": [{"type": "text", "text": "Wait for go, then answer."}],
                                "tools": ["waitForSignal"], "output": {"type": "object"},
                                "options": {"budget": {"max_requests": 1}}})
        wait_for(lambda: _call_status(client, handle.id) == [CallStatus.WAITING.value], 30, "the wait to open")
        handle.signal("go", {"now": True})
        record = handle.result(timeout=30)
    assert record["status"] == "failed" and record["error"]["type"] == "BudgetExceeded", record
    assert record["state"]["go"]["data"] == {"now": True}  # the wait ended and was committed first
    assert len(anthropic_env.requests) == 1
