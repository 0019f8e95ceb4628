"""Resuming a job where it stopped (docs/resume.md) with real parts: real Redis, real Celery workers (threads), the
real `anthropic` SDK against the fake Messages API. What ran is counted outside the store: the activities append a
line per run to a ledger file, and an outside dependency is "down" while a flag file exists."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from agentq.errors import ConflictError, JobValidationError
from agentq.protocol.status import CALL_FINAL
from tests.fake_anthropic import Answer, FakeAnthropic, RecordedRequest
from tests.integration.conftest import Harness, store_of
from tests.integration.procs import wait_for

pytestmark = pytest.mark.timeout(120)


class Ledger:
    """A file the activities append one line per run to (`<activity> <tag>`)."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()

    def add(self, line: str) -> None:
        with self._lock, self.path.open("a", encoding="utf-8") as file:
            file.write(line + "\n")

    def runs(self) -> list[str]:
        return self.path.read_text(encoding="utf-8").splitlines() if self.path.exists() else []


def plan_job_with_a_payment(harness: Harness, tmp_path: Path) -> tuple[Ledger, Path]:
    """Three activities: `reserve` and `invoice` always work; `pay` fails while `payments-down` exists (its one retry
    too). Each run is a ledger line."""
    ledger, down = Ledger(tmp_path / "ledger.txt"), tmp_path / "payments-down"
    for name in ("reserve", "invoice", "pay"):
        harness.tool(name, params={"order": {"type": "string"}})

    def step(name: str):
        def run(call: dict) -> dict:
            ledger.add(f"{name} {call['order']}")
            if name == "pay" and down.exists():
                raise ConnectionError("the payment API is down")
            return {"done": name, "order": call["order"]}
        return run

    harness.activities.register("reserve", step("reserve"))
    harness.activities.register("invoice", step("invoice"))
    harness.activities.register("pay", step("pay"), retries=1, retry_backoff=0.05)
    harness.worker()
    return ledger, down


ORDER_JOB = {"calls": [
    {"_tool": "reserve", "order": "o-1", "_outputPath": "†state.reserved"},
    {"_tool": "invoice", "order": "o-1", "_outputPath": "†state.invoiced"},
    {"_tool": "pay", "order": "†state.invoiced.order", "_outputPath": "†state.paid"},
]}


def test_a_plan_job_failed_by_a_dependency_resumes_once_it_is_back_and_runs_only_what_failed(
        harness: Harness, tmp_path: Path):
    ledger, down = plan_job_with_a_payment(harness, tmp_path)
    down.touch()
    client = harness.client()
    handle = client.submit(ORDER_JOB)
    failed = handle.result(timeout=30)
    assert failed["status"] == "failed" and failed["error"]["type"] == "CallsFailed", failed
    assert sorted(ledger.runs()) == ["invoice o-1", "pay o-1", "pay o-1", "reserve o-1"]  # pay: an attempt, a retry

    down.unlink()  # the payment API is back
    resumed = handle.resume()
    assert resumed["status"] in ("running", "succeeded")
    record = handle.result(timeout=30)
    assert record["status"] == "succeeded", record
    assert record["error"] is None
    assert record["state"]["paid"] == {"done": "pay", "order": "o-1"}
    assert record["state"]["reserved"] == {"done": "reserve", "order": "o-1"}
    # the two committed calls did not run again; the failed one ran once more
    assert sorted(ledger.runs()) == ["invoice o-1", "pay o-1", "pay o-1", "pay o-1", "reserve o-1"]
    first, second = record["runs"]
    assert first["run"] == 1 and first["status"] == "failed" and first["error"]["type"] == "CallsFailed"
    assert first["started_at"] and first["finished_at"]
    assert second == {"run": 2, "started_at": second["started_at"], "finished_at": record["finished_at"],
                      "status": "succeeded", "error": None}
    # one stream: the first run's end, job.resumed, the failed call's new attempt, the new end
    events = [e.data for e in handle.events(follow=True)]
    names = [e["event"] for e in events]
    assert names.count("job.finished") == 2 and names.count("job.resumed") == 1
    resumed_at = names.index("job.resumed")
    assert names[resumed_at - 1] == "job.finished" and names[-1] == "job.finished"
    assert events[resumed_at]["run"] == 2 and events[resumed_at]["previous"]["status"] == "failed"
    assert [e["tool"] for e in events[resumed_at:] if e["event"] == "call.started"] == ["pay"]
    pay = next(c for c in handle.calls() if c["tool"] == "pay")
    assert pay["status"] == "done" and pay["attempts"] == 1  # a fresh attempt count for the new run


def test_a_canceled_job_resumes_and_runs_the_calls_the_cancel_stopped(harness: Harness, tmp_path: Path):
    ledger = Ledger(tmp_path / "ledger.txt")
    gate = threading.Event()
    harness.tool("first", params={"n": {"type": "integer"}})
    harness.tool("then", params={"n": {"type": "integer"}})

    def first(call: dict) -> int:
        ledger.add("first")
        return call["n"]

    def then(call: dict) -> int:
        ledger.add("then")
        return call["n"] * 10

    harness.activities.register("first", first)
    harness.activities.register("then", then)
    harness.worker()
    client = harness.client()
    # a signal wait between the two calls holds the job until it is canceled
    handle = client.submit({"tools": ["first", "then", "waitForSignal"], "calls": [
        {"_tool": "first", "n": 4, "_outputPath": "†state.first"},
        {"_tool": "waitForSignal", "name": "go", "timeout_s": 600, "after": "†state.first",
         "_outputPath": "†state.go"},
        {"_tool": "then", "n": "†state.first", "after": "†state.go", "_outputPath": "†state.then"},
    ]})
    wait_for(lambda: any(c["status"] == "waiting" for c in handle.calls()), 20, "the wait to open")
    assert handle.cancel() == "canceled"
    assert handle.result(timeout=10)["status"] == "canceled"
    gate.set()
    record = handle.resume()
    assert record["status"] == "running"
    handle.signal("go", {"ok": True})
    done = handle.result(timeout=30)
    assert done["status"] == "succeeded", done
    assert done["state"]["then"] == 40
    assert ledger.runs() == ["first", "then"]  # `first` committed before the cancel: never again
    assert [r["status"] for r in done["runs"]] == ["canceled", "succeeded"]


def test_two_resumes_at_once_resume_the_job_once(harness: Harness, tmp_path: Path):
    ledger, down = plan_job_with_a_payment(harness, tmp_path)
    down.touch()
    client = harness.client()
    handle = client.submit(ORDER_JOB)
    assert handle.result(timeout=30)["status"] == "failed"
    down.unlink()
    outcomes: list[str] = []
    barrier = threading.Barrier(4)

    def resume() -> None:
        barrier.wait()
        try:
            harness.client().job(handle.id).resume()
            outcomes.append("resumed")
        except ConflictError:
            outcomes.append("conflict")

    threads = [threading.Thread(target=resume) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["conflict"] * 3 + ["resumed"]
    record = handle.result(timeout=30)
    assert record["status"] == "succeeded" and len(record["runs"]) == 2
    assert ledger.runs().count("pay o-1") == 3  # two in the first run, one in the one resumed run
    events = [e.data["event"] for e in handle.events(follow=False)]
    assert events.count("job.resumed") == 1


def test_resuming_a_succeeded_or_running_job_conflicts_and_bad_options_name_their_pointers(
        harness: Harness, tmp_path: Path):
    harness.tool("slow", params={"n": {"type": "integer"}})
    release = threading.Event()
    harness.activities.register("slow", lambda call: release.wait(20) and call["n"])
    harness.worker()
    client = harness.client()
    running = client.submit({"calls": [{"_tool": "slow", "n": 1, "_outputPath": "†state.n"}]})
    wait_for(lambda: running.status() == "running", 20, "the job to run")
    store = store_of(client)
    with pytest.raises(ConflictError, match="only a failed or canceled job can be resumed"):
        running.resume()
    release.set()
    assert running.result(timeout=20)["status"] == "succeeded"
    with pytest.raises(ConflictError, match="succeeded: there is nothing to resume"):
        running.resume()
    with pytest.raises(JobValidationError) as bad:
        running.resume({"budget": {"max_requests": "many"}, "start_at": "2030-01-01T00:00:00Z", "colour": "red"})
    pointers = sorted(p.pointer for p in bad.value.problems)
    assert pointers == ["/options/budget/max_requests", "/options/colour", "/options/start_at"], pointers
    record = running.record()
    assert record["status"] == "succeeded" and "runs" not in record
    assert not any(e.data["event"] == "job.resumed" for e in running.events(follow=False))
    assert [e.data["event"] for e in running.events(follow=False)].count("job.finished") == 1
    assert all(s in CALL_FINAL for s in store.call_statuses(running.id).values())



def test_an_agent_job_stopped_by_its_budget_resumes_with_a_larger_one_without_repeating_its_calls(
        harness: Harness, anthropic_env: FakeAnthropic, tmp_path: Path):
    ledger = Ledger(tmp_path / "ledger.txt")
    harness.tool("lookup", params={"q": {"type": "string"}}, output={"type": "string"})

    def lookup(call: dict) -> str:
        ledger.add(f"lookup {call['q']}")
        return f"found {call['q']}"

    harness.activities.register("lookup", lookup)
    harness.worker(llm="anthropic")
    asked: list[RecordedRequest] = []

    def answer(request: RecordedRequest) -> Answer:
        asked.append(request)
        if len(asked) == 1:
            return Answer.solution({"calls": [{"_tool": "lookup", "q": "orders", "_outputPath": "†state.orders"}],
                                    "output": None})
        return Answer.solution({"calls": [], "output": "all done"})

    anthropic_env.responder = answer
    client = harness.client()
    handle = client.submit({"context": [{"type": "text", "text": "Look up the orders."}], "tools": ["lookup"],
                            "options": {"budget": {"max_requests": 1}}})
    failed = handle.result(timeout=30)
    assert failed["status"] == "failed" and failed["error"]["type"] == "BudgetExceeded", failed
    assert len(asked) == 1 and ledger.runs() == ["lookup orders"]

    with pytest.raises(JobValidationError):
        handle.resume({"budget": {"max_requests": -1}})
    handle.resume({"budget": {"max_requests": 3}})
    record = handle.result(timeout=30)
    assert record["status"] == "succeeded", record
    assert record["result"] == "all done"
    assert ledger.runs() == ["lookup orders"]  # the committed call did not run again
    assert len(asked) == 2
    note = asked[-1].last_user_text
    assert "resumed after its error (BudgetExceeded" in note, note
    assert [r["status"] for r in record["runs"]] == ["failed", "succeeded"]
    assert record["runs"][0]["error"]["type"] == "BudgetExceeded"


def test_a_deadline_exceeded_job_resumes_under_a_new_deadline_from_the_resume(harness: Harness, tmp_path: Path):
    ledger, slow = Ledger(tmp_path / "ledger.txt"), tmp_path / "slow"
    harness.tool("fetch", params={"url": {"type": "string"}})

    def fetch(call: dict) -> dict:
        ledger.add("fetch start")
        run = ledger.runs().count("fetch start")
        if slow.exists():
            time.sleep(2.5)
        ledger.add(f"fetch end {run}")
        return {"attempt": run}

    harness.activities.register("fetch", fetch)
    harness.worker(timer_poll_s=0.1)
    slow.touch()
    handle = harness.client().submit({"calls": [{"_tool": "fetch", "url": "https://example.com",
                                                 "_outputPath": "†state.page"}], "options": {"deadline_s": 1}})
    assert handle.result(timeout=20)["error"]["type"] == "DeadlineExceeded"

    started = time.monotonic()
    handle.resume()  # still slow: the job's own deadline_s counts again from the resume, and ends this run too
    again = handle.result(timeout=20)
    assert again["status"] == "failed" and again["error"]["type"] == "DeadlineExceeded", again
    assert 1 <= time.monotonic() - started < 2.5
    wait_for(lambda: "fetch end 2" in ledger.runs(), 10, "the cut-off attempts to end")

    slow.unlink()
    handle.resume({"deadline_s": 30})
    record = handle.result(timeout=20)
    assert record["status"] == "succeeded", record
    assert record["state"]["page"] == {"attempt": 3}  # the cut-off attempts' late outcomes never reached the job
    assert [(r["status"], (r["error"] or {}).get("type")) for r in record["runs"]] == [
        ("failed", "DeadlineExceeded"), ("failed", "DeadlineExceeded"), ("succeeded", None)]
    wait_for(lambda: "fetch end 1" in ledger.runs(), 10, "the first cut-off attempt to end")
    assert store_of(harness.client()).record(handle.id).to_dict()["state"]["page"] == {"attempt": 3}


def test_a_resumed_jobs_webhook_delivers_the_end_of_each_run(redis_url: str, tmp_path: Path):
    from tests.integration.test_webhooks import FAST
    from tests.integration.webhook_receiver import Receiver

    receiver = Receiver()
    harness = Harness(redis_url, **FAST)
    try:
        _, down = plan_job_with_a_payment(harness, tmp_path)
        down.touch()
        handle = harness.client().submit({**ORDER_JOB, "options": {"webhook": {"url": receiver.url}}})
        assert handle.result(timeout=30)["status"] == "failed"
        first = receiver.delivered(lambda r: r.payload["data"].get("status") == "failed")
        down.unlink()
        handle.resume()
        assert handle.result(timeout=30)["status"] == "succeeded"
        second = receiver.delivered(lambda r: r.payload["data"].get("status") == "succeeded")
        assert first.verified and second.verified
        assert second.payload["type"] == "job.finished" and len(second.payload["data"]["runs"]) == 2
        assert second.headers["webhook-id"] != first.headers["webhook-id"]
    finally:
        harness.close()
        receiver.close()


def test_a_resume_takes_a_place_among_its_tenants_active_jobs_again(harness: Harness):
    from agentq import RateLimited

    harness.settings = harness.settings.model_copy(update={"tenants": {"acme": {"max_active_jobs": 1}}})
    opened = threading.Event()
    harness.tool("hold", params={"n": {"type": "integer"}})
    harness.activities.register("hold", lambda call: opened.wait(30) and call["n"])
    harness.worker()
    client = harness.client(tenant="acme")
    canceled = client.submit({"calls": [{"_tool": "hold", "n": 1, "_outputPath": "†state.n"}]})
    canceled.cancel()  # its end gave its place back
    busy = client.submit({"calls": [{"_tool": "hold", "n": 2, "_outputPath": "†state.n"}]})
    events_before = [e.data["event"] for e in canceled.events(follow=False)]
    with pytest.raises(RateLimited, match="the job was not resumed"):
        canceled.resume()
    assert canceled.status() == "canceled"
    assert [e.data["event"] for e in canceled.events(follow=False)] == events_before  # nothing written
    opened.set()
    assert busy.result(timeout=30)["status"] == "succeeded"
    wait_for(lambda: canceled.status() == "canceled" and not store_of(client).redis.zscore(
        "agentq:tenant:{acme}:active", busy.id), 10, "the busy job to leave its tenant's active jobs")
    canceled.resume()
    assert canceled.result(timeout=30)["status"] == "succeeded"


def test_a_resumed_job_waits_for_its_concurrency_keys_as_a_new_job_does(harness: Harness, tmp_path: Path):
    ledger, down = plan_job_with_a_payment(harness, tmp_path)
    opened = threading.Event()
    harness.tool("hold", params={"n": {"type": "integer"}})
    harness.activities.register("hold", lambda call: opened.wait(30) and call["n"])
    harness.worker()
    keyed = {"options": {"concurrency": [{"key": "acct-7", "limit": 1}]}}
    client = harness.client()
    down.touch()
    order = client.submit({**ORDER_JOB, **keyed})
    assert order.result(timeout=30)["status"] == "failed"
    holder = client.submit({"calls": [{"_tool": "hold", "n": 1, "_outputPath": "†state.n"}], **keyed})
    wait_for(lambda: holder.status() == "running", 20, "the other job to hold the key")
    down.unlink()
    assert order.resume()["status"] == "waiting"  # the key is held: nothing of it is sent
    assert order.status() == "waiting"
    assert ledger.runs().count("pay o-1") == 2
    opened.set()  # the holder ends, the key goes to the resumed job
    assert holder.result(timeout=30)["status"] == "succeeded"
    assert order.result(timeout=30)["status"] == "succeeded"
    assert ledger.runs().count("pay o-1") == 3 and ledger.runs().count("reserve o-1") == 1


def test_the_async_client_resumes_a_job(harness: Harness, tmp_path: Path):
    import asyncio

    from agentq.async_client import AsyncClient

    ledger, down = plan_job_with_a_payment(harness, tmp_path)
    down.touch()

    async def scenario() -> tuple[dict, dict]:
        async with AsyncClient(settings=harness.settings) as client:
            handle = await client.submit(ORDER_JOB)
            failed = await handle.result(timeout=30)
            down.unlink()
            resumed = await client.resume(handle.id, {"ttl_s": 600})
            return failed, await resumed.result(timeout=30)

    failed, record = asyncio.run(scenario())
    assert (failed["status"], record["status"]) == ("failed", "succeeded")
    assert [r["status"] for r in record["runs"]] == ["failed", "succeeded"]
    assert ledger.runs().count("invoice o-1") == 1
