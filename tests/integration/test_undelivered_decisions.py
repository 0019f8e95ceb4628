"""A call approved by a process that died before sending it (docs/protocol.md#approvals): its `@decided` check,
written before the decision, has a dispatcher send it a lease later, and the job ends. Real Redis, a real Celery
worker with its timer loop; the deciding client's `_send` raises as a process killed there would stop (the soak's
`kill-api` can land there: the call stayed `ready`, never admitted, and the reviewer's retry found it decided).
A call rejected by a process that died right after the decision's step: the step committed its `Rejected` failure
(once), and its `@rejected` check takes what the dead process did not (the job's end, the calls it released).
And a call made ready by a wait's fire in a dispatcher that died before sending it: the timer loop's claim covers
it (no check needed)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from agentq.errors import ConflictError
from agentq.runtime.timers import CLAIM_MS
from tests.integration.conftest import Harness, store_of
from tests.integration.test_approvals import Seen, call_status, held_job, mail, submit_held, wait_status

pytestmark = pytest.mark.timeout(60)
__all__ = ["mail"]  # the fixture: tools `send` and `note`, served by a started worker


@pytest.mark.parametrize("decision", ["approve", "edit"])
def test_a_call_approved_by_a_process_that_died_before_sending_it_still_runs(harness: Harness, mail: Seen,
                                                                            monkeypatch: pytest.MonkeyPatch,
                                                                            decision: str) -> None:
    client, handle, send = submit_held(harness, mail, held_job())

    def dies(*args: object) -> None:
        raise SystemExit("killed after the decision")

    monkeypatch.setattr(client._parts.jobs, "_send", dies)
    decided = time.monotonic()
    with pytest.raises(SystemExit):
        if decision == "approve":
            handle.approve(send)
        else:
            handle.edit(send, {"to": "b@example.com"})
    assert call_status(client, handle.id, send) == "ready"  # decided, sent by nobody
    record = harness.client().job(handle.id).result(timeout=30)
    ended_s = time.monotonic() - decided
    assert record["status"] == "succeeded", record
    assert mail.tools().count("send") == 1
    wait_status(client, handle.id, send, "done")
    assert ended_s < harness.settings.lease_s + 10, f"the job ended {ended_s:.1f} s after the decision"


class DiesAfterTheDecision:
    """The deciding client's job-progress step after a rejection's step, raising as a process killed there stops."""

    def committed(self, *args: Any) -> None:
        raise SystemExit("killed after the rejection's step")


@pytest.mark.parametrize("shape", ["last call", "released call"])
def test_a_call_rejected_by_a_process_that_died_after_the_decision_still_ends_its_job(
        harness: Harness, mail: Seen, monkeypatch: pytest.MonkeyPatch, shape: str) -> None:
    """`last call`: the rejected call is the job's last open one (the job's end was the dead process's step);
    `released call`: a `||` branch takes its failure and a `note` call reads it (sending that call was)."""
    job = held_job()
    if shape == "released call":
        job = held_job(send={"_outputPath": "†state.mail || †state.mailRefused"})
        job["calls"].append({"_tool": "note", "text": "†state.mailRefused", "_outputPath": "†state.after"})
    client, handle, send = submit_held(harness, mail, job)
    monkeypatch.setattr(client._parts.jobs, "progress", DiesAfterTheDecision())
    decided = time.monotonic()
    with pytest.raises(SystemExit):
        handle.reject(send, reason="too risky")
    message = "rejected by reviewer: too risky"
    assert call_status(client, handle.id, send) == "failed"  # its failure committed with the decision
    assert handle.status() == "running"  # what follows it was the dead process's
    record = harness.client().job(handle.id).result(timeout=30)
    ended_s = time.monotonic() - decided
    assert ended_s < harness.settings.lease_s + 10, f"the job ended {ended_s:.1f} s after the decision"
    refused = {"error": {"type": "Rejected", "message": message}}
    if shape == "last call":
        assert record["status"] == "failed" and send in record["error"]["message"], record
    else:
        assert record["status"] == "succeeded", record
        assert record["state"]["after"] == {"noted": refused}
    assert "send" not in mail.tools()
    events = [e.data for e in handle.events(follow=False)]
    finished = [e for e in events if e["event"] == "call.finished" and e["call_id"] == send]
    assert [(e["status"], e["error"]) for e in finished] == [("failed", refused["error"])]  # rejected once
    assert [e["event"] for e in events].count("job.finished") == 1
    for decide in (lambda: handle.reject(send, reason="again"), lambda: handle.approve(send)):
        with pytest.raises(ConflictError, match="is failed, not awaiting approval"):
            decide()
    errors = [m for m in store_of(client).read_log(handle.id) if m["type"] == "error"]
    assert len(errors) == (1 if shape == "last call" else 0)


class DiesOnceAfterTheCommit:
    """A wait's job-progress step that fails once after the wait's commit, as a dispatcher killed there: the
    dependents it would send stay `ready`, unsent."""

    def __init__(self, progress: Any):
        self.progress = progress
        self.died = False

    def committed(self, *args: Any) -> None:
        if not self.died:
            self.died = True
            raise RuntimeError("killed after the wait's commit")
        self.progress.committed(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.progress, name)


def test_a_call_made_ready_by_a_wait_fired_by_a_dispatcher_that_died_still_runs(harness: Harness) -> None:
    """Covered by the timer loop's claim: the wait's entry is dropped only after its job's step, so it comes back
    when the dying dispatcher's claim runs out (`CLAIM_MS`), finds the wait done and sends its ready dependents
    (`JobProgress.recover`)."""
    seen = Seen()
    harness.tool("note", params={"text": {}})
    harness.activities.register("note", seen.activity(lambda call: call["text"]))
    worker = harness.worker()
    waits = worker.runtime.executor.waits
    dying = waits.progress = DiesOnceAfterTheCommit(waits.progress)
    handle = harness.client().submit({"tools": ["sleep", "note"], "calls": [
        {"_tool": "sleep", "seconds": 0, "_outputPath": "†state.slept"},
        {"_tool": "note", "text": "†state.slept.woke_at", "_outputPath": "†state.note"}]})
    record = handle.result(timeout=CLAIM_MS / 1000 + 20)
    assert dying.died
    assert record["status"] == "succeeded" and record["state"]["note"] == record["state"]["slept"]["woke_at"]
    assert seen.tools() == ["note"]
