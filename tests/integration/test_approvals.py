"""Approvals (docs/protocol.md#approvals) and the calls view (README.md#the-http-api-and-the-web-page `/calls`) end to
end: real Redis, a real in-process Celery worker, decisions through `JobHandle.approve / reject / edit`.

A held call is shown not to run by letting a sibling call of the same job run to its end first (the worker had
every chance to take the held one); waits poll the store for a status, they never sleep and then assert.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest

from agentq.engine.call_views import CALL_FIELDS
from agentq.errors import CallNotFoundError, ConflictError, JobNotFoundError, JobValidationError
from tests.integration.conftest import store_of, tool_schema
from tests.integration.test_plan_jobs import start_worker

TIMEOUT = 15.0
pytestmark = pytest.mark.timeout(90)


def wait_until(condition: Callable[[], Any], what: str, timeout: float = TIMEOUT) -> Any:
    """Poll `condition` until it returns something truthy (that value), or fail naming `what`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def call_status(client, job_id: str, call_id: str) -> str:
    return store_of(client).call_statuses(job_id)[call_id].value


def wait_status(client, job_id: str, call_id: str, *statuses: str) -> str:
    return wait_until(lambda: (s := call_status(client, job_id, call_id)) in statuses and s,
                      f"call {call_id} to be {' or '.join(statuses)}")


def by_tool(handle) -> dict[str, dict]:
    return {call["tool"]: call for call in handle.calls()}


class Seen:
    """What an activity received, call by call (thread-safe: the worker runs calls on a pool)."""

    def __init__(self) -> None:
        self.calls: list[dict] = []
        self._lock = threading.Lock()

    def activity(self, result: Callable[[dict], Any] = lambda call: {"ok": True}) -> Callable[[dict], Any]:
        def run(call: dict) -> Any:
            with self._lock:
                self.calls.append(dict(call))
            return result(call)
        return run

    def tools(self) -> list[str]:
        with self._lock:
            return [c["_tool"] for c in self.calls]


@pytest.fixture
def mail(harness) -> Seen:
    """Tools `send` (to, subject: strings; `to` required) and `note` (text), served by a started worker."""
    seen = Seen()
    harness.tool("send", params={"to": {"type": "string"}, "subject": {"type": "string"}}, required=["to"])
    harness.tool("note", params={"text": {}})
    harness.activities.register("send", seen.activity(lambda call: {"sent_to": call["to"]}))
    harness.activities.register("note", seen.activity(lambda call: {"noted": call["text"]}))
    start_worker(harness)
    return seen


def held_job(*, send: dict | None = None, approval: bool = True) -> dict:
    """A plan job with a `send` call held for approval and an independent `note` call."""
    call = {"_tool": "send", "to": "a@example.com", "subject": "hello", "_outputPath": "†state.mail"} | (send or {})
    job: dict = {"calls": [call, {"_tool": "note", "text": "first", "_outputPath": "†state.note"}]}
    if approval:
        job["options"] = {"approval": ["send"]}
    return job


def submit_held(harness, mail: Seen, job: dict) -> tuple[Any, Any, str]:
    """Submit `job`; once its `note` call is done, the `send` call is still held: (client, handle, its id)."""
    client = harness.client()
    handle = client.submit(job)
    send, note = (call["id"] for call in handle.calls()[:2])  # held_job's first two calls
    wait_status(client, handle.id, note, "done")
    assert call_status(client, handle.id, send) == "awaiting_approval"
    assert handle.status() == "awaiting_approval"
    assert "send" not in mail.tools()
    return client, handle, send


# ---------------------------------------------------------------------------------------------- approve


@pytest.mark.parametrize("how", ["options.approval", "x-approval"])
def test_a_call_needing_approval_waits_then_runs_once_approved(harness, how) -> None:
    seen = Seen()
    schema = tool_schema("wire", params={"amount": {"type": "number"}})
    if how == "x-approval":
        schema["x-approval"] = "required"
    harness.tools.register("wire", schema)
    harness.tool("note", params={"text": {}})
    harness.activities.register("wire", seen.activity(lambda call: {"wired": call["amount"]}))
    harness.activities.register("note", seen.activity(lambda call: call["text"]))
    start_worker(harness)
    job: dict = {"calls": [{"_tool": "wire", "amount": 10, "_outputPath": "†state.wire"},
                           {"_tool": "note", "text": "beside", "_outputPath": "†state.note"}]}
    if how == "options.approval":
        job["options"] = {"approval": ["wire"]}
    client = harness.client()
    handle = client.submit(job)
    assert handle.status() == "awaiting_approval"  # from its submission on
    calls = by_tool(handle)
    wire = calls["wire"]["id"]
    wait_status(client, handle.id, calls["note"]["id"], "done")

    waiting = by_tool(handle)["wire"]
    assert (waiting["status"], waiting["attempts"], waiting["started_at"]) == ("awaiting_approval", 0, None)
    assert handle.status() == "awaiting_approval"  # the job too, while a call waits
    assert seen.tools() == ["note"]  # the worker ran the other call, never the held one

    approved = handle.approve(wire)
    assert approved["id"] == wire and approved["status"] in ("ready", "running", "done")
    record = handle.result(timeout=TIMEOUT)
    assert record["status"] == "succeeded", record
    assert record["state"] == {"wire": {"wired": 10}, "note": "beside"}
    assert sorted(seen.tools()) == ["note", "wire"]
    done = by_tool(handle)["wire"]
    assert (done["status"], done["attempts"], done["error"]) == ("done", 1, None)
    events = [e.event for e in handle.events(follow=False)]
    assert events.count("job.started") == 1 and events[-1] == "job.finished"


def test_a_job_held_from_its_submission_starts_when_its_approved_call_runs(harness, mail):
    client = harness.client()
    handle = client.submit({"calls": [{"_tool": "send", "to": "x@example.com", "_outputPath": "†state.mail"}],
                            "options": {"approval": ["send"]}})
    assert handle.status() == "awaiting_approval"
    (call,) = handle.calls()
    handle.approve(call["id"])
    assert handle.result(timeout=TIMEOUT)["status"] == "succeeded"
    events = [e.event for e in handle.events(follow=False)]
    assert events == ["job.queued", "call.awaiting_approval", "job.started", "call.started", "call.finished",
                      "job.finished"]
    assert store_of(client).job_info(handle.id).started_at is not None


def test_approving_twice_or_a_call_that_is_not_held_is_a_conflict(harness, mail):
    _, handle, send = submit_held(harness, mail, held_job())
    handle.approve(send)
    with pytest.raises(ConflictError, match="not awaiting approval"):
        handle.approve(send)
    note = handle.calls()[1]["id"]
    for decide in (lambda: handle.approve(note), lambda: handle.reject(note, "no"),
                   lambda: handle.edit(note, {"text": "changed"})):
        with pytest.raises(ConflictError, match="is done, not awaiting approval"):
            decide()
    assert handle.result(timeout=TIMEOUT)["status"] == "succeeded"
    with pytest.raises(ConflictError):
        handle.reject(send)  # the job ended meanwhile: still a conflict, nothing written
    assert sum(1 for c in mail.tools() if c == "send") == 1


def test_unknown_job_or_call(harness, mail):
    client, handle, _ = submit_held(harness, mail, held_job())
    with pytest.raises(CallNotFoundError, match="call_nope"):
        handle.approve("call_nope")
    with pytest.raises(CallNotFoundError):
        client.reject(handle.id, "call_nope", reason="x")
    with pytest.raises(CallNotFoundError):
        client.edit(handle.id, "call_nope", {"to": "b@example.com"})
    with pytest.raises(JobNotFoundError):
        client.approve("job_nope", "call_nope")
    with pytest.raises(JobNotFoundError):
        client.calls("job_nope")
    assert handle.status() == "awaiting_approval"


# ----------------------------------------------------------------------------------------------- reject


def test_reject_fails_the_call_with_the_reason_and_the_plan_job_fails(harness, mail):
    client, handle, send = submit_held(harness, mail, held_job())
    rejected = handle.reject(send, reason="too risky")
    message = "rejected by reviewer: too risky"
    assert rejected["status"] == "failed"
    assert rejected["error"] == {"type": "Rejected", "message": message}
    record = handle.result(timeout=TIMEOUT)
    assert record["status"] == "failed", record
    assert send in record["error"]["message"]
    assert record["state"] == {"note": {"noted": "first"}}  # what the other call wrote stays
    errors = [m for m in store_of(client).read_log(handle.id) if m["type"] == "error"]
    assert len(errors) == 1 and message in str(errors[0])
    assert "send" not in mail.tools()
    call = by_tool(handle)["send"]
    assert (call["status"], call["attempts"], call["started_at"], call["error"]["message"]) == (
        "failed", 0, None, message)
    assert call["finished_at"] is not None
    finished = [e.data for e in handle.events(follow=False) if e.event == "call.finished" and e.data["call_id"] == send]
    assert [(e["status"], e["error"]["message"]) for e in finished] == [("failed", message)]


def test_reject_without_a_reason(harness, mail):
    _, handle, send = submit_held(harness, mail, held_job())
    assert handle.reject(send)["error"]["message"] == "rejected by reviewer"
    assert handle.result(timeout=TIMEOUT)["status"] == "failed"


def test_reject_of_a_call_with_alternatives_writes_the_error_to_the_last_one_and_the_job_goes_on(harness, mail):
    job = held_job(send={"_outputPath": "†state.mail || †state.mailRefused"})
    job["calls"].append({"_tool": "note", "text": "†state.mail || †state.mailRefused", "_outputPath": "†state.after"})
    client, handle, send = submit_held(harness, mail, job)
    handle.reject(send, reason="not now")
    record = handle.result(timeout=TIMEOUT)
    assert record["status"] == "succeeded", record
    refused = {"error": {"type": "Rejected", "message": "rejected by reviewer: not now"}}
    assert record["state"]["mailRefused"] == refused
    assert "mail" not in record["state"]
    assert record["state"]["after"] == {"noted": refused}  # the branch's reader ran on the error object
    assert not [m for m in store_of(client).read_log(handle.id) if m["type"] == "error"]


# ------------------------------------------------------------------------------------------------- edit


def test_edit_runs_the_call_with_the_new_params_and_keeps_its_meta_fields(harness, mail):
    job = held_job(send={"_instance": "eu", "_reasoningForCall": "tell the customer"})
    client, handle, send = submit_held(harness, mail, job)
    edited = handle.edit(send, {"to": "b@example.com"})
    assert edited["id"] == send and edited["instance"] == "eu" and edited["output_path"] == "†state.mail"
    record = handle.result(timeout=TIMEOUT)
    assert record["status"] == "succeeded", record
    assert record["instances"]["eu"]["mail"] == {"sent_to": "b@example.com"}
    (received,) = [c for c in mail.calls if c["_tool"] == "send"]
    assert received["to"] == "b@example.com"
    assert "subject" not in received  # the new params replace the old ones
    assert (received["_outputPath"], received["_instance"], received["_reasoningForCall"]) == (
        "†state.mail", "eu", "tell the customer")
    stored = store_of(client).call_records(handle.id, [send])[send].call
    assert stored == {"_tool": "send", "_activity": "send", "_outputPath": "†state.mail", "_instance": "eu",
                      "_reasoningForCall": "tell the customer", "to": "b@example.com"}


def test_edit_with_invalid_params_names_each_problem_and_changes_nothing(harness, mail) -> None:
    client, handle, send = submit_held(harness, mail, held_job())
    before = store_of(client).call_records(handle.id, [send])[send]
    with pytest.raises(JobValidationError) as caught:
        handle.edit(send, {"subject": 42})
    assert sorted((p.pointer, p.message) for p in caught.value.problems) == [
        ("/params", "missing required property 'to'"), ("/params/subject", "42 is not of type 'string'")]
    with pytest.raises(JobValidationError) as meta:
        handle.edit(send, {"to": "b@example.com", "_outputPath": "†state.elsewhere"})
    assert [(p.pointer, "meta fields cannot be edited" in p.message) for p in meta.value.problems] == [
        ("/params", True)]
    with pytest.raises(JobValidationError, match="params must be an object"):
        handle.edit(send, ["to", "b@example.com"])
    assert store_of(client).call_records(handle.id, [send])[send] == before
    assert call_status(client, handle.id, send) == "awaiting_approval"
    assert handle.status() == "awaiting_approval"
    assert "send" not in mail.tools()
    handle.approve(send)  # still decidable, as it was
    assert handle.result(timeout=TIMEOUT)["state"]["mail"] == {"sent_to": "a@example.com"}


# ------------------------------------------------------------------------------------------ dependencies


def test_a_call_that_reads_a_held_calls_output_runs_only_after_the_approval(harness, mail):
    job = held_job()
    job["calls"].append({"_tool": "note", "text": "†state.mail.sent_to", "_outputPath": "†state.confirmed"})
    _, handle, send = submit_held(harness, mail, job)
    calls = handle.calls()
    reader = calls[2]
    assert [c["tool"] for c in calls] == ["send", "note", "note"]  # in the order of the job's calls
    assert reader["depends_on"] == [send] and reader["status"] == "pending" and calls[0]["depends_on"] == []
    assert mail.tools() == ["note"]
    handle.approve(send)
    record = handle.result(timeout=TIMEOUT)
    assert record["status"] == "succeeded", record
    assert record["state"]["confirmed"] == {"noted": "a@example.com"}
    assert mail.tools() == ["note", "send", "note"]
    after = {c["id"]: c for c in handle.calls()}
    assert after[reader["id"]]["started_at"] >= after[send]["finished_at"]


def test_a_held_call_released_by_its_dependency_waits_for_approval_then(harness):
    seen, go = Seen(), threading.Event()
    harness.tool("lookup", params={})
    harness.tool("send", params={"to": {"type": "string"}}, required=["to"])
    harness.activities.register("lookup", seen.activity(lambda call: go.wait(TIMEOUT) and "b@example.com"))
    harness.activities.register("send", seen.activity(lambda call: {"sent_to": call["to"]}))
    start_worker(harness)
    client = harness.client()
    handle = client.submit({"calls": [
        {"_tool": "lookup", "_outputPath": "†state.address"},
        {"_tool": "send", "to": "†state.address", "_outputPath": "†state.mail"},
    ], "options": {"approval": ["send"]}})
    first, second = handle.calls()
    assert second["depends_on"] == [first["id"]] and second["status"] == "pending"
    assert handle.status() in ("queued", "running")  # nothing waits for a reviewer yet
    go.set()
    wait_status(client, handle.id, second["id"], "awaiting_approval")
    assert handle.status() == "awaiting_approval"
    assert seen.tools() == ["lookup"]
    handle.approve(second["id"])
    record = handle.result(timeout=TIMEOUT)
    assert record["state"]["mail"] == {"sent_to": "b@example.com"}
    assert seen.tools() == ["lookup", "send"]


# ------------------------------------------------------------------------------------------ calls view


def test_calls_view_shape_attempts_and_durations(harness):
    failures = {"left": 1}

    def flaky(call: dict) -> dict:
        if failures["left"]:
            failures["left"] -= 1
            raise RuntimeError("try again")
        time.sleep(0.05)
        return {"ok": call["n"]}

    harness.tool("flaky", params={"n": {"type": "integer"}})
    harness.tool("broken", params={})
    harness.activities.register("flaky", flaky, retries=2, retry_backoff=0.05)

    def broken(call: dict) -> None:
        raise RuntimeError("always broken")

    harness.activities.register("broken", broken)
    start_worker(harness)
    client = harness.client()
    handle = client.submit({"calls": [
        {"_tool": "flaky", "n": 1, "_outputPath": "†state.one", "_instance": "①"},
        {"_tool": "broken", "_outputPath": "†state.two || †state.twoFailed"},
        {"_tool": "flaky", "n": 2, "_outputPath": "†state.three"},
    ]})
    record = handle.result(timeout=TIMEOUT)
    assert record["status"] == "succeeded", record
    calls = handle.calls()
    assert [list(call) for call in calls] == [list(CALL_FIELDS)] * 3
    one, two, three = calls
    assert (one["tool"], one["activity"], one["mode"], one["instance"], one["output_path"]) == (
        "flaky", "flaky", "explicit", "①", "†state.one")
    assert (one["status"], two["status"], three["status"]) == ("done", "failed", "done")
    assert sorted([one["attempts"], three["attempts"]]) == [1, 2]  # one of them took the one failure
    assert two["attempts"] == 1
    assert two["error"] == {"type": "RuntimeError", "message": "always broken"}
    assert one["error"] is None and three["error"] is None
    for call in (one, three):
        assert call["duration_ms"] >= 50
        started, finished = (datetime.fromisoformat(call[k].replace("Z", "+00:00"))
                             for k in ("started_at", "finished_at"))
        assert call["started_at"].endswith("Z") and started < finished
        assert (finished - started).total_seconds() * 1000 >= call["duration_ms"] - 1
    assert three["instance"] is None and three["depends_on"] == [] and one["depends_on"] == []
    assert client.calls(handle.id) == calls


def test_a_held_fire_and_forget_call_keeps_its_job_open_until_decided_and_run(harness, mail):
    """A call without an output path that needs a reviewer is held and awaited: the job does not end while it
    waits, its stream says so, and the job ends once the approved call ran."""
    job = {"calls": [{"_tool": "send", "to": "a@example.com"},  # no output path: fire-and-forget
                     {"_tool": "note", "text": "first", "_outputPath": "†state.note"}],
           "options": {"approval": ["send"]}}
    client, handle, send = submit_held(harness, mail, job)
    held = [e.data for e in handle.events(follow=False) if e.event == "call.awaiting_approval"]
    assert [(e["call_id"], e["tool"]) for e in held] == [(send, "send")]
    handle.approve(send)
    record = handle.result(timeout=TIMEOUT)
    assert record["status"] == "succeeded"
    assert call_status(client, handle.id, send) == "done"
    assert mail.tools().count("send") == 1
