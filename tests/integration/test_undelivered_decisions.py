"""A call approved by a process that died before sending it (docs/protocol.md#approvals): its `@decided` check,
written before the decision, has a dispatcher send it a lease later, and the job ends. Real Redis, a real Celery
worker with its timer loop; the deciding client's `_send` raises as a process killed there would stop (the soak's
`kill-api` can land there: the call stayed `ready`, never admitted, and the reviewer's retry found it decided)."""

from __future__ import annotations

import time

import pytest

from tests.integration.conftest import Harness
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
